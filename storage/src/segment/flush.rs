//! Appends and flushes of the active segment: batches staged in memory
//! (shared, not copied), handed to flushes as aligned DMA buffers (ending
//! in padding when another flush may follow while this one is in flight),
//! and the bookkeeping of flushes that landed or failed.

use bytes::Bytes;

use super::staging::{MAX_PADDING_SHARE, PADDING};
use super::{align_down, align_up, Segment, ALIGN};
use crate::batch::BatchHeader;
use crate::chunks::Chunks;

impl Segment {
    /// Stages a batch whose base offset is already assigned. The bytes are
    /// shared, not copied, until the flush copies them into its DMA buffer.
    pub fn append(&mut self, batch: &Chunks, h: &BatchHeader) {
        assert_eq!(h.base_offset, self.next_offset, "offsets must be dense");
        assert!(!self.sealed, "append to a sealed segment");
        self.note_batch(h, self.size);
        self.size += batch.len() as u64;
        for part in batch.parts() {
            self.staged.push(part.clone());
        }
        debug_assert_eq!(self.staged.from + self.staged.len as u64, self.size);
    }

    /// Whether appended bytes are not yet durable.
    pub fn dirty(&self) -> bool {
        self.durable_size < self.size
    }

    /// Whether appended bytes wait to be handed to a flush.
    pub fn unwritten(&self) -> bool {
        self.prepared_size < self.size
    }

    /// Whether the next flush would write a block that an earlier flush
    /// (maybe still in flight) wrote too: it must wait for that write.
    pub fn shares_block(&self) -> bool {
        !self.prepared_size.is_multiple_of(ALIGN)
    }

    /// Hands the bytes not yet handed to a flush, from the block that holds
    /// `prepared_size`, to a flush as an aligned DMA buffer: (buffer, file
    /// position, logical end it writes). With `pad`, the flush ends in
    /// padding (see the module's comment) and the next batch is appended
    /// after it, so the next flush shares no block with this one; but never
    /// more padding than `MAX_PADDING_SHARE` of the bytes the flush adds (a
    /// partition of small flushes would fill its disk with zeros: those
    /// flushes wait for each other instead).
    pub fn prepare_flush(&mut self, pad: bool) -> (glommio::io::DmaBuffer, u64, u64) {
        let end = crate::batch::padding_end(self.size);
        let adds = self.size - self.prepared_size;
        if pad && !self.size.is_multiple_of(ALIGN) && (end - self.size) * MAX_PADDING_SHARE <= adds
        {
            let zeros = (end - self.size) as usize;
            self.staged.push(Bytes::from_static(&PADDING[..zeros]));
            self.size = end;
            self.bytes_since_index += zeros as u64;
        }
        let from = align_down(self.prepared_size);
        let len = (self.size - from) as usize;
        let mut buf = self.file.alloc_dma_buffer(align_up(len as u64) as usize);
        let bytes = buf.as_bytes_mut();
        self.staged.copy_into(from, &mut bytes[..len]);
        bytes[len..].fill(0);
        crate::dma_copy::fence();
        self.prepared_size = self.size;
        // The flush writes the file itself.
        self.written_size = self.size;
        (buf, from, self.size)
    }

    /// After a flush ending at `end` and every flush before it landed
    /// (the log applies them in order): drop the whole blocks that are now
    /// durable (and written to the file) from the staging buffer.
    pub fn complete_flush(&mut self, end: u64) {
        assert!(end <= self.size);
        if end > self.durable_size {
            self.durable_size = end;
            self.drop_settled();
        }
        // A later flush's failure may have asked for a rewrite from before
        // this end: what this flush wrote need not be written again.
        self.prepared_size = self.prepared_size.max(end);
    }

    /// Drops the staged whole blocks that are both durable and written
    /// to the file (without a journal a flush does both at once).
    fn drop_settled(&mut self) {
        let settled = self.durable_size.min(self.written_size);
        if align_down(settled) > self.staged.from {
            self.staged.advance_to(align_down(settled));
        }
    }

    /// Bytes handed to the journal but not yet written to the file (a
    /// failed flush moves `prepared_size` back below what a write-out may
    /// have written already).
    pub fn unwritten_to_file(&self) -> u64 {
        self.prepared_size.saturating_sub(self.written_size)
    }

    /// A journaled flush: hands the bytes not yet handed to a flush over,
    /// as (file position, shared pieces); no padding, since only
    /// `write_out` writes the file, one write at a time.
    pub fn prepare_journaled(&mut self) -> (u64, Vec<Bytes>) {
        let from = self.prepared_size;
        let pieces = self.staged.pieces_from(from);
        self.prepared_size = self.size;
        (from, pieces)
    }

    /// The bytes handed to the journal and not yet written to the file,
    /// from the block holding the first of them, as an aligned DMA buffer:
    /// (buffer, file position, end). `None` when all are written.
    pub fn prepare_write_out(&self) -> Option<(glommio::io::DmaBuffer, u64, u64)> {
        if self.written_size >= self.prepared_size {
            return None;
        }
        let (from, end) = (align_down(self.written_size), self.prepared_size);
        let len = (end - from) as usize;
        let mut buf = self.file.alloc_dma_buffer(align_up(len as u64) as usize);
        let bytes = buf.as_bytes_mut();
        self.staged.copy_range(from, &mut bytes[..len]);
        bytes[len..].fill(0);
        crate::dma_copy::fence();
        Some((buf, from, end))
    }

    /// The bytes handed to the journal and not yet written to the file,
    /// as (file position, shared pieces).
    pub fn unwritten_pieces(&self) -> (u64, Vec<Bytes>) {
        let from = self.written_size;
        if from >= self.prepared_size {
            return (from, Vec::new());
        }
        let mut left = (self.prepared_size - from) as usize;
        let mut pieces = self.staged.pieces_from(from);
        for p in pieces.iter_mut() {
            let keep = p.len().min(left);
            p.truncate(keep);
            left -= keep;
        }
        pieces.retain(|p| !p.is_empty());
        (from, pieces)
    }

    /// A write-out ending at `end` landed.
    pub fn complete_write_out(&mut self, end: u64) {
        self.written_size = self.written_size.max(end);
        self.drop_settled();
    }

    /// After a failed flush: nothing past the durable size is known
    /// written, so the next flush writes it all again.
    pub fn flush_failed(&mut self) {
        self.prepared_size = self.durable_size;
    }
}
