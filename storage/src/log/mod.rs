//! A partition's log: its segments, offset assignment, group-committed
//! durability, reads, time lookups and retention.
//!
//! A `PartitionLog` lives on the shard that owns its partition and is only
//! touched there (it is `!Send`). Offsets are dense: each record takes one.
//! Everything below `durable_offset` (the durable end) is on stable
//! storage (written with O_DSYNC, see `segment`). Readers never see past
//! the high watermark: for an unreplicated log (the default) that is the
//! durable end; for a replicated one (`set_replicated`) the caller sets it
//! as followers catch up (`set_high_watermark`), and followers read up to
//! the durable end (`read_replica`).
//!
//! Replication (`replica`): leader epochs kept beside the segments
//! (`epochs`), a follower's append of batches as its leader stored them
//! (`append_replica`) and truncation (`truncate_to`).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use glommio::sync::Semaphore;

use crate::chunks::Chunks;
use crate::durable::write_small_file;
use crate::producer_state::{AbortedTxn, ProducerStates};
use crate::segment::Segment;
use crate::StorageError;
use flights::Flights;

/// Settings of one partition's log (a topic's configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll a new segment past this many bytes.
    pub segment_bytes: u64,
    /// Roll a new segment this old (ms).
    pub segment_ms: i64,
    /// Delete sealed segments whose newest record is older than this; -1 keeps all.
    pub retention_ms: i64,
    /// Delete the oldest sealed segments while the log is larger; -1 keeps all.
    pub retention_bytes: i64,
    /// Stamp every batch with its append time (Kafka's
    /// `message.timestamp.type=LogAppendTime`).
    pub log_append_time: bool,
    /// Keep the latest record per key (`cleanup.policy=compact`).
    pub compaction: Option<Compaction>,
}

/// How a compacted log is cleaned: Kafka's topic configs of the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// `delete.retention.ms`: a tombstone stays this long after its
    /// segment was last written, so readers see it.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: records newer than this stay as written.
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms`: records older than this are cleaned
    /// whatever the dirty ratio.
    pub max_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`, in millionths: clean once the records
    /// not yet cleaned make at least this share of the cleanable bytes.
    pub min_dirty_ratio_ppm: u32,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            delete_retention_ms: 24 * 3600 * 1000,
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            min_dirty_ratio_ppm: 500_000,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            log_append_time: false,
            compaction: None,
        }
    }
}

mod ahead;
mod append;
mod compact;
#[cfg(test)]
mod compact_tests;
pub mod epochs;
mod flights;
mod flush;
mod flusher;
mod open;
mod read;
mod replica;
#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod tests;
mod write_out;

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The batches' timestamp as stored (the append time for LogAppendTime).
    pub log_append_time: i64,
}

pub use compact::Cleaned;

/// The answer to a read.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, the first containing the requested offset: pieces of
    /// what was read, split where padding was left out.
    pub batches: Chunks,
    pub high_watermark: i64,
    pub log_start: i64,
}

struct LogState {
    segments: BTreeMap<i64, Segment>,
    log_start: i64,
    /// The next offset to assign (log end offset).
    next_offset: i64,
    /// Everything below is durable here (the durable end); readable too
    /// unless the log is replicated.
    durable_offset: i64,
    /// A replicated log's high watermark, set by the caller (`None`: not
    /// replicated, the high watermark is the durable end). Never past the
    /// durable end; only a truncation lowers it.
    replicated_hw: Option<i64>,
    /// A replicated log whose leader is its only in-sync replica: each
    /// flush moves the high watermark to the durable end
    /// (`follow_durable`).
    follows_durable: bool,
    /// Set by a failed write or sync; appends are refused until a flush works.
    failed: Option<String>,
    /// The failure is a journaled log's segment write (`write_out_soon`):
    /// only a segment write that works clears it, not a journal flush.
    write_out_failed: bool,
}

impl LogState {
    /// What readers may see up to: the replicated high watermark, or the
    /// durable end for an unreplicated log.
    fn high_watermark(&self) -> i64 {
        self.replicated_hw.unwrap_or(self.durable_offset)
    }

