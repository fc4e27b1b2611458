//! Sealing a segment: padding trimmed, the file synced, and its offset and
//! time index files written (each with a CRC-32C trailer); and at open,
//! a sealed segment loaded from those files when they agree with it.

use super::paths::{index_path, time_index_path};
use super::staging::Staging;
use super::{align_down, Segment};
use crate::durable::write_small_file;
use crate::index::{OffsetIndex, TimeIndex};
use crate::StorageError;

/// What a sealed segment's index files record (and a clean stop's state).
pub(super) struct SegmentIndexes {
    pub(super) size: u64,
    pub(super) next_offset: i64,
    pub(super) max_timestamp: i64,
    pub(super) max_timestamp_offset: i64,
    pub(super) index: OffsetIndex,
    pub(super) time_index: TimeIndex,
}

impl Segment {
    /// Writes the index files and trims padding. Called once the segment is
    /// no longer active and fully durable.
    pub async fn seal(&mut self) -> Result<(), StorageError> {
        self.seal_job().await?;
        self.mark_sealed();
        Ok(())
    }

    /// The I/O of sealing, holding only copies, so the segment stays in
    /// the log (readable) while it runs; `mark_sealed` after it succeeds.
    pub fn seal_job(&self) -> impl std::future::Future<Output = Result<(), StorageError>> {
        assert!(!self.dirty(), "sealing a segment with unwritten batches");
        let ctx = format!("segment {} in {}", self.base, self.dir.display());
        let (file, size) = (self.file.clone(), self.size);
        let (idx, tidx) = self.index_files();
        let (idx_path, tidx_path) = (
            index_path(&self.dir, self.base),
            time_index_path(&self.dir, self.base),
        );
        async move {
            file.truncate(size)
                .await
                .map_err(|e| StorageError::io(format!("truncating {ctx}"), e))?;
            file.fdatasync()
                .await
                .map_err(|e| StorageError::io(format!("syncing {ctx}"), e))?;
            write_small_file(&idx_path, idx).await?;
            write_small_file(&tidx_path, tidx).await
        }
    }

    /// What the offset and time index files hold: the segment's size and
    /// end, its largest timestamp, and the sparse indexes.
    pub(super) fn index_files(&self) -> (Vec<u8>, Vec<u8>) {
        let mut idx = Vec::new();
        idx.extend_from_slice(&self.size.to_be_bytes());
        idx.extend_from_slice(&self.next_offset.to_be_bytes());
        idx.extend_from_slice(&self.index.encode());
        let mut tidx = Vec::new();
        tidx.extend_from_slice(&self.max_timestamp.to_be_bytes());
        tidx.extend_from_slice(&self.max_timestamp_offset.to_be_bytes());
        tidx.extend_from_slice(&self.time_index.encode());
        for file in [&mut idx, &mut tidx] {
            let crc = crc32c::crc32c(file);
            file.extend_from_slice(&crc.to_be_bytes());
        }
        (idx, tidx)
    }

    /// After `seal_job`: nothing is staged and the segment takes no appends.
    pub fn mark_sealed(&mut self) {
        self.staged = Staging::at(align_down(self.size));
        self.sealed = true;
    }

    /// Loads a sealed segment's state from its index files, if they are
    /// present and agree with the file.
    pub(super) fn load_indexes(&mut self, file_size: u64, expected_end: Option<i64>) -> bool {
        self.indexes(file_size, expected_end)
            .map(|found| {
                let size = found.size;
                self.take_indexes(found);
                self.durable_size = size;
                self.prepared_size = size;
                self.written_size = size;
                self.allocated = size;
                self.zeroed = size;
                self.staged = Staging::at(align_down(size));
                self.sealed = true;
            })
            .is_some()
    }

    /// Takes the segment's size, end and indexes as recorded.
    pub(super) fn take_indexes(&mut self, found: SegmentIndexes) {
        self.size = found.size;
        self.next_offset = found.next_offset;
        self.index = found.index;
        self.time_index = found.time_index;
        self.max_timestamp = found.max_timestamp;
        self.max_timestamp_offset = found.max_timestamp_offset;
    }

    /// A sealed segment's index files, if present and they agree with the
    /// file.
    fn indexes(&self, file_size: u64, expected_end: Option<i64>) -> Option<SegmentIndexes> {
        let idx = std::fs::read(index_path(&self.dir, self.base)).ok()?;
        let tidx = std::fs::read(time_index_path(&self.dir, self.base)).ok()?;
        let (idx, tidx) = (checked_index_file(&idx, 8)?, checked_index_file(&tidx, 12)?);
        let size = u64::from_be_bytes(idx[0..8].try_into().ok()?);
        let next_offset = i64::from_be_bytes(idx[8..16].try_into().ok()?);
        let max_ts = i64::from_be_bytes(tidx[0..8].try_into().ok()?);
        let max_ts_off = i64::from_be_bytes(tidx[8..16].try_into().ok()?);
        if size != file_size
            || next_offset < self.base
            || expected_end.is_some_and(|e| e != next_offset)
        {
            return None;
        }
        let index = OffsetIndex::decode(&idx[16..], size)?;
        let time_index = TimeIndex::decode(&tidx[16..])?;
        Some(SegmentIndexes {
            size,
            next_offset,
            max_timestamp: max_ts,
            max_timestamp_offset: max_ts_off,
            index,
            time_index,
        })
    }
}

/// An index file's content (a 16-byte head, then entries of `entry` bytes)
/// without its CRC-32C trailer, if the trailer matches. Files written
/// before index files had a trailer (their entries fill them exactly) are
/// taken as they are. `None`: rebuild the indexes by scanning.
fn checked_index_file(b: &[u8], entry: usize) -> Option<&[u8]> {
    if b.len() < 16 {
        return None;
    }
    match (b.len() - 16) % entry {
        0 => Some(b),
        4 => {
            let (body, crc) = b.split_at(b.len() - 4);
            (crc32c::crc32c(body).to_be_bytes() == crc).then_some(body)
        }
        _ => None,
    }
}
