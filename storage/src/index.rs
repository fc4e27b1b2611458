//! Sparse per-segment indexes: offset → file position, and time → offset.
//!
//! Both are kept in memory for every open segment and written beside the
//! segment (`.index`, `.timeindex`) when it is sealed. A missing or
//! implausible index file is rebuilt by scanning the segment.

/// One entry every this many bytes of log (Kafka's `index.interval.bytes`).
pub const INDEX_INTERVAL_BYTES: u64 = 4096;

/// Offset index: batches' base offsets (relative to the segment) and their
/// byte positions, both strictly increasing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    pub fn push(&mut self, relative_offset: u32, position: u32) {
        if let Some(&(o, p)) = self.entries.last() {
            assert!(
                relative_offset > o && position > p,
                "offset index must grow"
            );
        }
        self.entries.push((relative_offset, position));
    }

    /// The position of the last indexed batch whose base offset is at most
    /// `relative_offset`, or 0.
    pub fn lookup(&self, relative_offset: u32) -> u32 {
        let i = self.entries.partition_point(|&(o, _)| o <= relative_offset);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    /// Drops entries at or past `position` (after a truncation).
    pub fn truncate_to_position(&mut self, position: u32) {
        self.entries.retain(|&(_, p)| p < position);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 8);
        for &(o, p) in &self.entries {
            out.extend_from_slice(&o.to_be_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
        out
    }

    /// Decodes an index file; `None` when it is not a plausible index for a
    /// segment of `segment_len` bytes (then the caller rebuilds it).
    pub fn decode(b: &[u8], segment_len: u64) -> Option<OffsetIndex> {
        if !b.len().is_multiple_of(8) {
            return None;
        }
        let mut idx = OffsetIndex::default();
        for c in b.chunks_exact(8) {
            let o = u32::from_be_bytes(c[0..4].try_into().ok()?);
            let p = u32::from_be_bytes(c[4..8].try_into().ok()?);
            if let Some(&(lo, lp)) = idx.entries.last() {
                if o <= lo || p <= lp {
                    return None;
                }
            }
            if p as u64 >= segment_len {
                return None;
            }
            idx.entries.push((o, p));
        }
        Some(idx)
    }
}

/// Time index: entries `(T, o)` where `T` is the largest timestamp of every
/// batch before relative offset `o`. Lookup finds where to start scanning for
/// the first batch whose max timestamp reaches a target.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    pub fn push(&mut self, timestamp: i64, relative_offset: u32) {
        match self.entries.last_mut() {
            Some(&mut (t, o)) if timestamp < t || relative_offset <= o => {}
            // Same maximum, later offset: scanning may start later.
            Some(last) if timestamp == last.0 => last.1 = relative_offset,
            _ => self.entries.push((timestamp, relative_offset)),
        }
    }

    /// A relative offset from which to scan for the first batch with a max
    /// timestamp at or after `target`: every batch before it is older.
    pub fn scan_from(&self, target: i64) -> u32 {
        let i = self.entries.partition_point(|&(t, _)| t < target);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    pub fn truncate_to_offset(&mut self, relative_offset: u32) {
        self.entries.retain(|&(_, o)| o < relative_offset);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 12);
        for &(t, o) in &self.entries {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&o.to_be_bytes());
        }
        out
    }

    pub fn decode(b: &[u8]) -> Option<TimeIndex> {
        if !b.len().is_multiple_of(12) {
            return None;
        }
        let mut idx = TimeIndex::default();
        for c in b.chunks_exact(12) {
            let t = i64::from_be_bytes(c[0..8].try_into().ok()?);
            let o = u32::from_be_bytes(c[8..12].try_into().ok()?);
            if let Some(&(lt, lo)) = idx.entries.last() {
                if t < lt || o <= lo {
                    return None;
                }
            }
            idx.entries.push((t, o));
        }
        Some(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_lookup_finds_floor() {
        let mut i = OffsetIndex::default();
        i.push(10, 4096);
        i.push(20, 8200);
        assert_eq!(i.lookup(5), 0);
        assert_eq!(i.lookup(10), 4096);
        assert_eq!(i.lookup(19), 4096);
        assert_eq!(i.lookup(25), 8200);
        let round = OffsetIndex::decode(&i.encode(), 9000).unwrap();
        assert_eq!(round, i);
        assert!(OffsetIndex::decode(&i.encode(), 8000).is_none());
        assert!(OffsetIndex::decode(&[0; 7], 100).is_none());
    }

    #[test]
    fn time_scan_starts_before_target() {
        let mut t = TimeIndex::default();
        t.push(100, 0);
        t.push(200, 5);
        t.push(150, 6); // lower than the maximum: ignored
        t.push(200, 7); // same maximum, later offset: replaces
        t.push(300, 9);
        assert_eq!(t.scan_from(50), 0);
        assert_eq!(t.scan_from(200), 0);
        assert_eq!(t.scan_from(201), 7);
        assert_eq!(t.scan_from(1000), 9);
        assert_eq!(TimeIndex::decode(&t.encode()).unwrap(), t);
    }
}
