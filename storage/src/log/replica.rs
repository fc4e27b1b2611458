//! Replication's part of the log (Kafka-style, KIP-101/279): the leader
//! epoch cache and the epoch `append` stamps, a follower's append of
//! batches as its leader stored them, and truncation to where a follower's
//! log diverged from its leader's.

use bytes::Bytes;

use super::append::Writer;
use super::epochs;
use super::open::producer_snapshot;
use super::read::read_exact;
use super::*;
use crate::batch::{batch_start, control_marker, crc_ok, partition_leader_epoch, BatchHeader};
use crate::chunks::Chunks;
use crate::durable::{sync_dir_in_ring, write_small_file};
use crate::segment::{remove_index_files, remove_segment_files, snapshot_path};

/// Bytes read at a time while looking for where a truncation cuts.
const CUT_READ: usize = 256 << 10;

impl PartitionLog {
    /// Kafka's `LeaderEpochFileCache.assign`: epoch `epoch` began at
    /// `start_offset` (see `EpochCache::assign` for what is ignored and
    /// what conflicting entries go). Written durably when it changed, so
    /// OffsetForLeaderEpoch answers survive a restart.
    pub fn assign_epoch(&self, epoch: i32, start_offset: i64) -> Result<(), StorageError> {
        self.note_epoch(epoch, start_offset)
    }

    /// `assign_epoch`, at no cost when the latest entry already covers it
    /// (every append calls it).
    pub(super) fn note_epoch(&self, epoch: i32, start_offset: i64) -> Result<(), StorageError> {
        let covered = self
            .epochs
            .borrow()
            .entries()
            .last()
            .is_some_and(|&(e, s)| e == epoch && s <= start_offset);
        if covered {
            return Ok(());
        }
        let mut next = self.epochs.borrow().clone();
        self.assign_into(&mut next, epoch, start_offset)?;
        self.save_epochs(next)
    }

    /// Assigns in `cache` (a copy, swapped in once written).
    fn assign_into(
        &self,
        cache: &mut epochs::EpochCache,
        epoch: i32,
        start_offset: i64,
    ) -> Result<bool, StorageError> {
        cache
            .assign(epoch, start_offset)
            .map_err(|why| StorageError::Corrupt(format!("{}: {why}", self.dir.display())))
    }

    /// Writes `cache` durably, then makes it the log's (unchanged on error).
    fn save_epochs(&self, cache: epochs::EpochCache) -> Result<(), StorageError> {
        if *self.epochs.borrow() == cache && epochs::checkpoint_path(&self.dir).exists() {
            return Ok(());
        }
        epochs::save(&self.dir, &cache)?;
        *self.epochs.borrow_mut() = cache;
        Ok(())
    }

