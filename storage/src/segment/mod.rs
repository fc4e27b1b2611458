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

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use glommio::io::{DmaFile, OpenOptions};

use crate::batch::{crc_ok, BatchHeader, BatchIter};
use crate::chunks::Chunks;
use crate::durable::{sync_dir, write_small_file};
use crate::index::{OffsetIndex, TimeIndex, INDEX_INTERVAL_BYTES};
use crate::producer_state::ProducerStates;
use crate::StorageError;

mod staging;
use staging::{Staging, MAX_PADDING_SHARE, PADDING};

/// Direct I/O alignment (the largest logical block size we expect).
pub const ALIGN: u64 = crate::batch::BLOCK;
/// Bytes read at a time when scanning a segment.
const SCAN_CHUNK: usize = 8 << 20;

pub fn align_down(v: u64) -> u64 {
    v & !(ALIGN - 1)
}
pub fn align_up(v: u64) -> u64 {
    align_down(v + ALIGN - 1)
}

pub fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}
pub fn index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.index"))
}
fn time_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.timeindex"))
}
/// The producer-state snapshot as of offset `base` (written when the segment
/// starting there was rolled to).
pub fn snapshot_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.snapshot"))
}

/// The active segment's state as a clean stop left it
/// (`PartitionLog::close`): the next start loads it instead of scanning the
/// segment, and removes it (durably) before anything is appended.
pub fn clean_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.clean"))
}

/// The first bytes of a clean-stop state file (its format's version).
const CLEAN_MAGIC: &[u8; 8] = b"weirCLN1";

/// What a clean-stop state file records: what index files would, and the
/// partition's producers.
struct CleanState {
    indexes: SegmentIndexes,
    producers: ProducerStates,
}

impl CleanState {
    /// Parses and checks a state file: its CRC-32C, every part whole.
    fn parse(b: &[u8]) -> Option<CleanState> {
        let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
        if crc32c::crc32c(body).to_be_bytes() != crc[..] || !body.starts_with(CLEAN_MAGIC) {
            return None;
        }
        let mut at = CLEAN_MAGIC.len();
        fn word(body: &[u8], at: &mut usize) -> Option<[u8; 8]> {
            let w = body.get(*at..*at + 8)?.try_into().ok()?;
            *at += 8;
            Some(w)
        }
        let size = u64::from_be_bytes(word(body, &mut at)?);
        let next_offset = i64::from_be_bytes(word(body, &mut at)?);
        let max_timestamp = i64::from_be_bytes(word(body, &mut at)?);
        let max_timestamp_offset = i64::from_be_bytes(word(body, &mut at)?);
        let mut parts = Vec::with_capacity(3);
        for _ in 0..3 {
            let len = usize::try_from(u64::from_be_bytes(word(body, &mut at)?)).ok()?;
            parts.push(body.get(at..at.checked_add(len)?)?);
            at += len;
        }
        if at != body.len() {
            return None;
        }
        Some(CleanState {
            indexes: SegmentIndexes {
                size,
                next_offset,
                max_timestamp,
                max_timestamp_offset,
                index: OffsetIndex::decode(parts[0], size)?,
                time_index: TimeIndex::decode(parts[1])?,
            },
            producers: ProducerStates::decode(parts[2])?,
        })
    }
}

/// What a sealed segment's index files record (and a clean stop's state).
struct SegmentIndexes {
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    max_timestamp_offset: i64,
    index: OffsetIndex,
    time_index: TimeIndex,
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
}

