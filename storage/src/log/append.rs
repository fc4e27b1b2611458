//! Appending: offsets assigned, producer sequences checked, segments
//! rolled and sealed.

use crate::batch::{assign_offset_in_epoch, control_marker, BatchHeader};
use crate::chunks::Chunks;
use crate::durable::{sync_dir_in_ring, write_small_file};
use crate::producer_state::SequenceCheck;
use crate::segment::{snapshot_path, Segment};
use crate::StorageError;
use bytes::Bytes;

use super::*;

/// Who writes to a log: its leader (or the node of an unreplicated log),
/// or a follower copying from the leader of an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    Leader,
    FollowerIn(i32),
}

impl PartitionLog {
    /// Assigns offsets to validated batches and stages them. They become
    /// durable (and readable) at the next `flush`. Returns the batches as
    /// stored (base offsets assigned; the bodies shared with `batches`) for
    /// the tail cache.
    pub async fn append(
        &self,
        batches: &[(BatchHeader, Bytes)],
        now_ms: i64,
    ) -> Result<(Appended, Vec<(BatchHeader, Chunks)>), StorageError> {
        let _permit = self.lock_for_append(Writer::Leader).await?;
        {
            let producers = self.producers.borrow();
            for (h, b) in batches {
                if let Some((_, epoch)) = control_marker(b, h) {
                    producers
                        .check_coordinator(h, epoch)
                        .map_err(StorageError::Sequence)?;
                }
                match producers.check(h).map_err(StorageError::Sequence)? {
                    SequenceCheck::Append => {}
                    SequenceCheck::Duplicate {
                        base_offset,
                        last_offset,
                    } => {
                        // A resend of a batch already written: its original
                        // offsets, nothing written again.
                        return Ok((
                            Appended {
                                base_offset,
                                last_offset,
                                log_append_time: -1,
                            },
                            Vec::new(),
                        ));
                    }
                }
            }
        }
        let total: u64 = batches.iter().map(|(h, _)| h.total_len() as u64).sum();
        self.maybe_roll(total, now_ms).await?;
        // The roll awaited: this node may follow another leader now.
        self.check_writer(Writer::Leader)?;
        // The epoch stamped begins here if it is new (Kafka's append
        // assigns each batch's epoch; all of these carry the same one).
        let epoch = self.stamp_epoch.get();
        if !batches.is_empty() {
            self.note_epoch(epoch, self.log_end())?;
        }
        let mut producers = self.producers.borrow_mut();
        let mut st = self.state.borrow_mut();
        let base_offset = st.next_offset;
        let mut stored = Vec::with_capacity(batches.len());
        let seg_base = *st.segments.keys().next_back().expect("a segment");
        let stamp = self.config.get().log_append_time;
        for (h, b) in batches {
            let offset = st.next_offset;
            let stored_batch = assign_offset_in_epoch(b, offset, now_ms, stamp, epoch);
            let header = BatchHeader::parse(&stored_batch.parts()[0]).expect("validated batch");
            let seg = st.segments.get_mut(&seg_base).expect("active segment");
            seg.append(&stored_batch, &header);
            producers.record(&header, control_marker(b, h), now_ms);
            st.next_offset = offset + h.offset_count();
            stored.push((header, stored_batch));
        }
        let log_append_time = if stamp || batches.iter().any(|(h, _)| h.is_log_append_time()) {
            now_ms
        } else {
            -1
        };
        Ok((
            Appended {
                base_offset,
                last_offset: st.next_offset - 1,
                log_append_time,
            },
            stored,
        ))
    }

    /// An idempotent producer's batch of which nothing is stored (a typed
    /// table skipped every record in it): its sequence is checked like an
    /// append and remembered, so the producer's next batch follows on.
    /// Answers an empty range at the log end, or a duplicate's original
    /// range. (Remembered in memory: the log holds nothing to rebuild it
    /// from after a restart.)
    pub async fn skip_batch(&self, h: &BatchHeader, now_ms: i64) -> Result<Appended, StorageError> {
        let _permit = self.lock_for_append(Writer::Leader).await?;
        if let SequenceCheck::Duplicate {
            base_offset,
            last_offset,
        } = self
            .producers
            .borrow()
            .check(h)
            .map_err(StorageError::Sequence)?
        {
            return Ok(Appended {
                base_offset,
                last_offset,
                log_append_time: -1,
            });
        }
        let end = self.state.borrow().next_offset;
        let mut meta = *h;
        meta.base_offset = end;
        meta.last_offset_delta = -1; // no offsets taken
        self.producers.borrow_mut().record(&meta, None, now_ms);
        Ok(Appended {
            base_offset: end,
            last_offset: end - 1,
            log_append_time: -1,
        })
    }

