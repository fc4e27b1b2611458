//! A new segment written of what stays of neighbouring segments: started
//! aside (`{base}.log.cleaned`), filled batch by batch in aligned pieces,
//! then finished (synced, its index files written) and swapped in.

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use glommio::io::DmaFile;

use super::batches::Batches;
use super::keep::Kept;
use super::swap::remove_cleaned;
use super::{Cleaned, SegInfo};
use crate::batch::BatchHeader;
use crate::log::{write_whole, Compaction, PartitionLog};
use crate::segment::{align_down, align_up, cleaned_path, Segment};
use crate::StorageError;

/// Bytes of a new segment written at a time.
const WRITE_PIECE: usize = 1 << 20;

/// A new segment being written of what stays of neighbouring segments.
pub(super) struct Rewrite<'a> {
    /// The segments it replaces, in order.
    group: Vec<&'a SegInfo>,
    pub(super) seg: Segment,
    file: Rc<DmaFile>,
    path: PathBuf,
    out: Writer,
    /// Whether it differs from `group` (else it is dropped).
    changed: bool,
    removed: u64,
    /// When the earliest tombstone it keeps may go.
    pub(super) due: Option<i64>,
}

/// The bytes of a segment being written, in aligned pieces.
struct Writer {
    pending: Vec<u8>,
    written: u64,
}

impl Writer {
    /// Writes the whole blocks pending (with `all`, the rest too, padded
    /// with zeros to a block: the caller truncates the file after).
    async fn drain(&mut self, file: &DmaFile, all: bool) -> Result<(), StorageError> {
        let len = self.pending.len();
        let n = if all {
            align_up(len as u64)
        } else {
            align_down(len as u64)
        } as usize;
        if n == 0 {
            return Ok(());
        }
        let mut buf = file.alloc_dma_buffer(n);
        let take = n.min(len);
        buf.as_bytes_mut()[..take].copy_from_slice(&self.pending[..take]);
        buf.as_bytes_mut()[take..].fill(0);
        write_whole(file, buf, self.written)
            .await
            .map_err(|e| StorageError::Io(format!("writing a cleaned segment: {e}")))?;
        self.written += n as u64;
        self.pending.drain(..take);
        Ok(())
    }
}

impl PartitionLog {
    /// Starts a new segment at `base`, written aside.
    pub(super) async fn start_rewrite<'a>(
        &self,
        base: i64,
        now_ms: i64,
    ) -> Result<Rewrite<'a>, StorageError> {
        let path = cleaned_path(&crate::segment::log_path(&self.dir, base));
        let file = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .dma_open(&path)
            .await
            .map_err(|e| StorageError::io(format!("creating {}", path.display()), e))?;
        let seg = Segment::cleaned(&self.dir, base, file, now_ms);
        Ok(Rewrite {
            group: Vec::new(),
            file: seg.file().clone(),
            seg,
            path,
            out: Writer {
                pending: Vec::with_capacity(2 * WRITE_PIECE),
                written: 0,
            },
            changed: false,
            removed: 0,
            due: None,
        })
    }

    /// Adds what stays of segment `s` to the new segment.
    pub(super) async fn rewrite_segment<'a>(
        &self,
        rw: &mut Rewrite<'a>,
        s: &'a SegInfo,
        map: &HashMap<Box<[u8]>, i64>,
        now_ms: i64,
        c: &Compaction,
    ) -> Result<(), StorageError> {
        rw.changed |= !rw.group.is_empty();
        rw.group.push(s);
        let mut batches = Batches { seg: s, pos: 0 };
        loop {
            let chunk = batches.next_chunk().await?;
            if chunk.is_empty() {
                return Ok(());
            }
            for (h, batch) in chunk {
                match self.keep(&h, &batch, map, now_ms, c.delete_retention_ms, &mut rw.due)? {
                    Kept::Whole => {
                        rw.seg.push_cleaned(&h);
                        rw.out.pending.extend_from_slice(&batch);
                    }
                    Kept::Nothing => {
                        rw.changed = true;
                        rw.removed += h.record_count.max(0) as u64;
                    }
                    Kept::Part(b, gone) => {
                        rw.changed = true;
                        rw.removed += gone;
                        let h = BatchHeader::parse(&b).expect("a rebuilt batch");
                        rw.seg.push_cleaned(&h);
                        rw.out.pending.extend_from_slice(&b);
                    }
                }
                if rw.out.pending.len() >= WRITE_PIECE {
                    rw.out.drain(&rw.file, false).await?;
                }
            }
            glommio::executor().yield_task_queue_now().await;
        }
    }

    /// Finishes a new segment and swaps it in for the segments it was
    /// made of, unless nothing changed (it is then dropped).
    pub(super) async fn finish_rewrite(
        &self,
        rw: Rewrite<'_>,
        done: &mut Cleaned,
    ) -> Result<(), StorageError> {
        let Rewrite {
            group,
            mut seg,
            file,
            path,
            mut out,
            changed,
            removed,
            due: _,
        } = rw;
        let base = seg.base();
        if !changed || self.closed.get() {
            remove_cleaned(&self.dir, base);
            return Ok(());
        }
        let end = group[group.len() - 1].end;
        let written: Result<(), StorageError> = async {
            out.drain(&file, true).await?;
            let ctx = || format!("finishing {}", path.display());
            file.truncate(seg.size())
                .await
                .map_err(|e| StorageError::io(ctx(), e))?;
            file.fdatasync()
                .await
                .map_err(|e| StorageError::io(ctx(), e))?;
            seg.finish_cleaned(end).await?;
            crate::durable::sync_dir_in_ring(&self.dir).await
        }
        .await;
        if let Err(e) = written {
            remove_cleaned(&self.dir, base);
            return Err(e);
        }
        let bytes_in: u64 = group.iter().map(|s| s.size).sum();
        let bytes_out = seg.size();
        if self.install(&group, seg)? {
            done.segments_in += group.len();
            done.segments_out += 1;
            done.bytes_in += bytes_in;
            done.bytes_out += bytes_out;
            done.records_removed += removed;
        }
        Ok(())
    }
}