    /// A flush landed: a replicated log following its durable end moves
    /// its high watermark there.
    fn follow(&mut self) {
        let durable = self.durable_offset;
        if let (true, Some(hw)) = (self.follows_durable, &mut self.replicated_hw) {
            *hw = (*hw).max(durable);
        }
    }

    /// The segments not yet sealed, newest first. Segments become durable in
    /// offset order and are sealed oldest first, so these are the log's
    /// last few: the only ones a flush writes, syncs or seals. A flush need
    /// not walk a long log's sealed segments.
    fn unsealed(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values().rev().take_while(|s| !s.sealed())
    }

    fn unsealed_mut(&mut self) -> impl Iterator<Item = &mut Segment> {
        self.segments.values_mut().rev().take_while(|s| !s.sealed())
    }

    /// Applies a flight that landed after every one before it.
    fn apply(&mut self, f: &flights::Flight) {
        if f.void {
            return;
        }
        for &(base, end) in &f.ends {
            if let Some(seg) = self.segments.get_mut(&base) {
                seg.complete_flush(end);
            }
        }
        // Pair assertions (checked again where reads take the high
        // watermark): it only moves up, and never past the log end.
        assert!(
            f.target <= self.next_offset,
            "flight {} made offset {} durable, past the log end {}",
            f.id,
            f.target,
            self.next_offset
        );
        assert!(
            f.target >= self.durable_offset,
            "flight {} would move the high watermark back from {} to {}",
            f.id,
            self.durable_offset,
            f.target
        );
        self.durable_offset = f.target;
        if f.clears_failure && !self.write_out_failed {
            self.failed = None;
        }
    }
}

/// How long one flush waited for an earlier write (a flush that wrote a
/// block it writes again, all of them before a retry, or zeros being
/// written ahead where it writes), and how long its own durable writes
/// (and any preallocation) took.
#[derive(Debug, Clone, Copy)]
pub struct FlushTimes {
    pub wait: std::time::Duration,
    pub write: std::time::Duration,
}

/// Writes all of `buf` at `pos`: glommio returns how much a direct write
/// wrote and does not retry, so a short write (a full disk, say) is an
/// error here rather than bytes silently missing.
async fn write_whole(
    file: &glommio::io::DmaFile,
    buf: glommio::io::DmaBuffer,
    pos: u64,
) -> Result<(), String> {
    #[cfg(test)]
    if let Some(r) = crate::sim_disk::write(file, buf.as_bytes(), pos).await {
        return r;
    }
    let len = buf.len();
    match file.write_at(buf, pos).await {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(format!("short write ({n} of {len} bytes)")),
        Err(e) => Err(e.to_string()),
    }
}

/// One partition's log. Lives on the shard that owns the partition.
pub struct PartitionLog {
    dir: PathBuf,
    config: Cell<LogConfig>,
    state: RefCell<LogState>,
    /// Serialises appends that may roll a segment (an await inside).
    append_lock: Semaphore,
    /// Flushes whose writes may be in flight, in the order prepared.
    flights: RefCell<Flights>,
    /// Held while a piece of zeros is written ahead, and by a seal's
    /// truncate.
    zero_lock: Semaphore,
    /// The segment and start of the piece of zeros being written.
    zeroing: Cell<Option<(i64, u64)>>,
    /// Bytes the last flush wrote (zeroing ahead pays off for small ones).
    last_flush_bytes: Cell<u64>,
    /// Idempotent producers' recent sequences.
    producers: RefCell<ProducerStates>,
    /// One read ahead for the latest sequential reader from disk.
    readahead: RefCell<Option<ReadAhead>>,
    /// The flusher tasks and the high watermark's waiters.
    flushers: flusher::Flushers,
    /// How far compaction has cleaned (kept in `cleaner_path`).
    cleaner: Cell<compact::CleanerState>,
    /// A cleaning pass is running (one at a time).
    compacting: Cell<bool>,
    /// Closed or destroyed: a cleaning pass still running swaps nothing in.
    closed: Cell<bool>,
    /// Batches found failing their CRC-32C, by (segment, byte): never
    /// served, each logged once.
    corrupt: RefCell<std::collections::BTreeSet<(i64, u64)>>,
    /// Which leader epoch began where (`epochs`), as on disk but for a
    /// move of the log start (written at the next change).
    epochs: RefCell<epochs::EpochCache>,
    /// The leader epoch `append` stamps into batches (`set_leader_epoch`);
    /// `batch::LEADER_EPOCH` until a leader sets one.
    stamp_epoch: Cell<i32>,
    /// The leader epoch a replicated log follows another leader in
    /// (`stop_leading`): a leader's `append` is refused until
    /// `set_leader_epoch`, and a follower's copy or truncation is taken
    /// only in this epoch (one from an earlier leader's late answer is
    /// refused). `None` while it leads or was never replicated.
    following: Cell<Option<i32>>,
    /// The shard's journal its flushes are made durable in (one write
    /// for all the shard's partitions); `None`: each flush is its own
    /// O_DSYNC write.
    journal: Option<std::rc::Rc<crate::journal::Journal>>,
    /// A task sealing finished segments runs (`seal_soon`).
    sealing: Cell<bool>,
    /// This log, for the journal's checkpoints (set once it is in an
    /// `Rc`: `remember_self`).
    self_weak: RefCell<std::rc::Weak<PartitionLog>>,
    /// One `write_out` at a time, and whether a task for it runs.
    write_out_lock: Semaphore,
    writing_out: Cell<bool>,
}