impl Segment {
    async fn open_file(path: &Path, create: bool) -> Result<DmaFile, StorageError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            // Each write is durable when it completes: one io_uring
            // operation (one wake-up) per flush, not a write and an
            // fdatasync.
            .custom_flags(libc::O_DSYNC)
            .dma_open(path)
            .await
            .map_err(|e| StorageError::io(format!("opening {}", path.display()), e))
    }

    /// Creates a new, empty segment and makes its directory entry durable.
    pub async fn create(dir: &Path, base: i64, now_ms: i64) -> Result<Segment, StorageError> {
        let path = log_path(dir, base);
        let file = Self::open_file(&path, true).await?;
        sync_dir(dir)?;
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
                // Whether the segment was ever sealed: its batches were
                // then all durable, and a sealed segment ends with its last
                // batch. One never sealed before the last may have been
                // torn by a crash: its later batches were not durable, nor
                // was anything after them.
                let was_sealed =
                    || index_path(dir, base).exists() || time_index_path(dir, base).exists();
                if let Some(end) =
                    expected_end.filter(|_| !is_last && seg.size < file_size && was_sealed())
                {
                    if seg.damaged_after_scan(file_size).await? {
                        // So this is damage, not a torn write: nothing
                        // acknowledged may be cut off or dropped. The
                        // file stays as it is; the log goes on at `end`.
                        log::error!(
                            "{}: segment {base} fails its CRC-32C check at byte {} (offset {}); \
                             offsets {} to {} are not served, and the file is kept as it is",
                            dir.display(),
                            seg.size,
                            seg.next_offset,
                            seg.next_offset,
                            end - 1
                        );
                        seg.damaged_from = Some(seg.next_offset);
                        seg.next_offset = end;
                        seg.durable_size = seg.size;
                        seg.prepared_size = seg.size;
                        seg.allocated = file_size;
                        seg.zeroed = file_size;
                        seg.mark_sealed();
                        return Ok(seg);
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
                    if !is_last && seg.size == file_size && seg.next_offset < end && was_sealed() {
                        seg.next_offset = end;
                    }
                }
            }
        }
        seg.durable_size = seg.size;
        seg.prepared_size = seg.size;
        seg.allocated = seg.size;
        seg.zeroed = seg.size;
        seg.staged.from = align_down(seg.size);
        if seg.staged.from < seg.size {
            let tail = seg
                .file
                .read_at(seg.staged.from, (seg.size - seg.staged.from) as usize)
                .await
                .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
            seg.staged.push(Bytes::copy_from_slice(&tail));
        }
        if file_size != seg.size {
            // Zeros after the last batch are space allocated ahead (every
            // segment has some until it is sealed); anything else is a write
            // torn by a crash, which is worth a warning.
            let probe = (file_size - seg.size).min(4096) as usize;
            let after = seg
                .file
                .read_at(seg.size, probe)
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
                file_size - seg.size,
                seg.next_offset
            );
            seg.file
                .truncate(seg.size)
                .await
                .map_err(|e| StorageError::io(format!("truncating {}", path.display()), e))?;
            seg.file
                .fdatasync()
                .await
                .map_err(|e| StorageError::io(format!("syncing {}", path.display()), e))?;
        }
        Ok(seg)
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

    /// Where damage found at opening begins (nothing from there to the
    /// segment's end is served).
    pub fn damaged_from(&self) -> Option<i64> {
        self.damaged_from
    }

    /// The state a clean stop leaves for the active segment (with the
    /// partition's encoded producer state), checksummed: see `clean_path`.
    pub fn clean_state(&self, producers: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + producers.len());
        b.extend_from_slice(CLEAN_MAGIC);
        b.extend_from_slice(&self.size.to_be_bytes());
        for v in [
            self.next_offset,
            self.max_timestamp,
            self.max_timestamp_offset,
        ] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        for part in [
            &self.index.encode()[..],
            &self.time_index.encode(),
            producers,
        ] {
            b.extend_from_slice(&(part.len() as u64).to_be_bytes());
            b.extend_from_slice(part);
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    /// The state a clean stop left for this (the last) segment, if there
    /// is one that holds together and agrees with the file: nothing but
    /// zeros may follow its size (a batch written after the state was
    /// taken would). The file is removed, durably, whatever it holds, so
    /// a state is never trusted twice: appends after this start change
    /// the segment.
    async fn take_clean_state(&self, file_size: u64) -> Result<Option<CleanState>, StorageError> {
        let path = clean_path(&self.dir, self.base);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                log::warn!("{}: {e}; scanning the segment", path.display());
                Vec::new()
            }
        };
        std::fs::remove_file(&path)
            .map_err(|e| StorageError::Io(format!("removing {}: {e}", path.display())))?;
        sync_dir(&self.dir)?;
        let Some(state) = CleanState::parse(&bytes) else {
            log::warn!(
                "{}: the clean-stop state does not hold together; scanning the segment",
                path.display()
            );
            return Ok(None);
        };
        let (size, next_offset) = (state.indexes.size, state.indexes.next_offset);
        if size > file_size || next_offset < self.base {
            log::warn!(
                "{}: the clean-stop state disagrees with the segment; scanning it",
                path.display()
            );
            return Ok(None);
        }
        if size < file_size {
            let probe = (file_size - size).min(4096) as usize;
            let after = self.file.read_at(size, probe).await.map_err(|e| {
                StorageError::io(
                    format!("reading {}", log_path(&self.dir, self.base).display()),
                    e,
                )
            })?;
            if after.iter().any(|b| *b != 0) {
                log::warn!(
                    "{}: bytes follow the clean-stop state's end; scanning the segment",
                    path.display()
                );
                return Ok(None);
            }
        }
        Ok(Some(state))
    }

    /// Loads a sealed segment's state from its index files, if they are
    /// present and agree with the file.
    fn load_indexes(&mut self, file_size: u64, expected_end: Option<i64>) -> bool {
        self.indexes(file_size, expected_end)
            .map(|found| {
                let size = found.size;
                self.take_indexes(found);
                self.durable_size = size;
                self.prepared_size = size;
                self.allocated = size;
                self.zeroed = size;
                self.staged = Staging::at(align_down(size));
                self.sealed = true;
            })
            .is_some()
    }

    /// Takes the segment's size, end and indexes as recorded.
    fn take_indexes(&mut self, found: SegmentIndexes) {
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
        (buf, from, self.size)
    }

    /// After a flush ending at `end` and every flush before it landed
    /// (the log applies them in order): drop the whole blocks that are now
    /// durable from the staging buffer.
    pub fn complete_flush(&mut self, end: u64) {
        assert!(end <= self.size);
        if end > self.durable_size {
            self.durable_size = end;
            self.staged.advance_to(align_down(end));
        }
        // A later flush's failure may have asked for a rewrite from before
        // this end: what this flush wrote need not be written again.
        self.prepared_size = self.prepared_size.max(end);
    }

    /// After a failed flush: nothing past the durable size is known
    /// written, so the next flush writes it all again.
    pub fn flush_failed(&mut self) {
        self.prepared_size = self.durable_size;
    }

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
    fn index_files(&self) -> (Vec<u8>, Vec<u8>) {
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

    /// A segment the cleaner writes into `file` (at `cleaned_path`): its
    /// batches are noted with `push_cleaned` as they are written.
    pub fn cleaned(dir: &Path, base: i64, file: DmaFile, now_ms: i64) -> Segment {
        Segment::empty(dir, base, file, now_ms)
    }

    /// The cleaner wrote a batch at the segment's end.
    pub fn push_cleaned(&mut self, h: &BatchHeader) {
        assert!(h.base_offset >= self.next_offset, "offsets must grow");
        self.note_batch(h, self.size);
        self.size += h.total_len() as u64;
    }

    /// The cleaner wrote every batch, durably: the segment covers offsets
    /// up to `end` (the next segment's base: the last batches may have
    /// gone) and is sealed. Its index files are written beside the
    /// cleaned file (`cleaned_path`), under the names the swap gives them.
    pub async fn finish_cleaned(&mut self, end: i64) -> Result<(), StorageError> {
        assert!(end >= self.next_offset);
        self.next_offset = end;
        self.durable_size = self.size;
        self.prepared_size = self.size;
        self.allocated = self.size;
        self.zeroed = self.size;
        self.mark_sealed();
        let (idx, tidx) = self.index_files();
        write_small_file(&cleaned_path(&index_path(&self.dir, self.base)), idx).await?;
        write_small_file(&cleaned_path(&time_index_path(&self.dir, self.base)), tidx).await
    }

    /// After `seal_job`: nothing is staged and the segment takes no appends.
    pub fn mark_sealed(&mut self) {
        self.staged = Staging::at(align_down(self.size));
        self.sealed = true;
    }

    /// Removes the segment's files.
    pub fn remove_files(&self) {
        remove_segment_files(&self.dir, self.base);
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

/// Removes the files of the segment at `base`, whichever exist.
pub fn remove_segment_files(dir: &Path, base: i64) {
    for p in [
        log_path(dir, base),
        index_path(dir, base),
        time_index_path(dir, base),
        snapshot_path(dir, base),
        clean_path(dir, base),
    ] {
        if let Err(e) = std::fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("removing {}: {e}", p.display());
            }
        }
    }
}

