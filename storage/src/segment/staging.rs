//! A segment's bytes not yet known durable, and the padding that ends a
//! flush (see the segment's comment).

use std::collections::VecDeque;

use bytes::Bytes;

use super::ALIGN;

/// Padding is at most 1/this of the bytes the flush it ends adds.
pub(super) const MAX_PADDING_SHARE: u64 = 4;

/// Zeros for padding (at most a block and `PAD_MIN` bytes).
pub(super) static PADDING: [u8; 2 * ALIGN as usize] = [0; 2 * ALIGN as usize];

/// Bytes not yet known durable, from an aligned file position: the stored
/// batches themselves (shared with the tail cache), and after a flush the
/// partial last block, which the next flush writes again whole.
#[derive(Default)]
pub(super) struct Staging {
    pub(super) from: u64,
    chunks: VecDeque<Bytes>,
    pub(super) len: usize,
}

impl Staging {
    /// Nothing staged: the next byte is at `from` (aligned).
    pub(super) fn at(from: u64) -> Staging {
        Staging {
            from,
            ..Staging::default()
        }
    }

    pub(super) fn push(&mut self, b: Bytes) {
        self.len += b.len();
        self.chunks.push_back(b);
    }

    /// Copies the staged bytes from file position `from` to the end (large
    /// pieces with streaming stores: the caller fences).
    pub(super) fn copy_into(&self, from: u64, out: &mut [u8]) {
        assert!(from >= self.from);
        let mut skip = (from - self.from) as usize;
        assert_eq!(out.len() + skip, self.len);
        let mut at = 0;
        for c in &self.chunks {
            if skip >= c.len() {
                skip -= c.len();
                continue;
            }
            let part = &c[skip..];
            skip = 0;
            crate::dma_copy::copy(&mut out[at..at + part.len()], part);
            at += part.len();
        }
    }

    /// Copies the staged bytes from file position `from` on into `out`
    /// (as many as it holds; large pieces with streaming stores: the
    /// caller fences).
    pub(super) fn copy_range(&self, from: u64, out: &mut [u8]) {
        assert!(from >= self.from);
        let mut skip = (from - self.from) as usize;
        assert!(out.len() + skip <= self.len);
        let mut at = 0;
        for c in &self.chunks {
            if at == out.len() {
                break;
            }
            if skip >= c.len() {
                skip -= c.len();
                continue;
            }
            let part = &c[skip..(skip + out.len() - at).min(c.len())];
            skip = 0;
            crate::dma_copy::copy(&mut out[at..at + part.len()], part);
            at += part.len();
        }
        assert_eq!(at, out.len());
    }

    /// The staged bytes from file position `from` to the end, as shared
    /// pieces (no copy).
    pub(super) fn pieces_from(&self, from: u64) -> Vec<Bytes> {
        assert!(from >= self.from);
        let mut skip = (from - self.from) as usize;
        let mut out = Vec::new();
        for c in &self.chunks {
            if skip >= c.len() {
                skip -= c.len();
                continue;
            }
            out.push(c.slice(skip..));
            skip = 0;
        }
        out
    }

    /// Drops the bytes before `new_from` (now durable whole blocks).
    pub(super) fn advance_to(&mut self, new_from: u64) {
        assert!(new_from >= self.from);
        let mut drop = (new_from - self.from) as usize;
        while drop > 0 {
            let front = self.chunks.front_mut().expect("staged bytes to drop");
            if front.len() <= drop {
                drop -= front.len();
                self.len -= front.len();
                self.chunks.pop_front();
            } else {
                *front = front.slice(drop..);
                self.len -= drop;
                drop = 0;
            }
        }
        self.from = new_from;
    }
}