/// Bytes being read ahead: the batches from `offset`, at `pos` in segment
/// `seg_base`.
struct ReadAhead {
    offset: i64,
    seg_base: i64,
    pos: u64,
    task: glommio::task::JoinHandle<Result<Bytes, StorageError>>,
}

impl PartitionLog {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn set_config(&self, config: LogConfig) {
        self.config.set(config);
    }

    pub fn config(&self) -> LogConfig {
        self.config.get()
    }

    pub fn log_start(&self) -> i64 {
        self.state.borrow().log_start
    }

    /// What readers (consumers) may see up to: everything bounded by it
    /// (reads, the last stable offset, retention, DeleteRecords, time
    /// lookups) stays so. The durable end for an unreplicated log; the
    /// value the caller set for a replicated one.
    pub fn high_watermark(&self) -> i64 {
        self.state.borrow().high_watermark()
    }

    /// Everything below is on stable storage here (what `durable_past`
    /// waits for). A leader's followers read up to it (`read_replica`);
    /// for an unreplicated log it is the high watermark.
    pub fn durable_end(&self) -> i64 {
        self.state.borrow().durable_offset
    }

    /// Whether the high watermark is set by the caller (`set_replicated`).
    pub fn is_replicated(&self) -> bool {
        self.state.borrow().replicated_hw.is_some()
    }

    /// Makes the log replicated: from now on the caller sets the high
    /// watermark (a leader from its followers' progress, a follower from
    /// its leader's), since data durable here may not be on enough
    /// replicas to survive a failover. It starts at `hw`, kept within
    /// `[log_start, durable_end]`. Unreplicated logs (the default) keep the
    /// high watermark at the durable end.
    pub fn set_replicated(&self, hw: i64) {
        let hw = {
            let mut st = self.state.borrow_mut();
            let hw = hw.clamp(st.log_start, st.durable_offset);
            st.replicated_hw = Some(hw);
            hw
        };
        // Readers are woken for moves from here on.
        self.flushers.reset_announced(hw);
    }

    /// Whether a replicated log's high watermark follows its durable end
    /// (a leader that is its partition's only in-sync replica: what is
    /// durable here is on every in-sync replica). Turned on, the high
    /// watermark moves there at once.
    pub fn follow_durable(&self, on: bool) {
        let moved = {
            let mut st = self.state.borrow_mut();
            st.follows_durable = on;
            let before = st.high_watermark();
            st.follow();
            st.high_watermark() > before
        };
        if moved {
            self.flushers.announce(self.high_watermark());
        }
    }

