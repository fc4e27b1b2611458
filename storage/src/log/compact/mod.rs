//! Log compaction: Kafka's log cleaner, per partition, on its owner.
//!
//! A pass looks at the sealed segments below the first uncleanable offset
//! (the active segment's base, the last stable offset, and the first
//! segment holding records newer than `min.compaction.lag.ms`). It runs
//! when the records not yet cleaned (the segments from `first_dirty` on)
//! make `min.cleanable.dirty.ratio` of those bytes, when a dirty segment
//! is older than `max.compaction.lag.ms`, or when a tombstone an earlier
//! pass kept is due to go. It maps every key of the dirty segments to its
//! latest offset (within `map_budget` bytes: a larger dirty section is
//! cleaned over several passes), then rewrites the segments from the
//! log's first up to where the map reaches, each group of neighbours
//! (together at most `segment.bytes`) into one new segment: a record stays
//! if it is its key's latest (or has no key), a tombstone until its
//! batch's delete horizon (KIP-534: the first pass that keeps it stamps
//! the batch with `delete.retention.ms` from then). Offsets keep
//! their values and readers step over the gaps. Control batches
//! (transaction markers) and aborted transactions' batches stay whole and
//! map nothing, so an aborted write never hides a committed one. A batch
//! of which some records stay is rebuilt of those records' bytes, with
//! its offsets' span, timestamps, producer fields and codec as they were.
//!
//! Crash safety: a group's new segment is written aside
//! (`{base}.log.cleaned` and its index files), synced, then renamed to
//! `{base}.{end}.swap` — the commit — after which the segments it replaces
//! are removed and it takes `{base}.log` (`segment::complete_swap`).
//! Opening a log finishes a swap found committed and removes cleaned files
//! that never were (`finish_interrupted`): a kill at any moment leaves the
//! old segments or the new one, never a mix.
//!
//! The pass is driven from here (`clean_pass`); its steps are in the child
//! modules: `batches` (a segment's batches and records as read),
//! `key_map`, `keep` (what stays of a batch), `rewrite` (the new
//! segment), `swap` (its commit, and finishing a cut-short one at open),
//! `state` (the cleaner's saved progress).

use std::rc::Rc;

use glommio::io::DmaFile;

use super::*;

mod batches;
mod keep;
mod key_map;
mod rewrite;
mod state;
mod swap;

use rewrite::Rewrite;
pub(super) use state::CleanerState;
pub(super) use swap::finish_interrupted;
use swap::remove_cleaned;

/// What a cleaning pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// Segments read and rewritten, and the segments written for them.
    pub segments_in: usize,
    pub segments_out: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Records dropped: superseded by a later one of their key, or
    /// tombstones past `delete.retention.ms`.
    pub records_removed: u64,
}

/// A sealed segment as a pass sees it.
struct SegInfo {
    base: i64,
    end: i64,
    size: u64,
    file: Rc<DmaFile>,
    max_timestamp: i64,
}

impl PartitionLog {
    /// Runs a cleaning pass if the log is compacted and one is due (see
    /// the module's comment), keeping its key map within `map_budget`
    /// bytes. Returns what it did; `None` when nothing was due (or a pass
    /// is already running).
    pub async fn compact(
        &self,
        now_ms: i64,
        map_budget: usize,
    ) -> Result<Option<Cleaned>, StorageError> {
        let Some(c) = self.config.get().compaction else {
            return Ok(None);
        };
        if self.compacting.replace(true) {
            return Ok(None);
        }
        let r = self.clean_pass(now_ms, c, map_budget).await;
        self.compacting.set(false);
        r
    }

    /// The offset below which every segment has been cleaned.
    pub fn cleaned_to(&self) -> i64 {
        self.cleaner.get().first_dirty.max(self.log_start())
    }

