//! The per-shard tail cache: recently appended batches of every partition
//! the shard owns, so consumers at the tail are served without disk reads.
//!
//! Each partition keeps its cached batches contiguous, ending at its log end;
//! the shard keeps one FIFO of all insertions and evicts the oldest when the
//! shard's byte limit is passed. Lives on one shard.
//!
//! A cached batch's body shares the memory of the request frame it came in
//! (nothing is copied to cache it), so the frame lives until the last of its
//! batches is evicted: the limit counts batch bytes, and the memory held is
//! at most a request's worth more per partition.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use weir_storage::Chunks;

/// One cached batch.
#[derive(Debug, Clone)]
pub struct CachedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The batch as stored (patched header, shared body).
    pub bytes: Chunks,
}

/// A partition's part of the cache.
#[derive(Debug, Default)]
pub struct PartitionCache {
    batches: RefCell<VecDeque<CachedBatch>>,
    /// Batches dropped here before the shard's FIFO evicted them (they
    /// are always the oldest): its next entries for this partition are
    /// theirs, and evict nothing more.
    forgotten: Cell<usize>,
}

impl PartitionCache {
    /// Whole batches from the one holding `offset`, below `high_watermark`,
    /// up to about `max_bytes` (at least one). `None` when the cache does
    /// not reach back to `offset`. The batches' pieces are gathered, not
    /// copied.
    pub fn read(&self, offset: i64, max_bytes: usize, high_watermark: i64) -> Option<Chunks> {
        let batches = self.batches.borrow();
        let first = batches.front()?;
        if offset < first.base_offset {
            return None;
        }
        let i = batches.partition_point(|b| b.last_offset < offset);
        let mut picked = Chunks::default();
        for b in batches.range(i..) {
            if b.last_offset >= high_watermark {
                break;
            }
            if !picked.is_empty() && picked.len() + b.bytes.len() > max_bytes {
                break;
            }
            picked.extend_from(&b.bytes);
        }
        Some(picked)
    }

    fn push(&self, batch: CachedBatch) {
        let mut batches = self.batches.borrow_mut();
        if let Some(last) = batches.back() {
            debug_assert_eq!(
                last.last_offset + 1,
                batch.base_offset,
                "cache is contiguous"
            );
        }
        batches.push_back(batch);
    }

    fn pop_front(&self) {
        match self.forgotten.get() {
            0 => {
                self.batches.borrow_mut().pop_front();
            }
            n => self.forgotten.set(n - 1),
        }
    }

    /// Forgets everything (the log was truncated or deleted).
    pub fn clear(&self) {
        let mut batches = self.batches.borrow_mut();
        self.forgotten.set(self.forgotten.get() + batches.len());
        batches.clear();
    }

    /// Forgets the batches wholly before `offset` (compaction rewrote
    /// them: readers get them from the log, cleaned).
    pub fn forget_below(&self, offset: i64) {
        let mut batches = self.batches.borrow_mut();
        while batches.front().is_some_and(|b| b.last_offset < offset) {
            batches.pop_front();
            self.forgotten.set(self.forgotten.get() + 1);
        }
    }
}

/// The shard's cache budget and eviction order.
pub struct TailCache {
    limit: usize,
    bytes: usize,
    order: VecDeque<(Weak<PartitionCache>, usize)>,
}

impl TailCache {
    pub fn new(limit: usize) -> TailCache {
        TailCache {
            limit,
            bytes: 0,
            order: VecDeque::new(),
        }
    }

    pub fn insert(&mut self, part: &Rc<PartitionCache>, batch: CachedBatch) {
        let len = batch.bytes.len();
        if len > self.limit {
            // Too big to cache: the partition's cache would stop being
            // contiguous, so it starts over after this batch.
            part.clear();
            return;
        }
        part.push(batch);
        self.order.push_back((Rc::downgrade(part), len));
        self.bytes += len;
        while self.bytes > self.limit {
            let Some((p, len)) = self.order.pop_front() else {
                break;
            };
            self.bytes -= len;
            if let Some(p) = p.upgrade() {
                p.pop_front();
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, len: usize) -> CachedBatch {
        CachedBatch {
            base_offset: base,
            last_offset: base + 1,
            bytes: bytes::Bytes::from(vec![base as u8; len]).into(),
        }
    }

    #[test]
    fn reads_and_evicts_in_order() {
        let mut cache = TailCache::new(250);
        let a = Rc::new(PartitionCache::default());
        let b = Rc::new(PartitionCache::default());
        cache.insert(&a, batch(0, 100));
        cache.insert(&b, batch(0, 100));
        cache.insert(&a, batch(2, 100));
        // a@0 was evicted first.
        assert!(a.read(0, 1000, 10).is_none());
        assert_eq!(a.read(2, 1000, 10).unwrap().len(), 100);
        assert_eq!(b.read(1, 1000, 10).unwrap().len(), 100);
        assert!(cache.bytes() <= 250);
        // Nothing at or past the high watermark.
        assert_eq!(a.read(2, 1000, 3).unwrap().len(), 0);
        cache.insert(&a, batch(4, 100));
        assert_eq!(a.read(2, 150, 10).unwrap().len(), 100);
    }

    #[test]
    fn forgotten_batches_are_not_evicted_twice() {
        let mut cache = TailCache::new(300);
        let a = Rc::new(PartitionCache::default());
        for base in [0, 2, 4] {
            cache.insert(&a, batch(base, 100));
        }
        a.forget_below(4);
        assert!(a.read(2, 1000, 10).is_none());
        assert_eq!(a.read(4, 1000, 10).unwrap().len(), 100);
        // The FIFO's entries for the forgotten two go without taking 4 or 6.
        cache.insert(&a, batch(6, 100));
        cache.insert(&a, batch(8, 100));
        assert_eq!(a.read(4, 1000, 10).unwrap().len(), 300);
        a.clear();
        cache.insert(&a, batch(10, 100));
        assert_eq!(a.read(10, 1000, 20).unwrap().len(), 100);
    }
}