/// Where the cleaner writes the new version of a segment file before it
/// is swapped in: `path` with `.cleaned` added.
pub fn cleaned_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".cleaned");
    PathBuf::from(p)
}

/// The cleaned segment at `base` that replaces every segment from `base`
/// up to (not including) `end`, once its name says so: the commit point of
/// a swap (see `log::compact`).
pub fn swap_path(dir: &Path, base: i64, end: i64) -> PathBuf {
    dir.join(format!("{base:020}.{end:020}.swap"))
}

/// A segment file retired by a swap, to be removed (see `complete_swap`).
pub fn deleted_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log.deleted"))
}

/// Completes a swap whose cleaned segment is named by `swap_path(dir, base,
/// end)`: the segments it replaces go, its index files take their names,
/// then the cleaned file takes the segment's name. Every step may be
/// repeated, so a start-up after a crash anywhere in it finishes it. The
/// replaced segment files are renamed `deleted_path` (a rename changes no
/// extent, so it is quick) and returned: the caller removes them where a
/// slow unlink of a large file holds nothing up (start-up removes any it
/// finds).
pub fn complete_swap(dir: &Path, base: i64, end: i64) -> Result<Vec<PathBuf>, StorageError> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        StorageError::Io(format!("{what} {}: {e}", p.display()))
    };
    let mut retired = Vec::new();
    let mut retire = |b: i64| -> Result<(), StorageError> {
        let (from, to) = (log_path(dir, b), deleted_path(dir, b));
        match std::fs::rename(&from, &to) {
            Ok(()) => retired.push(to),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("renaming", &from, e)),
        }
        remove_segment_files(dir, b);
        Ok(())
    };
    let entries = std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let replaced = name
            .to_string_lossy()
            .strip_suffix(".log")
            .and_then(|stem| stem.parse::<i64>().ok())
            .filter(|b| *b > base && *b < end);
        if let Some(b) = replaced {
            retire(b)?;
        }
    }
    if crate::crash_point::reached("compaction-replaced") {
        return Err(StorageError::Io("stopped at a crash point".into()));
    }
    for path in [index_path(dir, base), time_index_path(dir, base)] {
        let cleaned = cleaned_path(&path);
        match std::fs::rename(&cleaned, &path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("renaming", &cleaned, e)),
        }
    }
    let swap = swap_path(dir, base, end);
    if swap.exists() {
        // The old file at `base` is retired like the others (the rename
        // below would otherwise free its extents in line).
        let (from, to) = (log_path(dir, base), deleted_path(dir, base));
        match std::fs::rename(&from, &to) {
            Ok(()) => retired.push(to),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("renaming", &from, e)),
        }
    }
    std::fs::rename(&swap, log_path(dir, base)).map_err(|e| io("renaming", &swap, e))?;
    // A stale clean-stop state or snapshot of the old file must not be
    // taken for the new one's.
    let _ = std::fs::remove_file(clean_path(dir, base));
    sync_dir(dir)?;
    Ok(retired)
}