    /// The sealed segments a pass may clean, oldest first.
    fn cleanable(&self, now_ms: i64, c: &Compaction) -> Vec<SegInfo> {
        let stable = self.last_stable_offset();
        let st = self.state.borrow();
        let active = *st.segments.keys().next_back().expect("a segment");
        let mut out = Vec::new();
        for seg in st.segments.values() {
            // A damaged segment is kept as it is (rewriting it would drop
            // what cannot be read), and so is what follows it.
            if !seg.sealed()
                || seg.base() == active
                || seg.next_offset() > stable
                || seg.damaged_from().is_some()
            {
                break;
            }
            if c.min_lag_ms > 0 && seg.max_timestamp() > now_ms.saturating_sub(c.min_lag_ms) {
                break;
            }
            out.push(SegInfo {
                base: seg.base(),
                end: seg.next_offset(),
                size: seg.size(),
                file: seg.file().clone(),
                max_timestamp: seg.max_timestamp(),
            });
        }
        out
    }

    /// One pass: whether one is due, the key map of the dirty segments,
    /// the segments up to where it reaches rewritten group by group (each
    /// new segment swapped in as it is finished), the progress saved.
    async fn clean_pass(
        &self,
        now_ms: i64,
        c: Compaction,
        map_budget: usize,
    ) -> Result<Option<Cleaned>, StorageError> {
        let segs = self.cleanable(now_ms, &c);
        let Some(first) = segs.first() else {
            return Ok(None);
        };
        let state = self.cleaner.get();
        let first_dirty = state.first_dirty.max(first.base);
        let dirty: Vec<&SegInfo> = segs.iter().filter(|s| s.end > first_dirty).collect();
        let dirty_bytes: u64 = dirty.iter().map(|s| s.size).sum();
        let all_bytes: u64 = segs.iter().map(|s| s.size).sum();
        let ratio_due = dirty_bytes > 0
            && dirty_bytes as u128 * 1_000_000 >= c.min_dirty_ratio_ppm as u128 * all_bytes as u128;
        let lag_due = dirty
            .iter()
            .any(|s| s.max_timestamp >= 0 && now_ms.saturating_sub(s.max_timestamp) > c.max_lag_ms);
        let tombstones_due = state.tombstones_due.is_some_and(|t| t <= now_ms);
        if !(ratio_due || lag_due || tombstones_due) {
            return Ok(None);
        }
        let (map, map_end) = self.key_map(&dirty, first_dirty, map_budget).await?;
        let mut done = Cleaned::default();
        let mut due: Option<i64> = None;
        let segment_bytes = self.config.get().segment_bytes.min(u32::MAX as u64);
        // Neighbours go into one new segment while what it holds so far and
        // the next one's bytes (what stays of them is no more) fit in
        // `segment.bytes`, and its offsets in the index's 32 bits.
        let mut rw: Option<Rewrite<'_>> = None;
        for s in segs.iter().filter(|s| s.end <= map_end) {
            if self.closed.get() {
                break;
            }
            if let Some(r) = rw.take() {
                if r.seg.size() + s.size <= segment_bytes && s.end - r.seg.base() <= i32::MAX as i64
                {
                    rw = Some(r);
                } else {
                    due = earlier(due, r.due);
                    self.finish_rewrite(r, &mut done).await?;
                }
            }
            let r = match rw.as_mut() {
                Some(r) => r,
                None => rw.insert(self.start_rewrite(s.base, now_ms).await?),
            };
            if let Err(e) = self.rewrite_segment(r, s, &map, now_ms, &c).await {
                remove_cleaned(&self.dir, r.seg.base());
                return Err(e);
            }
        }
        if let Some(r) = rw.take() {
            due = earlier(due, r.due);
            self.finish_rewrite(r, &mut done).await?;
        }
        if self.closed.get() {
            return Ok(Some(done));
        }
        let state = CleanerState {
            first_dirty: map_end.max(state.first_dirty),
            tombstones_due: due,
        };
        state.save(&self.dir)?;
        self.cleaner.set(state);
        Ok(Some(done))
    }
}

/// The earlier of two times, either of which may be missing.
fn earlier(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
