//! Space and zeros ahead of a segment's end: zeros written while flushes
//! are small (so later writes change no metadata), else preallocation;
//! both as far ahead as the segment already reaches.

use crate::segment::align_up;
use crate::StorageError;
use std::rc::Rc;

use super::*;

/// How far ahead of a segment's end a partition writes zeros at most, and
/// how much at a time.
pub(super) const ZERO_AHEAD_BYTES: u64 = 4 << 20;
pub(super) const ZERO_CHUNK_BYTES: u64 = 256 << 10;
/// Space allocated ahead of a segment's end at a time: at most, and at
/// least.
pub(super) const PREALLOCATE_BYTES: u64 = 32 << 20;
pub(super) const PREALLOCATE_MIN_BYTES: u64 = 1 << 20;

/// How far ahead of a segment's end to allocate space or write zeros: as
/// far as the segment already reaches (`end`), between `floor` and `cap`.
/// A partition that receives little reserves and writes little ahead: a
/// fixed 32 MiB allocated and 4 MiB of zeros written per partition cost a
/// topic of 200 quiet partitions 6.4 GB of disk and 0.9 GB of device writes
/// for 20 MB of records. A busy partition doubles up to `cap` within its
/// first few megabytes.
pub(super) fn ahead_of(end: u64, floor: u64, cap: u64) -> u64 {
    align_up(end).clamp(floor, cap)
}

/// Where a segment whose bytes reach `end`, with space allocated to
/// `allocated`, is to be allocated to before they are written there (None:
/// it already is): `ahead_of` past the end, and never more than a
/// segment's size ahead of it.
pub(super) fn allocate_to(end: u64, allocated: u64, segment_bytes: u64) -> Option<u64> {
    (end > allocated).then(|| {
        align_up(end) + ahead_of(end, PREALLOCATE_MIN_BYTES, PREALLOCATE_BYTES).min(segment_bytes)
    })
}

impl PartitionLog {
    /// Allocates segment `base`'s `file` up to `to` (from `allocate_to`),
    /// so most writes neither allocate blocks nor change the file's size
    /// (which each sync would then have to write). Recovery stops at the
    /// zeros past the end. A failure is not fatal (the write may still
    /// fit): it is logged, quietly while the log is failed, when every
    /// retry would say it again.
    pub(super) async fn allocate_ahead(&self, base: i64, file: &glommio::io::DmaFile, to: u64) {
        let started = std::time::Instant::now();
        let allocated = file.pre_allocate(to, false).await;
        crate::timeline::note_since("preallocate", started, || {
            format!("{} segment {base} to {to}", self.dir.display())
        });
        match allocated {
            Ok(()) => {
                if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
                    seg.allocated_to(to);
                }
            }
            Err(e) if self.state.borrow().failed.is_some() => {
                log::debug!("preallocating segment {base}: {e}")
            }
            Err(e) => log::warn!("preallocating segment {base}: {e}"),
        }
    }

    /// Writes one piece of zeros ahead of the active segment's end, so later
    /// flushes write into initialised blocks and each one's sync is one
    /// device flush instead of an extent-tree write and a flush. Returns
    /// whether more is wanted. The partition runs this as a task of its own
    /// after flushes, only while they are small (< 256 KiB, when the sync is
    /// most of their cost); large flushes (throughput) fall back to
    /// preallocation rather than writing every byte twice.
    ///
    /// A piece starts past every byte appended so far, so no flush that is
    /// already prepared writes there (a flush waits for it only when its
    /// own write reaches the piece). Its own durable write makes the new
    /// extents durable, so no produce's write has to (zeros lost in a crash
    /// read back as zeros: recovery stops there).
    pub(super) async fn zero_ahead(&self) -> Result<bool, StorageError> {
        if !self.wants_zeros() {
            return Ok(false);
        }
        let zero = self
            .zero_lock
            .acquire_permit(1)
            .await
            .expect("semaphore open");
        // Checked again under the lock: a seal or a failure may have come.
        let Some((file, base, from, to)) = self.next_zero_piece() else {
            return Ok(false);
        };
        self.zeroing.set(Some((base, from)));
        let mut zeros = file.alloc_dma_buffer((to - from) as usize);
        zeros.as_bytes_mut().fill(0);
        // Durable when it completes (O_DSYNC): the new extents are written
        // here, not by the next flush (in a produce's path).
        let started = std::time::Instant::now();
        let r = write_whole(&file, zeros, from).await;
        crate::timeline::note_since("zeros", started, || {
            format!("{} segment {base} {from}..{to}", self.dir.display())
        });
        self.zeroing.set(None);
        drop(zero);
        if let Err(e) = r {
            // Not fatal: flushes preallocate instead.
            log::warn!(
                "zeroing ahead in segment {base} of {}: {e}",
                self.dir.display()
            );
            return Ok(false);
        }
        if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
            seg.zeroed_to(to);
        }
        Ok(true)
    }

    /// Whether a piece of zeros is wanted ahead of the log's end (checked
    /// after each flush before a task is started for it).
    pub(super) fn wants_zeros(&self) -> bool {
        // With a journal only its own file's writes are synced: zeros
        // ahead in a segment spare no sync.
        self.journal.is_none() && self.next_zero_piece().is_some()
    }

    /// The next piece of zeros to write: the active segment's file, base
    /// and the range, while flushes are small and the zeros reach less far
    /// past the end than `ahead_of` says (at most `ZERO_AHEAD_BYTES`).
    pub(super) fn next_zero_piece(&self) -> Option<(Rc<glommio::io::DmaFile>, i64, u64, u64)> {
        if self.last_flush_bytes.get() >= ZERO_CHUNK_BYTES {
            return None;
        }
        let limit = align_up(self.config.get().segment_bytes);
        let st = self.state.borrow();
        let seg = st.segments.values().next_back()?;
        let from = seg.zeroed().max(align_up(seg.size()));
        let to = (from + ZERO_CHUNK_BYTES).min(limit);
        let wanted = st.failed.is_none()
            && !seg.sealed()
            && from
                < align_up(seg.size()) + ahead_of(seg.size(), ZERO_CHUNK_BYTES, ZERO_AHEAD_BYTES)
            && to > from;
        wanted.then(|| (seg.file().clone(), seg.base(), from, to))
    }

    /// Waits for a piece of zeros being written in segment `base` if a
    /// write up to `end` would reach it (the zeros must land first).
    pub(super) async fn wait_for_zeros(&self, base: i64, end: u64) {
        if matches!(self.zeroing.get(), Some((b, from)) if b == base && align_up(end) > from) {
            drop(self.zero_lock.acquire_permit(1).await);
        }
    }

    /// Whether appended batches wait to be written (not only synced).
    pub(super) fn has_unwritten(&self) -> bool {
        self.state.borrow().unsealed().any(|s| s.unwritten())
    }
}