/// Prepares this thread's io_uring for direct I/O under `dir`, and checks
/// that it works. Call once per shard before opening any segment.
///
/// glommio decides per block device (and per thread) whether reads may use
/// the polled ring by probing the first file opened; on an empty file that
/// probe reads nothing and wrongly succeeds, after which every read fails with
/// EOPNOTSUPP (seen on virtio disks). Opening a file that holds a block first
/// makes the probe real.
pub async fn prepare_direct_io(dir: &Path) -> Result<(), StorageError> {
    // One probe file per caller: shards start together, and one shard
    // rewriting a shared probe while another reads it reads 0 bytes.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(".direct-io-probe-{n}"));
    std::fs::write(&probe, vec![0u8; ALIGN as usize]).map_err(|e| {
        StorageError::Io(format!(
            "data directory {} is not writable: {e}",
            dir.display()
        ))
    })?;
    let file = glommio::io::DmaFile::open(&probe)
        .await
        .map_err(|e| StorageError::io(format!("opening {} for direct I/O", probe.display()), e))?;
    let read = file
        .read_at(0, ALIGN as usize)
        .await
        .map_err(|e| StorageError::io(format!("direct I/O read of {}", probe.display()), e))?;
    if read.len() != ALIGN as usize {
        return Err(StorageError::Io(format!(
            "direct I/O read of {} returned {} bytes, not {ALIGN}",
            probe.display(),
            read.len()
        )));
    }
    let _ = file.close().await;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
