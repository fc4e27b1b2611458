//! Bytes in pieces. A stored batch is two pieces: its header with the
//! assigned `baseOffset` (a 61-byte copy) and the producer's bytes after it,
//! shared with the request frame rather than copied. Reads gather the
//! pieces of several batches; the connection writes them with one vectored
//! send, so neither produce nor fetch copies a batch's body in memory.

use bytes::{Bytes, BytesMut};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunks {
    parts: Vec<Bytes>,
    len: usize,
}

impl Chunks {
    /// Adds a piece at the end (empty pieces are dropped).
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.parts.push(b);
        }
    }

    /// Adds every piece of `other` at the end (shared, not copied).
    pub fn extend_from(&mut self, other: &Chunks) {
        self.parts.extend(other.parts.iter().cloned());
        self.len += other.len;
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The bytes in one piece: shared when there is one, else copied
    /// together (for readers that parse batches: SQL scans, tests).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts[0].clone(),
            _ => {
                let mut out = BytesMut::with_capacity(self.len);
                for p in &self.parts {
                    out.extend_from_slice(p);
                }
                out.freeze()
            }
        }
    }
}

impl Chunks {
    /// The application records in the whole batches held (control
    /// batches and a cut-off last batch are not counted): what a fetch
    /// delivers, counted from the batch headers alone. One pass over the
    /// pieces, whatever their number.
    pub fn record_count(&self) -> u64 {
        use crate::batch::{BatchHeader, HEADER_LEN};
        let mut header = [0u8; HEADER_LEN];
        // The piece holding byte `start` of the whole, and where it begins.
        let (mut part, mut part_start) = (0usize, 0usize);
        let (mut pos, mut n) = (0usize, 0u64);
        while pos + HEADER_LEN <= self.len {
            while part_start + self.parts[part].len() <= pos {
                part_start += self.parts[part].len();
                part += 1;
            }
            // Gather the header, across pieces if it spans them.
            let (mut filled, mut i, mut at) = (0, part, pos - part_start);
            while filled < HEADER_LEN {
                let piece = &self.parts[i][at..];
                let take = piece.len().min(HEADER_LEN - filled);
                header[filled..filled + take].copy_from_slice(&piece[..take]);
                filled += take;
                i += 1;
                at = 0;
            }
            let h = BatchHeader::parse(&header).expect("a whole header");
            if h.batch_length <= 0 || pos + h.total_len() > self.len {
                break;
            }
            if !h.is_control() {
                n += h.record_count.max(0) as u64;
            }
            pos += h.total_len();
        }
        n
    }
}

impl From<Bytes> for Chunks {
    fn from(b: Bytes) -> Chunks {
        let mut c = Chunks::default();
        c.push(b);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::tests::make_batch;
    use crate::batch::ATTR_CONTROL;

    #[test]
    fn records_are_counted_across_pieces_and_a_cut_off_batch_is_not() {
        let a = make_batch(3, 1, 0);
        let control = make_batch(1, 1, ATTR_CONTROL);
        let b = make_batch(5, 1, 0);
        let mut whole = Vec::new();
        whole.extend_from_slice(&a);
        whole.extend_from_slice(&control);
        whole.extend_from_slice(&b);
        let whole = Bytes::from(whole);
        // Split mid-header and mid-body, as stored batches are pieces.
        let mut c = Chunks::default();
        for (from, to) in [(0, 20), (20, a.len() + 30), (a.len() + 30, whole.len())] {
            c.push(whole.slice(from..to));
        }
        assert_eq!(c.record_count(), 8);
        let mut cut = Chunks::default();
        cut.push(whole.slice(..whole.len() - 1));
        assert_eq!(cut.record_count(), 3);
        assert_eq!(Chunks::default().record_count(), 0);
    }

    #[test]
    fn pieces_keep_their_order_and_length() {
        let mut c = Chunks::from(Bytes::from_static(b"ab"));
        c.push(Bytes::new());
        c.push(Bytes::from_static(b"cde"));
        let mut d = Chunks::default();
        d.extend_from(&c);
        d.push(Bytes::from_static(b"f"));
        assert_eq!(d.len(), 6);
        assert_eq!(d.parts().len(), 3);
        assert_eq!(&d.to_bytes()[..], b"abcdef");
        assert!(Chunks::default().is_empty());
        assert_eq!(Chunks::default().to_bytes(), Bytes::new());
    }
}
