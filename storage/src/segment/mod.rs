//! One log segment: a file of whole v2 batches named by its base offset,
//! written with O_DIRECT and O_DSYNC through glommio's `DmaFile` on
//! io_uring: a flush is one write whose completion is its sync.
//!
//! Appends are staged in memory and written by flushes as aligned blocks.
//! A flush that may be followed by another while its write is in flight
//! ends in **padding**: zeros from its last batch to the next block
//! boundary (at least `PAD_MIN` bytes, so the zero length field that marks
//! it lies inside it), and the next batch is appended after the padding.
//! Flushes then never share a block, so their writes may be in flight
//! together and land in any order. A flush without padding leaves its
//! partial last block staged, and the next flush writes it again whole
//! (after the first has landed). Readers, the recovery scan and the time
//! lookup skip padding (`BatchIter::in_file`); past the logical end the
//! file holds zeros until sealing truncates it.
//!
//! The segment's state is private to this module and read by the log
//! through accessors (here); what changes it is in the child modules:
//! - `open`: opening an existing segment, the recovery scan.
//! - `clean_stop`: the state a clean stop leaves, loaded instead of a scan.
//! - `flush`: appends staged in memory, flushes prepared and completed.
//! - `staging`: the bytes not yet durable.
//! - `seal`: sealing and the index files (written, loaded at open).
//! - `cleaned`: a segment the cleaner writes aside, and its swap.
//! - `paths`: the segment's file names; `direct_io`: the shard's probe.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::{DmaFile, OpenOptions};

use crate::batch::BatchHeader;
use crate::durable::sync_dir_in_ring;
use crate::index::{OffsetIndex, TimeIndex, INDEX_INTERVAL_BYTES};
use crate::StorageError;

mod clean_stop;
mod cleaned;
mod direct_io;
mod flush;
mod open;
mod paths;
mod seal;
mod staging;

pub use cleaned::complete_swap;
pub use direct_io::prepare_direct_io;
pub use paths::{
    clean_path, cleaned_path, deleted_path, index_path, log_path, remove_index_files,
    remove_segment_files, snapshot_path, swap_path,
};
use staging::Staging;

/// Direct I/O alignment (the largest logical block size we expect).
pub const ALIGN: u64 = crate::batch::BLOCK;

pub fn align_down(v: u64) -> u64 {
    v & !(ALIGN - 1)
}
pub fn align_up(v: u64) -> u64 {
    align_down(v + ALIGN - 1)
}

/// A segment's in-memory state. Lives on the shard that owns its partition.
pub struct Segment {
    base: i64,
    file: Rc<DmaFile>,
    dir: PathBuf,
    /// Logical size: whole batches appended, durable or staged, and the
    /// padding between them. The next batch goes here.
    size: u64,
    /// Bytes known to be on stable storage.
    durable_size: u64,
    /// Bytes handed to flushes (written, or being written): the next flush
    /// writes from the block holding this position. `durable_size <=
    /// prepared_size <= size`.
    prepared_size: u64,
    /// Bytes written to the file (synced or not). Without a journal a
    /// flush's write is its durability, and this follows `durable_size`;
    /// with one, flushes only journal their bytes and the log writes them
    /// here later in larger pieces (`write_out`): `written_size <=
    /// prepared_size`, and staged bytes stay until written.
    written_size: u64,
    /// The file's length on disk, past `size` when space was preallocated.
    allocated: u64,
    /// The file holds written blocks (data, or zeros written ahead) up to
    /// here: writes below it change no metadata, so their sync is one
    /// device flush. (Preallocated space is not enough: ext4 marks it
    /// unwritten, and the first write into it changes the extent tree,
    /// which each sync must then write first.)
    zeroed: u64,
    /// Bytes from an aligned position up to `size`, not yet known durable.
    staged: Staging,
    /// The offset after the last batch in the segment.
    next_offset: i64,
    index: OffsetIndex,
    time_index: TimeIndex,
    bytes_since_index: u64,
    /// Largest batch max-timestamp in the segment, and that batch's last offset.
    max_timestamp: i64,
    max_timestamp_offset: i64,
    /// Wall-clock ms when the segment was created (for `segment.ms`).
    created_ms: i64,
    /// Index files written and padding truncated.
    sealed: bool,
    /// Every batch below this byte passed its CRC-32C since the segment
    /// was opened (by the recovery scan or by reads): reads check the
    /// batches past it (`PartitionLog::read_below`).
    verified: std::cell::Cell<u64>,
    /// A segment before the last whose batches stop passing their CRC-32C
    /// at this offset: from there to its end nothing is served (its bytes
    /// are kept as they are, for an operator to look at).
    damaged_from: Option<i64>,
}