    /// The latest leader epoch with an entry in the cache.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.borrow().latest_epoch()
    }

    /// The epoch cache's entries `(epoch, start_offset)`, oldest first.
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        self.epochs.borrow().entries().to_vec()
    }

    /// OffsetForLeaderEpoch: where `epoch` ended in this log, exactly as
    /// Kafka's `LeaderEpochFileCache.endOffsetFor(epoch, logEndOffset)`
    /// (`EpochCache::end_offset_for`), with the log end as
    /// `logEndOffset`.
    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        self.epochs.borrow().end_offset_for(epoch, self.log_end())
    }

    /// This log's node became the partition's leader in `epoch`: the
    /// epoch begins at the log end (durably, in the cache), and `append`
    /// stamps `epoch` into every batch from now on, so that followers and
    /// a later leader can tell whose batches these were.
    pub fn set_leader_epoch(&self, epoch: i32) -> Result<(), StorageError> {
        self.note_epoch(epoch, self.log_end())?;
        self.stamp_epoch.set(epoch);
        self.following.set(None);
        Ok(())
    }

    /// This log's node no longer leads the partition; it follows the
    /// leader of `epoch` (or waits for one). A leader's `append` still in
    /// flight (waiting for the append lock) is refused rather than land
    /// among the new leader's batches; from now on only copies and
    /// truncations made in `epoch` are taken (`append_replica`,
    /// `truncate_to`); and the high watermark stops following the durable
    /// end.
    pub fn stop_leading(&self, epoch: i32) {
        self.following.set(Some(epoch));
        self.state.borrow_mut().follows_durable = false;
    }

    /// The epoch `append` stamps: the last `set_leader_epoch`, or at open
    /// the latest in the cache (`batch::LEADER_EPOCH` for a log never
    /// replicated).
    pub fn leader_epoch(&self) -> i32 {
        self.stamp_epoch.get()
    }

    /// A follower's append: `batches` as its leader stored them (offsets
    /// assigned, bytes kept exactly, the leader's epoch stamp kept: no
    /// offset assignment, no sequence checks, which the leader made). The
    /// first must begin at `log_end()` and each next one right after the
    /// one before, else nothing is appended and the error says which
    /// offset was expected and which was found. The producer state is
    /// recorded for each batch (markers too), so idempotence and
    /// transactions carry over when this follower becomes the leader;
    /// each batch's epoch is assigned in the epoch cache as Kafka's
    /// follower does. Segments roll as for `append`, and the batches become
    /// durable with the next flush. Returns what `append` returns.
    ///
    /// `epoch` is the leader epoch the batches were fetched in: refused
    /// unless this log follows in it (`stop_leading`).
    pub async fn append_replica(
        &self,
        batches: &[(BatchHeader, Bytes)],
        epoch: i32,
        now_ms: i64,
    ) -> Result<(Appended, Vec<(BatchHeader, Chunks)>), StorageError> {
        let _permit = self.lock_for_append(Writer::FollowerIn(epoch)).await?;
        let start = self.log_end();
        let mut expected = start;
        for (h, b) in batches {
            if h.base_offset != expected {
                return Err(StorageError::Corrupt(format!(
                    "{}: a replica append must continue the log: expected a batch at offset \
                     {expected}, found one at offset {} (the log ends at {start}); nothing appended",
                    self.dir.display(),
                    h.base_offset
                )));
            }
            let whole = b.len() == h.total_len()
                && h.magic == 2
                && h.last_offset_delta >= 0
                && BatchHeader::parse(b).as_ref() == Some(h)
                && crc_ok(b, h);
            if !whole {
                return Err(StorageError::Corrupt(format!(
                    "{}: the replicated batch at offset {} is not a whole v2 batch passing its \
                     CRC-32C check; nothing appended",
                    self.dir.display(),
                    h.base_offset
                )));
            }
            expected = h.last_offset() + 1;
        }
        if batches.is_empty() {
            return Ok((
                Appended {
                    base_offset: start,
                    last_offset: start - 1,
                    log_append_time: -1,
                },
                Vec::new(),
            ));
        }
        let total: u64 = batches.iter().map(|(h, _)| h.total_len() as u64).sum();
        self.maybe_roll(total, now_ms).await?;
        // The roll awaited: this node may lead now (Kafka serialises the
        // two with its partition lock), and the epoch cache may have moved.
        self.check_writer(Writer::FollowerIn(epoch))?;
        let mut next_epochs = self.epochs.borrow().clone();
        for (h, b) in batches {
            let epoch = partition_leader_epoch(b).expect("a whole batch");
            self.assign_into(&mut next_epochs, epoch, h.base_offset)?;
        }
        // Before the batches: an epoch entry with nothing after it is
        // harmless (open cuts the cache to the log end), a batch whose
        // epoch is missing is not.
        self.save_epochs(next_epochs)?;
        let mut producers = self.producers.borrow_mut();
        let mut st = self.state.borrow_mut();
        assert_eq!(st.next_offset, start, "appends are serialised");
        let seg_base = *st.segments.keys().next_back().expect("a segment");
        let mut stored = Vec::with_capacity(batches.len());
        for (h, b) in batches {
            let batch = Chunks::from(b.clone());
            let seg = st.segments.get_mut(&seg_base).expect("active segment");
            seg.append(&batch, h);
            producers.record(h, control_marker(b, h), now_ms);
            st.next_offset = h.last_offset() + 1;
            stored.push((*h, batch));
        }
        let log_append_time = batches
            .iter()
            .find(|(h, _)| h.is_log_append_time())
            .map_or(-1, |(h, _)| h.max_timestamp);
        Ok((
            Appended {
                base_offset: start,
                last_offset: st.next_offset - 1,
                log_append_time,
            },
            stored,
        ))
    }

    /// Removes every record at or after `offset`, durably: a follower
    /// whose log diverged from its new leader's (KIP-101/279) cuts it
    /// where the leader's epoch ended. A no-op at or past the log end; an
    /// error below the log start. `offset` should be a batch boundary; one
    /// inside a batch cuts at that batch's start (as Kafka's
    /// `LogSegment.truncateTo`, batches are never split), so the log end
    /// is then below `offset`. Never below that: every batch ending below
    /// `offset` stays (asserted).
    ///
    /// Afterwards the log end and durable end are `offset`, the high
    /// watermark is at most `offset`, the producer state is what it would
    /// be had the log ended there (rebuilt as `open` does: the snapshot at
    /// the cut segment's base, then its batches), and epochs starting at
    /// or after `offset` are gone from the cache (Kafka's
    /// `truncateFromEnd`).
    ///
    /// Crash safety: files go from the end backwards — the later
    /// segments (each log file first, so a crash leaves a shorter log,
    /// never a segment without its producer snapshot), then the cut
    /// segment's index files and clean-stop state, the directory synced,
    /// then the cut segment truncated and synced. A crash at any point
    /// reopens to a prefix of the log between the old end and `offset`
    /// (opening cuts the epoch cache to the log end). A cut sealed
    /// segment gets a new empty active segment after it, so a segment
    /// compaction left gaps in never becomes the active one (its scan
    /// would stop at a gap).
    ///
    /// `epoch` is the leader epoch the cut was reconciled in: refused
    /// unless this log follows in it (`stop_leading`).
    pub async fn truncate_to(&self, offset: i64, epoch: i32) -> Result<(), StorageError> {
        let _permit = self
            .append_lock
            .acquire_permit(1)
            .await
            .expect("semaphore open");
        self.check_writer(Writer::FollowerIn(epoch))?;
        {
            let st = self.state.borrow();
            if offset < st.log_start {
                return Err(StorageError::OffsetOutOfRange {
                    offset,
                    log_start: st.log_start,
                    high_watermark: st.next_offset,
                });
            }
            if offset >= st.next_offset {
                return Ok(());
            }
        }
        let _zero = self.quiesce("truncate").await?;
        let (k_base, k_is_last, file, pos, limit) = {
            let st = self.state.borrow();
            let (&base, seg) = st
                .segments
                .range(..=offset)
                .next_back()
                .expect("a segment holds every offset from the log start");
            let pos = seg.index().lookup((offset - base) as u32) as u64;
            let is_last = st.segments.range(base + 1..).next().is_none();
            (base, is_last, seg.file().clone(), pos, seg.durable_size())
        };
        let (cut, cut_batch) = find_cut(&file, pos, limit, offset)
            .await
            .map_err(|e| StorageError::Io(format!("{}: {e}", self.dir.display())))?;
        let later: Vec<i64> = self
            .state
            .borrow()
            .segments
            .range(k_base + 1..)
            .map(|(&b, _)| b)
            .collect();
        log::info!(
            "{}: truncating to offset {offset}: segment {k_base} at byte {cut}, and {} later \
             segments",
            self.dir.display(),
            later.len()
        );
        for &b in later.iter().rev() {
            remove_segment_files(&self.dir, b);
        }
        remove_index_files(&self.dir, k_base);
        sync_dir_in_ring(&self.dir).await?;
        let ctx = |what: &str| format!("{what} segment {k_base} in {}", self.dir.display());
        file.truncate(cut)
            .await
            .map_err(|e| StorageError::io(ctx("truncating"), e))?;
        file.fdatasync()
            .await
            .map_err(|e| StorageError::io(ctx("syncing"), e))?;
        drop(file);

        // The segments from the cut one on, opened again as `open` does,
        // with the producer state as of the cut.
        let now_ms = wall_clock_ms();
        let mut producers = producer_snapshot(&self.dir, k_base);
        let mut reopened = Vec::new();
        if k_is_last || cut == 0 {
            reopened.push(
                Segment::open(&self.dir, k_base, true, None, now_ms, Some(&mut producers)).await?,
            );
        } else {
            let mut seg =
                Segment::open(&self.dir, k_base, false, None, now_ms, Some(&mut producers)).await?;
            let end = seg.next_offset();
            write_small_file(&snapshot_path(&self.dir, end), producers.encode()).await?;
            sync_dir_in_ring(&self.dir).await?;
            let active = Segment::create(&self.dir, end, now_ms).await?;
            if !seg.sealed() {
                seg.seal().await?;
            }
            reopened.push(seg);
            reopened.push(active);
        }
        let end = reopened.last().expect("a segment").next_offset();
        // Never below what the caller asked but for the batch holding it.
        assert!(
            end <= offset,
            "truncation to {offset} kept offsets up to {end}"
        );
        if let Some(h) = cut_batch.filter(|h| h.base_offset <= offset) {
            assert_eq!(
                end, h.base_offset,
                "truncation to {offset} cut below the batch holding it"
            );
        }
        {
            let mut st = self.state.borrow_mut();
            drop(st.segments.split_off(&k_base));
            for seg in reopened {
                st.segments.insert(seg.base(), seg);
            }
            st.next_offset = end;
            st.durable_offset = end;
            st.log_start = st.log_start.min(end);
            if let Some(hw) = &mut st.replicated_hw {
                *hw = (*hw).min(end);
            }
        }
        *self.producers.borrow_mut() = producers;
        self.corrupt.borrow_mut().retain(|&(b, _)| b < k_base);
        self.flushers.cut_to(self.high_watermark(), end);
        if let Some(state) = self.cleaner.get().truncated_to(end) {
            state.save(&self.dir)?;
            self.cleaner.set(state);
        }
        let mut epochs = self.epochs.borrow().clone();
        if epochs.truncate_from_end(end) {
            self.save_epochs(epochs)?;
        }
        Ok(())
    }
}

