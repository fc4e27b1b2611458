//! Opening an existing segment: from its index files when sealed, from a
//! clean stop's state when it was the active one, else by the recovery
//! scan (every batch's CRC-32C checked, a torn tail truncated, damage
//! before the last segment kept as it is and not served).

use std::path::Path;

use bytes::Bytes;

use super::paths::{index_path, log_path, time_index_path};
use super::{align_down, Segment};
use crate::batch::{crc_ok, BatchHeader, BatchIter};
use crate::producer_state::ProducerStates;
use crate::StorageError;

/// Bytes read at a time when scanning a segment.
const SCAN_CHUNK: usize = 8 << 20;

impl Segment {
    /// Opens an existing segment. A sealed segment with valid index files is
    /// loaded from them; otherwise the file is scanned, every batch's CRC
    /// checked, and anything after the last valid batch (a torn write, or
    /// padding) truncated. `expected_end` is the next segment's base, if any.
    pub async fn open(
        dir: &Path,
        base: i64,
        is_last: bool,
        expected_end: Option<i64>,
        now_ms: i64,
        producers: Option<&mut ProducerStates>,
    ) -> Result<Segment, StorageError> {
        let path = log_path(dir, base);
        let file = Self::open_file(&path, false).await?;
        let file_size = file
            .file_size()
            .await
            .map_err(|e| StorageError::io(format!("sizing {}", path.display()), e))?;
        let mut seg = Segment::empty(dir, base, file, now_ms);
        if !is_last && seg.load_indexes(file_size, expected_end) {
            return Ok(seg);
        }
        let clean = match is_last {
            true => seg.take_clean_state(file_size).await?,
            false => None,
        };
        match clean {
            Some(state) => {
                seg.take_indexes(state.indexes);
                if let Some(p) = producers {
                    *p = state.producers;
                }
            }
            None => {
                seg.scan(file_size, producers, now_ms, is_last).await?;
                seg.verified.set(seg.size);
                if seg.end_after_scan(file_size, expected_end, is_last).await? {
                    return Ok(seg);
                }
            }
        }
        // What the file holds up to `size` is on disk: the next flush
        // starts there, from the block that holds it.
        seg.durable_size = seg.size;
        seg.prepared_size = seg.size;
        seg.written_size = seg.size;
        seg.allocated = seg.size;
        seg.zeroed = seg.size;
        seg.stage_last_block(&path).await?;
        if file_size != seg.size {
            seg.truncate_after_end(file_size, &path).await?;
        }
        Ok(seg)
    }

    /// Whether the segment was ever sealed: its batches were then all
    /// durable, and a sealed segment ends with its last batch. One never
    /// sealed before the last may have been torn by a crash: its later
    /// batches were not durable, nor was anything after them.
    fn was_sealed(&self) -> bool {
        index_path(&self.dir, self.base).exists() || time_index_path(&self.dir, self.base).exists()
    }

    /// After the recovery scan: where a segment before the last ends
    /// (`expected_end` is the next segment's base). Returns whether it is
    /// damaged, in which case it is kept as it is, sealed, and open is done.
    async fn end_after_scan(
        &mut self,
        file_size: u64,
        expected_end: Option<i64>,
        is_last: bool,
    ) -> Result<bool, StorageError> {
        if let Some(end) =
            expected_end.filter(|_| !is_last && self.size < file_size && self.was_sealed())
        {
            if self.damaged_after_scan(file_size).await? {
                self.keep_damaged(file_size, end);
                return Ok(true);
            }
        }
        // A compacted segment may have lost its last batches: when
        // its file holds nothing but whole batches, it ends where
        // the next segment begins. Only a sealed segment can have
        // been compacted: one never sealed that ends early was
        // rolled from before its batches were written (a crash
        // between a roll and the flush after it leaves it empty),
        // and recovery cuts the log there rather than leave
        // offsets that were never written in the middle of it.
        if let Some(end) = expected_end {
            if !is_last && self.size == file_size && self.next_offset < end && self.was_sealed() {
                self.next_offset = end;
            }
        }
        Ok(false)
    }

    /// A sealed segment before the last that fails its CRC-32C check
    /// where something other than zeros follows: this is damage, not a
    /// torn write, so nothing acknowledged may be cut off or dropped. The
    /// file stays as it is; the log goes on at `end`.
    fn keep_damaged(&mut self, file_size: u64, end: i64) {
        log::error!(
            "{}: segment {} fails its CRC-32C check at byte {} (offset {}); \
             offsets {} to {} are not served, and the file is kept as it is",
            self.dir.display(),
            self.base,
            self.size,
            self.next_offset,
            self.next_offset,
            end - 1
        );
        self.damaged_from = Some(self.next_offset);
        self.next_offset = end;
        self.durable_size = self.size;
        self.prepared_size = self.size;
        self.written_size = self.size;
        self.allocated = file_size;
        self.zeroed = file_size;
        self.mark_sealed();
    }