    /// Takes the append lock (appends that may roll a segment await
    /// inside it), refusing a failed log, and a write `by` a role this log
    /// no longer has (`check_writer`).
    pub(super) async fn lock_for_append(
        &self,
        by: Writer,
    ) -> Result<glommio::sync::Permit<'_>, StorageError> {
        let permit = self
            .append_lock
            .acquire_permit(1)
            .await
            .expect("semaphore open");
        if let Some(why) = &self.state.borrow().failed {
            return Err(StorageError::Io(format!("log is failed: {why}")));
        }
        self.check_writer(by)?;
        Ok(permit)
    }

    /// Refuses a leader's write once this node follows another leader,
    /// and a follower's made for a leader epoch it no longer follows in
    /// (a late answer from a deposed leader, or a copy reaching a log that
    /// leads now): either would put batches of another epoch's leader into
    /// this one's log.
    pub(super) fn check_writer(&self, by: Writer) -> Result<(), StorageError> {
        match (by, self.following.get()) {
            (Writer::Leader, None) => Ok(()),
            (Writer::FollowerIn(e), Some(f)) if e == f => Ok(()),
            (Writer::Leader, Some(_)) => Err(StorageError::NotLeader(format!(
                "{}: this node follows another leader now",
                self.dir.display()
            ))),
            (Writer::FollowerIn(e), now) => Err(StorageError::NotLeader(format!(
                "{}: a follower's write made in leader epoch {e} refused: this log {}",
                self.dir.display(),
                match now {
                    None => "is not following (it leads, or is not replicated)".to_string(),
                    Some(f) => format!("follows in leader epoch {f} now"),
                }
            ))),
        }
    }
    /// Rolls to a new segment when the active one is too big or too old.
    pub(super) async fn maybe_roll(&self, incoming: u64, now_ms: i64) -> Result<(), StorageError> {
        let cfg = self.config.get();
        let base = {
            let st = self.state.borrow();
            let active = st.segments.values().next_back().expect("a segment");
            let too_big = active.size() + incoming > cfg.segment_bytes;
            let too_old = now_ms - active.created_ms() > cfg.segment_ms;
            // Relative offsets and positions are u32 in the index.
            let too_many = st.next_offset - active.base() > i32::MAX as i64
                || active.size() + incoming > u32::MAX as u64;
            if active.size() == 0 || !(too_big || too_old || too_many) {
                return Ok(());
            }
            st.next_offset
        };
        let started = std::time::Instant::now();
        // The producer state as of the new segment's base, so recovery needs
        // to scan only the active segment. Written before the segment exists.
        let snapshot = self.producers.borrow().encode();
        write_small_file(&snapshot_path(&self.dir, base), snapshot).await?;
        sync_dir_in_ring(&self.dir).await?;
        let seg = Segment::create(&self.dir, base, now_ms).await?;
        self.state.borrow_mut().segments.insert(base, seg);
        crate::timeline::note_since("roll", started, || {
            format!("{} segment {base}", self.dir.display())
        });
        Ok(())
    }

    /// Seals finished segments in a task of its own (one at a time), so
    /// no flusher, and no ack, waits for it.
    pub(super) fn seal_soon(self: &std::rc::Rc<Self>) {
        if self.sealing.replace(true) {
            return;
        }
        let log = self.clone();
        glommio::spawn_local(async move {
            log.seal_or_warn().await;
            log.sealing.set(false);
        })
        .detach();
    }

    /// Seals what `seal_inactive` finds; a failure is logged and the
    /// segment is sealed at the next try (after the next flush, or at a
    /// clean stop): it is durable already, and stays readable unsealed.
    pub(super) async fn seal_or_warn(&self) {
        if let Err(e) = self.seal_inactive().await {
            log::warn!("sealing a segment in {}: {e}", self.dir.display());
        }
    }

    /// Seals every durable segment that is no longer the active one.
    pub(super) async fn seal_inactive(&self) -> Result<(), StorageError> {
        // A journaled log's rolled segments are written out first.
        self.write_out(false).await?;
        loop {
            // Sealing truncates the file: no zeroing ahead may be writing,
            // and concurrent flushes seal one at a time. (No flush writes a
            // segment that is durable to its end and no longer active.)
            let _zero = self
                .zero_lock
                .acquire_permit(1)
                .await
                .expect("semaphore open");
            let candidate = {
                let st = self.state.borrow();
                let active = *st.segments.keys().next_back().expect("a segment");
                // The oldest unsealed segment that is durable and not active.
                st.unsealed()
                    .filter(|s| s.base() != active && !s.dirty() && s.unwritten_to_file() == 0)
                    .last()
                    .map(|s| s.base())
            };
            let Some(base) = candidate else { return Ok(()) };
            // The segment stays in place (readers use it) while its files
            // are finished.
            let job = self.state.borrow().segments[&base].seal_job();
            let started = std::time::Instant::now();
            job.await?;
            crate::timeline::note_since("seal", started, || {
                format!("{} segment {base}", self.dir.display())
            });
            // Synced whole: the journal's records of it are not replayed
            // (compaction may rewrite it once sealed).
            if let Some(journal) = &self.journal {
                journal
                    .forget(&crate::segment::log_path(&self.dir, base))
                    .await?;
            }
            if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
                seg.mark_sealed();
            }
        }
    }
}