impl PartitionLog {
    /// Readies the log for its files to change under the append lock (a
    /// truncation, a start over): refused during a cleaning pass; then
    /// everything appended is made durable and no flush is in flight, so
    /// the segments hold nothing staged, and the permit returned keeps
    /// zeroing ahead and sealing away while it is held.
    async fn quiesce(&self, what: &str) -> Result<glommio::sync::Permit<'_>, StorageError> {
        if self.compacting.get() {
            return Err(StorageError::Io(format!(
                "{}: a cleaning pass is running; {what} after it",
                self.dir.display()
            )));
        }
        self.flush().await?;
        let zero = self
            .zero_lock
            .acquire_permit(1)
            .await
            .expect("semaphore open");
        self.wait_idle().await;
        *self.readahead.borrow_mut() = None;
        // The cut or start over writes other bytes where the journal's
        // records of this log point: they are made durable in place, and
        // then forgotten.
        if let Some(journal) = &self.journal {
            self.write_out_and_sync().await?;
            journal.forget(&self.dir).await?;
        }
        Ok(zero)
    }

    /// Kafka's `truncateFullyAndStartAt`: a follower whose whole log lies
    /// below its leader's log start (the leader deleted, by retention or
    /// DeleteRecords, what this one missed while away) empties its log and
    /// starts it again at `offset`, durably: the new empty segment (after
    /// its empty producer snapshot) first, then the log start, then the
    /// old segments go. A crash between reopens to the old log followed by
    /// the empty segment (log end `offset`, the start moved or not), which
    /// the next reconciliation takes as it is. The producer state and the
    /// epoch cache start empty, as Kafka's do; the high watermark is
    /// `offset`. Refused unless this log follows in `epoch` and `offset`
    /// is past its end, or the log is empty (its start is its end: the
    /// leader's start fell inside a batch, whose base the copy starts at).
    pub async fn start_over_at(&self, offset: i64, epoch: i32) -> Result<(), StorageError> {
        let _permit = self
            .append_lock
            .acquire_permit(1)
            .await
            .expect("semaphore open");
        self.check_writer(Writer::FollowerIn(epoch))?;
        if offset == self.log_end() && self.log_start() == offset {
            return Ok(());
        }
        if offset <= self.log_end() && self.log_start() != self.log_end() {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: self.log_start(),
                high_watermark: self.log_end(),
            });
        }
        let _zero = self.quiesce("start over").await?;
        log::info!(
            "{}: starting over at offset {offset} (the log ended at {}; the leader's starts there)",
            self.dir.display(),
            self.log_end()
        );
        let empty = crate::producer_state::ProducerStates::default();
        write_small_file(&snapshot_path(&self.dir, offset), empty.encode()).await?;
        sync_dir_in_ring(&self.dir).await?;
        let fresh = Segment::create(&self.dir, offset, wall_clock_ms()).await?;
        write_log_start(&self.dir, offset)?;
        let old: Vec<i64> = self.state.borrow().segments.keys().copied().collect();
        for &b in old.iter().rev() {
            remove_segment_files(&self.dir, b);
        }
        sync_dir_in_ring(&self.dir).await?;
        self.save_epochs(epochs::EpochCache::default())?;
        {
            let mut st = self.state.borrow_mut();
            st.segments.clear();
            st.segments.insert(offset, fresh);
            st.log_start = offset;
            st.next_offset = offset;
            st.durable_offset = offset;
            if let Some(hw) = &mut st.replicated_hw {
                *hw = offset;
            }
        }
        *self.producers.borrow_mut() = empty;
        self.corrupt.borrow_mut().clear();
        self.flushers.started_at(offset);
        Ok(())
    }
}