    /// Stages the partial last block (the bytes from the block boundary
    /// below `size`), which the next flush writes again whole.
    async fn stage_last_block(&mut self, path: &Path) -> Result<(), StorageError> {
        self.staged.from = align_down(self.size);
        if self.staged.from < self.size {
            let tail = self
                .file
                .read_at(self.staged.from, (self.size - self.staged.from) as usize)
                .await
                .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
            self.staged.push(Bytes::copy_from_slice(&tail));
        }
        Ok(())
    }

    /// Truncates the file (`file_size` bytes) to the last valid batch and
    /// syncs it.
    async fn truncate_after_end(&self, file_size: u64, path: &Path) -> Result<(), StorageError> {
        // Zeros after the last batch are space allocated ahead (every
        // segment has some until it is sealed); anything else is a write
        // torn by a crash, which is worth a warning.
        let probe = (file_size - self.size).min(4096) as usize;
        let after = self
            .file
            .read_at(self.size, probe)
            .await
            .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
        let level = if after.iter().all(|b| *b == 0) {
            log::Level::Debug
        } else {
            log::Level::Warn
        };
        log::log!(
            level,
            "{}: truncating {} bytes after the last valid batch (offset {})",
            path.display(),
            file_size - self.size,
            self.next_offset
        );
        self.file
            .truncate(self.size)
            .await
            .map_err(|e| StorageError::io(format!("truncating {}", path.display()), e))?;
        self.file
            .fdatasync()
            .await
            .map_err(|e| StorageError::io(format!("syncing {}", path.display()), e))
    }

    /// After a scan that stopped before the file's end: whether what
    /// follows the last valid batch is something other than zeros (space
    /// allocated ahead is zeros; a damaged batch is not).
    async fn damaged_after_scan(&self, file_size: u64) -> Result<bool, StorageError> {
        let probe = (file_size - self.size).min(4096) as usize;
        let after = self
            .file
            .read_at(self.size, probe)
            .await
            .map_err(|e| StorageError::io(format!("reading segment {}", self.base), e))?;
        Ok(after.iter().any(|b| *b != 0))
    }

    /// Reads the whole file, keeping every valid batch in offset order.
    /// Producer batches found are recorded in `producers`, if given. With
    /// `dense`, each batch must begin where the one before ended (appends
    /// make them so); a segment before the last may have gaps, left by
    /// compaction, so there offsets need only grow.
    async fn scan(
        &mut self,
        file_size: u64,
        mut producers: Option<&mut ProducerStates>,
        now_ms: i64,
        dense: bool,
    ) -> Result<(), StorageError> {
        let follows =
            |h: &BatchHeader, next: i64| h.base_offset == next || (!dense && h.base_offset > next);
        let mut pos = 0u64;
        'outer: while pos < file_size {
            let want = ((file_size - pos) as usize).min(SCAN_CHUNK);
            let chunk = self
                .file
                .read_at(pos, want)
                .await
                .map_err(|e| StorageError::io(format!("scanning segment {}", self.base), e))?;
            let mut it = BatchIter::in_file(&chunk, pos);
            let mut advanced = false;
            for (at, h) in it.by_ref() {
                let batch = &chunk[at..at + h.total_len()];
                if !follows(&h, self.next_offset) || !crc_ok(batch, &h) {
                    break 'outer;
                }
                self.note_batch(&h, pos + at as u64);
                if let Some(p) = producers.as_deref_mut() {
                    p.record(&h, crate::batch::control_marker(batch, &h), now_ms);
                }
                self.size = pos + (at + h.total_len()) as u64;
                advanced = true;
            }
            if !advanced {
                // A batch larger than the chunk (maybe after padding): read
                // exactly it.
                let start = crate::batch::batch_start(&chunk, pos);
                let Some(h) = chunk
                    .get((start - pos) as usize..)
                    .and_then(BatchHeader::parse)
                else {
                    break;
                };
                let len = h.total_len() as u64;
                if h.magic != 2 || start + len > file_size || start + len <= pos + want as u64 {
                    break;
                }
                let whole =
                    self.file.read_at(start, len as usize).await.map_err(|e| {
                        StorageError::io(format!("scanning segment {}", self.base), e)
                    })?;
                if !follows(&h, self.next_offset) || !crc_ok(&whole, &h) {
                    break;
                }
                self.note_batch(&h, start);
                if let Some(p) = producers.as_deref_mut() {
                    p.record(&h, crate::batch::control_marker(&whole, &h), now_ms);
                }
                self.size = start + len;
            }
            pos = self.size;
        }
        Ok(())
    }
}
