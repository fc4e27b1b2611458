//! Bytes in pieces. A stored batch is two pieces: its header with the
//! assigned `baseOffset` (a 61-byte copy) and the producer's bytes after it,
//! shared with the request frame rather than copied. Reads gather the
//! pieces of several batches; the connection writes them with one vectored
//! send, so neither produce nor fetch copies a batch's body in memory.
//!
//! Pieces are bytes alone here: what they mean (counting a read's records
//! from its batch headers, `Chunks::record_count`) is in `batch`, which
//! builds on this module and not the other way round.

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
