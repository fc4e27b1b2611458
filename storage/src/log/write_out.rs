//! A journaled log's flushes and its segment writes (`journal`): a flush
//! hands its new bytes to the shard's journal and is durable when the
//! journal's write lands; the bytes stay staged until `write_out` writes
//! them into the segment file, in pieces of `WRITE_OUT_BYTES` or more
//! (plain direct writes, synced at the journal's checkpoint), or at once
//! when something reads the file (a read, a seal, a cut, a close).

use std::rc::Rc;
use std::time::Instant;

use super::flights::Takeoff;
use super::{write_whole, FlushTimes, PartitionLog};
use crate::journal::{Journal, SegmentBytes};
use crate::segment::{align_up, log_path};
use crate::StorageError;

/// A journaled partition writes its segment once this much waits.
pub(super) const WRITE_OUT_BYTES: u64 = 256 << 10;
/// How long a failed segment write waits before it is tried again.
const WRITE_OUT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl PartitionLog {
    /// Lets the shard's journal reach this log at its checkpoints.
    pub(super) fn remember_self(self: &Rc<Self>) {
        if self.self_weak.borrow().strong_count() == 0 {
            *self.self_weak.borrow_mut() = Rc::downgrade(self);
        }
    }

    /// A flush through the journal: the bytes no flush took yet go to it
    /// (no padding: only `write_out` writes the file), and count once its
    /// write landed, in the order flushes were prepared (`Flights`).
    pub(super) async fn flush_journaled(
        &self,
        journal: &Rc<Journal>,
    ) -> Result<(i64, Option<FlushTimes>), StorageError> {
        let (id, parts, must_wait) = {
            let mut st = self.state.borrow_mut();
            if !st.unsealed().any(|s| s.unwritten()) {
                return Ok((st.durable_offset, None));
            }
            let mut flights = self.flights.borrow_mut();
            let Takeoff { in_flight, .. } = flights.takeoff();
            let retry = st.failed.is_some();
            let mut parts: Vec<_> = st
                .unsealed_mut()
                .filter(|s| s.unwritten())
                .map(|s| {
                    let (from, bytes) = s.prepare_journaled();
                    (s.base(), from, bytes, s.size())
                })
                .collect();
            parts.reverse(); // oldest segment first
            let ends = parts.iter().map(|p| (p.0, p.3)).collect();
            let id = flights.prepare(st.next_offset, ends, retry);
            // A retry hands over again what void flights handed over.
            (id, parts, retry && in_flight)
        };
        let t0 = Instant::now();
        if must_wait {
            self.wait_for_earlier(id).await;
        }
        let t1 = Instant::now();
        let paths: Vec<_> = parts.iter().map(|p| log_path(&self.dir, p.0)).collect();
        let me = self.self_weak.borrow().clone();
        let unreachable = me.strong_count() == 0;
        let durable = journal.record_flush(
            &self.dir,
            me,
            parts.iter().zip(&paths).map(|(p, path)| SegmentBytes {
                path,
                pos: p.1,
                pieces: &p.2,
            }),
        );
        if let Err(e) = durable.await {
            return Err(self.flight_failed(id, format!("{}: {e}", self.dir.display())));
        }
        let times = FlushTimes {
            wait: t1 - t0,
            write: t1.elapsed(),
        };
        let bytes = parts
            .iter()
            .flat_map(|p| p.2.iter())
            .map(|b| b.len() as u64);
        self.note_flush(t0, &times, bytes.sum());
        self.flight_landed(id);
        // A log the journal's checkpoints cannot reach (never flushed
        // through its `Rc`) makes its bytes durable in place at once.
        if unreachable {
            self.write_out_and_sync().await?;
        }
        Ok((self.durable_end(), Some(times)))
    }

    /// After a flush: writes the segment in a task of its own when a
    /// piece of `WRITE_OUT_BYTES` waits, or a rolled segment waits at all.
    pub(super) fn write_out_soon(self: &Rc<Self>) {
        if self.journal.is_none() || self.writing_out.get() || !self.wants_write_out(false) {
            return;
        }
        self.writing_out.set(true);
        // Weak between tries: a log its owner dropped (a partition moved,
        // a group slot handed over) ends here, and its drop writes out
        // what waits; a task holding it would keep it alive beside the
        // log opened again in its place.
        let weak = Rc::downgrade(self);
        glommio::spawn_local(async move {
            // A segment that cannot be written fails the log, as a failing
            // flush does without a journal: appends are refused (what was
            // acknowledged is in the journal), and the write is tried again
            // each second until it works.
            let mut failed: Option<String> = None;
            loop {
                let Some(log) = weak.upgrade() else { return };
                match log.write_out(false).await {
                    Ok(()) => {
                        if let Some(why) = &failed {
                            log.clear_failure(why);
                        }
                        log.writing_out.set(false);
                        log.seal_soon();
                        return;
                    }
                    Err(e) => {
                        let why = match e {
                            StorageError::Io(why) => why,
                            other => other.to_string(),
                        };
                        log.fail(why.clone());
                        log.state.borrow_mut().write_out_failed = true;
                        failed = Some(why);
                    }
                }
                drop(log);
                glommio::timer::sleep(WRITE_OUT_RETRY).await;
            }
        })
        .detach();
    }

    /// Clears the log's failure if it is still `why` (a write that works
    /// again; another failure since stays).
    fn clear_failure(&self, why: &str) {
        let mut st = self.state.borrow_mut();
        st.write_out_failed = false;
        if st.failed.as_deref() == Some(why) {
            log::info!("{}: segment writes work again", self.dir.display());
            st.failed = None;
        }
    }

    /// Whether a segment waits for `write_out` (`all`: any byte at all).
    fn wants_write_out(&self, all: bool) -> bool {
        let st = self.state.borrow();
        let active = *st.segments.keys().next_back().expect("a segment");
        let wants = st.unsealed().any(|s| {
            let waiting = s.unwritten_to_file();
            waiting > 0 && (all || s.base() != active || waiting >= WRITE_OUT_BYTES)
        });
        wants
    }

    /// Writes journaled bytes into their segment files, oldest segment
    /// first (plain direct writes; the journal's checkpoint syncs them):
    /// all of them, or (`all` false) those of rolled segments and of a
    /// segment with `WRITE_OUT_BYTES` waiting. One writer at a time.
    pub(super) async fn write_out(&self, all: bool) -> Result<(), StorageError> {
        if self.journal.is_none() {
            return Ok(());
        }
        let _one = self
            .write_out_lock
            .acquire_permit(1)
            .await
            .expect("semaphore open");
        let segment_bytes = align_up(self.config.get().segment_bytes);
        loop {
            let job = {
                let st = self.state.borrow();
                let active = *st.segments.keys().next_back().expect("a segment");
                st.unsealed()
                    .filter(|s| {
                        let waiting = s.unwritten_to_file();
                        waiting > 0 && (all || s.base() != active || waiting >= WRITE_OUT_BYTES)
                    })
                    .last()
                    .map(|s| {
                        let (buf, pos, end) = s.prepare_write_out().expect("bytes waiting");
                        (s.base(), s.file().clone(), buf, pos, end, s.allocated())
                    })
            };
            let Some((base, file, buf, pos, end, allocated)) = job else {
                return Ok(());
            };
            // Allocated ahead, as the flushes without a journal do.
            if let Some(to) = super::ahead::allocate_to(end, allocated, segment_bytes) {
                self.allocate_ahead(base, &file, to).await;
            }
            write_whole(&file, buf, pos).await.map_err(|why| {
                StorageError::Io(format!(
                    "writing segment {base} in {}: {why}",
                    self.dir.display()
                ))
            })?;
            if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
                seg.complete_write_out(end);
            }
        }
    }

    /// Everything journaled is written into the segments and synced
    /// there (a checkpoint, a cut, a clean stop).
    pub async fn write_out_and_sync(&self) -> Result<(), StorageError> {
        self.write_out(true).await?;
        self.sync_segments().await
    }

    /// Before the file is read: the journaled bytes are written into it.
    pub(super) async fn write_out_for_read(&self) -> Result<(), StorageError> {
        if self.journal.is_some() && self.wants_write_out(true) {
            self.write_out(true).await?;
        }
        Ok(())
    }
}

/// A journaled log dropped with bytes not yet in its segments (its
/// partition reopened, a group slot handed over): they are written and
/// synced here, blocking, so that whoever opens the log next finds them,
/// and no checkpoint needs this log any more. Rare, and small: at most
/// what waits for a write-out.
impl Drop for PartitionLog {
    fn drop(&mut self) {
        // Nothing waits, or the log was destroyed with its directory.
        if self.journal.is_none() || !self.wants_write_out(true) || !self.dir.exists() {
            return;
        }
        let st = self.state.borrow();
        for seg in st.unsealed() {
            let (mut pos, pieces) = seg.unwritten_pieces();
            if pieces.is_empty() {
                continue;
            }
            let path = log_path(&self.dir, seg.base());
            let written = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| {
                    use std::os::unix::fs::FileExt;
                    for p in &pieces {
                        f.write_all_at(p, pos)?;
                        pos += p.len() as u64;
                    }
                    f.sync_data()
                });
            if let Err(e) = written {
                // The journal still holds them until its next checkpoint,
                // and replay at the next start writes them back.
                log::error!(
                    "{}: writing the journaled bytes of a dropped log: {e}",
                    path.display()
                );
            }
        }
    }
}