/// What the log reads of a segment; only the segment changes it.
impl Segment {
    pub fn base(&self) -> i64 {
        self.base
    }
    pub fn file(&self) -> &Rc<DmaFile> {
        &self.file
    }
    /// Logical size: whole batches and the padding between them.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Bytes known to be on stable storage.
    pub fn durable_size(&self) -> u64 {
        self.durable_size
    }
    /// The file's length on disk (past `size` when preallocated).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }
    /// Written blocks (data, or zeros written ahead) reach this far.
    pub fn zeroed(&self) -> u64 {
        self.zeroed
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    /// Batches below this byte passed their CRC-32C since opening.
    pub fn verified(&self) -> u64 {
        self.verified.get()
    }

    /// Batches from the start up to `to` passed their CRC-32C.
    pub fn mark_verified(&self, to: u64) {
        self.verified.set(self.verified.get().max(to));
    }

    pub fn index(&self) -> &OffsetIndex {
        &self.index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn max_timestamp_offset(&self) -> i64 {
        self.max_timestamp_offset
    }
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    pub fn sealed(&self) -> bool {
        self.sealed
    }

    /// Space was allocated up to `to` (it never shrinks but by sealing).
    pub fn allocated_to(&mut self, to: u64) {
        self.allocated = self.allocated.max(to);
    }

    /// Zeros were written durably up to `to`: the space is allocated and
    /// written.
    pub fn zeroed_to(&mut self, to: u64) {
        self.zeroed = self.zeroed.max(to);
        self.allocated_to(to);
    }

    /// Where damage found at opening begins (nothing from there to the
    /// segment's end is served).
    pub fn damaged_from(&self) -> Option<i64> {
        self.damaged_from
    }
}

impl Segment {
    async fn open_file(path: &Path, create: bool) -> Result<DmaFile, StorageError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            // Without a journal, each write is durable when it completes:
            // one io_uring operation (one wake-up) per flush, not a write
            // and an fdatasync. With one, the shard's journal write makes
            // a flush durable, and the segment is synced at checkpoints.
            .custom_flags(if crate::journal::current().is_some() {
                0
            } else {
                libc::O_DSYNC
            })
            .dma_open(path)
            .await
            .map_err(|e| StorageError::io(format!("opening {}", path.display()), e))
    }

    /// Creates a new, empty segment and makes its directory entry durable.
    pub async fn create(dir: &Path, base: i64, now_ms: i64) -> Result<Segment, StorageError> {
        let path = log_path(dir, base);
        let file = Self::open_file(&path, true).await?;
        sync_dir_in_ring(dir).await?;
        Ok(Segment::empty(dir, base, file, now_ms))
    }

    /// An empty segment's state over `file`: nothing written, nothing
    /// indexed. The one constructor; opening and loading fill it in.
    fn empty(dir: &Path, base: i64, file: DmaFile, now_ms: i64) -> Segment {
        Segment {
            base,
            file: Rc::new(file),
            dir: dir.to_path_buf(),
            size: 0,
            durable_size: 0,
            prepared_size: 0,
            written_size: 0,
            allocated: 0,
            zeroed: 0,
            staged: Staging::default(),
            next_offset: base,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index: 0,
            max_timestamp: -1,
            max_timestamp_offset: -1,
            created_ms: now_ms,
            sealed: false,
            verified: std::cell::Cell::new(0),
            damaged_from: None,
        }
    }

    /// Records a batch (already in place at `position`) in the indexes.
    fn note_batch(&mut self, h: &BatchHeader, position: u64) {
        let rel = (h.base_offset - self.base) as u32;
        if self.bytes_since_index >= INDEX_INTERVAL_BYTES {
            self.index.push(rel, position as u32);
            self.time_index.push(self.max_timestamp, rel);
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.total_len() as u64;
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.max_timestamp_offset = h.last_offset();
        }
        self.next_offset = h.last_offset() + 1;
    }

    /// Removes the segment's files.
    pub fn remove_files(&self) {
        remove_segment_files(&self.dir, self.base);
    }
}