/// The wall clock in ms (a truncation opens segments again: their
/// creation time and the producers' last append time).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Where a truncation to `offset` cuts the segment `file` (durable up to
/// `limit`), looking from `pos` (a batch start at or before it): at the
/// first batch whose last offset is at or past `offset` (stepping over
/// padding), with that batch's header; at `limit` when there is none.
async fn find_cut(
    file: &glommio::io::DmaFile,
    mut pos: u64,
    limit: u64,
    offset: i64,
) -> Result<(u64, Option<BatchHeader>), StorageError> {
    use crate::batch::HEADER_LEN;
    while pos < limit {
        let data = read_exact(file, pos, CUT_READ.min((limit - pos) as usize)).await?;
        // Where the next batch or padding begins, in `data`.
        let mut at = 0usize;
        while let Some(rest) = data.get(at..).filter(|r| r.len() >= HEADER_LEN) {
            at = (batch_start(rest, pos + at as u64) - pos) as usize;
            if pos + at as u64 >= limit {
                return Ok((limit, None));
            }
            let Some(h) = data.get(at..).and_then(BatchHeader::parse) else {
                break;
            };
            if h.magic != 2 || h.batch_length <= 0 {
                return Err(StorageError::Corrupt(format!(
                    "no batch at byte {} where one should begin",
                    pos + at as u64
                )));
            }
            if h.last_offset() >= offset {
                return Ok((pos + at as u64, Some(h)));
            }
            at += h.total_len();
        }
        if at == 0 {
            // Fewer bytes than a header before the end: padding, or
            // nothing that can be a batch.
            return if data.iter().all(|b| *b == 0) {
                Ok((limit, None))
            } else {
                Err(StorageError::Corrupt(format!(
                    "{} bytes that are no batch at byte {pos}",
                    data.len()
                )))
            };
        }
        pos += at as u64;
    }
    Ok((limit, None))
}