    /// A replicated log's high watermark moved to `hw` (kept at or below
    /// the durable end: nothing not durable here is served). A lower value
    /// is ignored: the high watermark never goes back but by a truncation
    /// (`truncate_to`), since consumers may have read up to it. Readers
    /// `watch`ing are woken if it moved. Nothing for an unreplicated log,
    /// whose high watermark is its durable end.
    pub fn set_high_watermark(&self, hw: i64) {
        let moved = {
            let mut st = self.state.borrow_mut();
            let durable = st.durable_offset;
            match &mut st.replicated_hw {
                Some(cur) if hw.min(durable) > *cur => {
                    *cur = hw.min(durable);
                    true
                }
                _ => false,
            }
        };
        if moved {
            self.flushers.announce(self.high_watermark());
        }
    }

    pub fn log_end(&self) -> i64 {
        self.state.borrow().next_offset
    }

    /// The last stable offset (Kafka's LSO): read_committed readers stop
    /// here, before the earliest transaction not yet ended by a durable
    /// marker; the high watermark when there is none.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        let mut producers = self.producers.borrow_mut();
        producers.settle(hw);
        producers.first_unstable(hw).map_or(hw, |o| o.min(hw))
    }

    /// Aborted transactions with data in `from..upto` (what a
    /// read_committed fetch lists for the client to skip).
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        self.producers.borrow().aborted_between(from, upto)
    }

    /// The producers this partition remembers (DescribeProducers), by id.
    pub fn producers(&self) -> Vec<crate::producer_state::ProducerSummary> {
        self.producers.borrow().summary()
    }

    /// Where `producer_id`'s open transaction begins in this partition.
    pub fn open_transaction(&self, producer_id: i64) -> Option<i64> {
        self.producers.borrow().open_transaction(producer_id)
    }

    /// The base offset of the active (last) segment: every record below it
    /// is in sealed segments.
    pub fn active_base(&self) -> i64 {
        let st = self.state.borrow();
        st.segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(st.log_start)
    }

    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.state
            .borrow()
            .segments
            .values()
            .map(|s| s.size())
            .sum()
    }

    /// Bytes of the log from `offset` on: what a replica holding the log
    /// below `offset` lacks (to within an index interval: counted from
    /// the last indexed batch at or before it).
    pub fn bytes_from(&self, offset: i64) -> u64 {
        let st = self.state.borrow();
        let mut total = 0;
        for (&base, seg) in st.segments.iter().rev() {
            if base >= offset {
                total += seg.size();
                continue;
            }
            let relative = u32::try_from(offset - base).unwrap_or(u32::MAX);
            let at = u64::from(seg.index().lookup(relative));
            total += seg.size().saturating_sub(at);
            break;
        }
        total
    }

    /// Deletes whole sealed segments past `retention.ms` or beyond
    /// `retention.bytes`, moving the log start. Returns how many went.
    pub fn enforce_retention(&self, now_ms: i64) -> usize {
        let cfg = self.config.get();
        // Nothing at or past the last stable offset goes: an open
        // transaction's records stay until it ends.
        let stable = self.last_stable_offset();
        let mut st = self.state.borrow_mut();
        let mut removed = 0;
        let mut total: u64 = st.segments.values().map(|s| s.size()).sum();
        loop {
            if st.segments.len() < 2 {
                break;
            }
            let oldest = st.segments.values().next().expect("a segment");
            if !oldest.sealed() || oldest.next_offset() > stable {
                break;
            }
            let expired = cfg.retention_ms >= 0
                && oldest.max_timestamp() >= 0
                && now_ms - oldest.max_timestamp() > cfg.retention_ms;
            // As Kafka: drop the oldest while the rest still holds retention.bytes.
            let too_big =
                cfg.retention_bytes >= 0 && total - oldest.size() >= cfg.retention_bytes as u64;
            if !(expired || too_big) {
                break;
            }
            let base = oldest.base();
            let seg = st.segments.remove(&base).expect("segment");
            total -= seg.size();
            seg.remove_files();
            removed += 1;
            st.log_start = st
                .log_start
                .max(*st.segments.keys().next().expect("a segment"));
        }
        self.producers.borrow_mut().forget_before(st.log_start);
        if removed > 0 {
            // In memory only, as `delete_records_before`.
            self.epochs.borrow_mut().truncate_from_start(st.log_start);
        }
        removed
    }

    /// DeleteRecords: moves the log start to `offset` (the high watermark
    /// for -1), durably, and drops the segments wholly before it. Returns
    /// the new log start.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, StorageError> {
        let (hw, start) = {
            let st = self.state.borrow();
            (st.high_watermark(), st.log_start)
        };
        let offset = if offset == -1 { hw } else { offset };
        if offset < 0 || offset > hw {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: start,
                high_watermark: hw,
            });
        }
        if offset <= start {
            return Ok(start);
        }
        write_log_start(&self.dir, offset)?;
        let mut st = self.state.borrow_mut();
        st.log_start = offset;
        // Whole segments before the new start go now; the rest stays
        // readable from the start on.
        while st.segments.len() > 1 {
            let oldest = st.segments.values().next().expect("a segment");
            if !oldest.sealed() || oldest.next_offset() > offset {
                break;
            }
            let base = oldest.base();
            st.segments.remove(&base).expect("segment").remove_files();
        }
        self.producers.borrow_mut().forget_before(offset);
        // In memory, as Kafka's truncateFromStartAsyncFlush: open cuts a
        // stale file to the log start again.
        self.epochs.borrow_mut().truncate_from_start(offset);
        Ok(offset)
    }

    /// Forgets idempotent producers idle longer than `max_idle_ms`.
    pub fn expire_producers(&self, now_ms: i64, max_idle_ms: i64) -> usize {
        self.producers.borrow_mut().expire(now_ms, max_idle_ms)
    }

    /// How many idempotent producers this partition remembers.
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }

    /// Flushes for a clean stop and answers the appenders still waiting;
    /// then leaves the active segment's state (and the producers') beside
    /// it, so the next start loads it instead of scanning the segment.
    /// Nothing may be appended after it.
    pub async fn close(&self) -> Result<(), StorageError> {
        self.closed.set(true);
        self.flush().await?;
        // The clean-stop state vouches for the segment without a scan:
        // its bytes are synced in place first, not only in the journal.
        if self.journal.is_some() {
            self.write_out_and_sync().await?;
        }
        let (path, state) = {
            let st = self.state.borrow();
            let seg = st.segments.values().next_back().expect("a segment");
            let producers = self.producers.borrow().encode();
            (
                crate::segment::clean_path(&self.dir, seg.base()),
                seg.clean_state(&producers),
            )
        };
        write_small_file(&path, state).await?;
        crate::durable::sync_dir_in_ring(&self.dir).await
    }

    /// Syncs the segments not yet sealed (with a journal, their writes
    /// are not synced one by one).
    pub(super) async fn sync_segments(&self) -> Result<(), StorageError> {
        let files: Vec<_> = self
            .state
            .borrow()
            .unsealed()
            .map(|s| (s.base(), s.file().clone()))
            .collect();
        for (base, file) in files {
            file.fdatasync().await.map_err(|e| {
                StorageError::io(
                    format!("syncing segment {base} in {}", self.dir.display()),
                    e,
                )
            })?;
        }
        Ok(())
    }

    /// Deletes the whole log directory (its topic deleted, or the
    /// partition gone from this shard): moved into the trash under
    /// `data_dir` at once, its files removed by the trash's own thread.
    pub fn destroy(&self, data_dir: &Path) {
        self.closed.set(true);
        if let Err(e) = crate::trash::remove_later(data_dir, &self.dir) {
            log::warn!("removing {}: {e}", self.dir.display());
        }
    }
}

/// Where a log start moved by DeleteRecords is kept.
fn log_start_path(dir: &Path) -> PathBuf {
    dir.join("log-start")
}

fn read_log_start(dir: &Path) -> Option<i64> {
    std::fs::read_to_string(log_start_path(dir))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Writes the log start durably (`durable::replace`).
fn write_log_start(dir: &Path, offset: i64) -> Result<(), StorageError> {
    crate::durable::replace(&log_start_path(dir), offset.to_string().as_bytes())
        .map_err(|e| StorageError::Io(format!("saving the log start in {}: {e}", dir.display())))
}
