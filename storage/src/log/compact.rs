//! Log compaction: Kafka's log cleaner, per partition, on its owner.
//!
//! A pass looks at the sealed segments below the first uncleanable offset
//! (the active segment's base, the last stable offset, and the first
//! segment holding records newer than `min.compaction.lag.ms`). It runs
//! when the records not yet cleaned (the segments from `first_dirty` on)
//! make `min.cleanable.dirty.ratio` of those bytes, when a dirty segment
//! is older than `max.compaction.lag.ms`, or when a tombstone an earlier
//! pass kept is due to go. It maps every key of the dirty segments to its
//! latest offset (within `map_budget` bytes: a larger dirty section is
//! cleaned over several passes), then rewrites the segments from the
//! log's first up to where the map reaches, each group of neighbours
//! (together at most `segment.bytes`) into one new segment: a record stays
//! if it is its key's latest (or has no key), a tombstone until its
//! batch's delete horizon (KIP-534: the first pass that keeps it stamps
//! the batch with `delete.retention.ms` from then). Offsets keep
//! their values and readers step over the gaps. Control batches
//! (transaction markers) and aborted transactions' batches stay whole and
//! map nothing, so an aborted write never hides a committed one. A batch
//! of which some records stay is rebuilt of those records' bytes, with
//! its offsets' span, timestamps, producer fields and codec as they were.
//!
//! Crash safety: a group's new segment is written aside
//! (`{base}.log.cleaned` and its index files), synced, then renamed to
//! `{base}.{end}.swap` — the commit — after which the segments it replaces
//! are removed and it takes `{base}.log` (`segment::complete_swap`).
//! Opening a log finishes a swap found committed and removes cleaned files
//! that never were (`finish_interrupted`): a kill at any moment leaves the
//! old segments or the new one, never a mix.

use std::collections::HashMap;
use std::rc::Rc;

use glommio::io::DmaFile;

use super::read::read_exact;
use super::*;
use crate::batch::{
    batch_start, crc_ok, BatchHeader, BatchIter, ATTR_COMPRESSION_MASK, ATTR_DELETE_HORIZON,
    HEADER_LEN, LOG_OVERHEAD,
};
use crate::segment::{align_down, align_up, cleaned_path, complete_swap, swap_path};
use crate::varint::{read_varlong, write_varlong};

/// Bytes of a segment read at a time while cleaning.
const CHUNK: usize = 1 << 20;
/// Bytes of a new segment written at a time.
const WRITE_PIECE: usize = 1 << 20;
/// What one key costs in the map besides its bytes (the table's slot, the
/// box and the offset).
const ENTRY_OVERHEAD: usize = 48;
/// Most bytes one batch is decompressed to while cleaning (a produced
/// batch is far smaller: the largest request is 100 MiB).
const DECOMPRESS_LIMIT: usize = 256 << 20;

/// What a cleaning pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// Segments read and rewritten, and the segments written for them.
    pub segments_in: usize,
    pub segments_out: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Records dropped: superseded by a later one of their key, or
    /// tombstones past `delete.retention.ms`.
    pub records_removed: u64,
}

/// How far cleaning has gone, kept beside the log (`cleaner-offset`) so a
/// restart does not take the whole log for dirty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct CleanerState {
    /// Segments ending at or before this offset have been cleaned.
    first_dirty: i64,
    /// When the earliest tombstone a pass kept may go (ms), if any.
    tombstones_due: Option<i64>,
}

fn cleaner_path(dir: &Path) -> PathBuf {
    dir.join("cleaner-offset")
}

impl CleanerState {
    /// The saved state, or none yet (a missing or unreadable file costs a
    /// pass over the whole log, nothing else).
    pub(super) fn load(dir: &Path) -> CleanerState {
        let text = std::fs::read_to_string(cleaner_path(dir)).unwrap_or_default();
        let mut words = text.split_whitespace().map(|w| w.parse::<i64>().ok());
        match (words.next().flatten(), words.next().flatten()) {
            (Some(first_dirty), Some(due)) => CleanerState {
                first_dirty,
                tombstones_due: (due >= 0).then_some(due),
            },
            _ => CleanerState::default(),
        }
    }

    fn save(&self, dir: &Path) -> Result<(), StorageError> {
        let text = format!(
            "{} {}\n",
            self.first_dirty,
            self.tombstones_due.unwrap_or(-1)
        );
        crate::durable::replace(&cleaner_path(dir), text.as_bytes())
            .map_err(|e| StorageError::Io(format!("saving the cleaner's offset: {e}")))
    }
}

/// Finishes what a pass cut short left in `dir`: a committed swap is
/// completed, cleaned files never committed are removed.
pub(super) fn finish_interrupted(dir: &Path) -> Result<(), StorageError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError::Io(format!("listing {}: {e}", dir.display())))?;
    let (mut swaps, mut cleaned) = (Vec::new(), Vec::new());
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".swap") {
            if let Some((base, end)) = stem.split_once('.') {
                if let (Ok(base), Ok(end)) = (base.parse::<i64>(), end.parse::<i64>()) {
                    swaps.push((base, end));
                }
            }
        } else if name.ends_with(".cleaned") {
            cleaned.push(entry.path());
        }
    }
    for (base, end) in swaps {
        log::warn!(
            "{}: finishing the swap of cleaned segment {base} (up to offset {end})",
            dir.display()
        );
        complete_swap(dir, base, end)?;
    }
    // Retired segment files (see `complete_swap`), and their leftovers.
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError::Io(format!("listing {}: {e}", dir.display())))?;
    cleaned.extend(
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "deleted")),
    );
    let mut removed = false;
    for path in cleaned {
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StorageError::Io(format!(
                    "removing {}: {e}",
                    path.display()
                )))
            }
        }
    }
    if removed {
        log::info!(
            "{}: removed the files a cut-short cleaning pass left",
            dir.display()
        );
        crate::durable::sync_dir(dir)?;
    }
    Ok(())
}

/// A sealed segment as a pass sees it.
struct SegInfo {
    base: i64,
    end: i64,
    size: u64,
    file: Rc<DmaFile>,
    max_timestamp: i64,
}

/// The batches of a sealed segment, a chunk at a time, each checked
/// against its CRC (a pass never rewrites what it cannot vouch for).
struct Batches<'a> {
    seg: &'a SegInfo,
    pos: u64,
}

impl Batches<'_> {
    /// The next batches; none at the segment's end.
    async fn next_chunk(&mut self) -> Result<Vec<(BatchHeader, Bytes)>, StorageError> {
        let (file, size, pos) = (&self.seg.file, self.seg.size, self.pos);
        let corrupt = |what: String| {
            StorageError::Corrupt(format!("segment {} at {pos}: {what}", self.seg.base))
        };
        if pos >= size {
            return Ok(Vec::new());
        }
        let data = read_exact(file, pos, ((size - pos) as usize).min(CHUNK)).await?;
        let mut out = Vec::new();
        let mut end = 0;
        for (at, h) in BatchIter::in_file(&data, pos) {
            let batch = data.slice(at..at + h.total_len());
            if !crc_ok(&batch, &h) {
                return Err(corrupt(format!(
                    "the batch at offset {} fails its CRC",
                    h.base_offset
                )));
            }
            end = at + h.total_len();
            out.push((h, batch));
        }
        if !out.is_empty() {
            self.pos = pos + end as u64;
            return Ok(out);
        }
        // Padding up to the end, or one batch larger than the chunk.
        let start = batch_start(&data, pos);
        if start >= size {
            self.pos = size;
            return Ok(Vec::new());
        }
        let h = data
            .get((start - pos) as usize..)
            .and_then(BatchHeader::parse)
            .filter(|h| h.magic == 2 && start + h.total_len() as u64 <= size)
            .ok_or_else(|| corrupt("no whole batch here".into()))?;
        let batch = read_exact(file, start, h.total_len()).await?;
        if !crc_ok(&batch, &h) {
            return Err(corrupt(format!(
                "the batch at offset {} fails its CRC",
                h.base_offset
            )));
        }
        self.pos = start + h.total_len() as u64;
        Ok(vec![(h, batch)])
    }
}

/// One record of a batch as the cleaner needs it: its bytes in the
/// (decompressed) body, its offset, its key's place, and whether it is a
/// tombstone.
struct RawRecord {
    bytes: std::ops::Range<usize>,
    /// The bytes of its length field, then (after the attributes byte)
    /// its timestamp delta, and where what follows that begins.
    len_bytes: usize,
    timestamp_delta: i64,
    after_timestamp: std::ops::Range<usize>,
    offset: i64,
    key: Option<std::ops::Range<usize>>,
    tombstone: bool,
}

fn raw_records(body: &[u8], h: &BatchHeader) -> Result<Vec<RawRecord>, String> {
    let mut out = Vec::with_capacity(h.record_count.clamp(0, 1 << 16) as usize);
    let mut at = 0;
    for i in 0..h.record_count {
        let bad = || {
            format!(
                "record {i} of the batch at offset {} is malformed",
                h.base_offset
            )
        };
        let start = at;
        let len = read_varlong(body, &mut at).ok_or_else(bad)?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .filter(|e| *e <= body.len())
            .ok_or_else(bad)?;
        let len_bytes = at - start;
        at += 1; // attributes
        let timestamp_delta = read_varlong(body, &mut at).ok_or_else(bad)?;
        let after_timestamp = at..end;
        let offset_delta = read_varlong(body, &mut at).ok_or_else(bad)?;
        let key_len = read_varlong(body, &mut at).ok_or_else(bad)?;
        let key = match usize::try_from(key_len) {
            Ok(n) => {
                let k = at..at.checked_add(n).filter(|e| *e <= end).ok_or_else(bad)?;
                at = k.end;
                Some(k)
            }
            Err(_) => None,
        };
        let value_len = read_varlong(body, &mut at).ok_or_else(bad)?;
        if at > end {
            return Err(bad());
        }
        out.push(RawRecord {
            bytes: start..end,
            len_bytes,
            timestamp_delta,
            after_timestamp,
            offset: h.base_offset.wrapping_add(offset_delta),
            key,
            tombstone: value_len < 0,
        });
        at = end;
    }
    Ok(out)
}

/// What cleaning keeps of one batch.
enum Kept {
    Whole,
    Nothing,
    /// The batch rebuilt of the records that stay, and how many went.
    Part(Bytes, u64),
}

/// A new segment being written of what stays of neighbouring segments.
struct Rewrite<'a> {
    /// The segments it replaces, in order.
    group: Vec<&'a SegInfo>,
    seg: Segment,
    file: Rc<DmaFile>,
    path: PathBuf,
    out: Writer,
    /// Whether it differs from `group` (else it is dropped).
    changed: bool,
    removed: u64,
    /// When the earliest tombstone it keeps may go.
    due: Option<i64>,
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
    /// Runs a cleaning pass if the log is compacted and one is due (see
    /// the module's comment), keeping its key map within `map_budget`
    /// bytes. Returns what it did; `None` when nothing was due (or a pass
    /// is already running).
    pub async fn compact(
        &self,
        now_ms: i64,
        map_budget: usize,
    ) -> Result<Option<Cleaned>, StorageError> {
        let Some(c) = self.config.get().compaction else {
            return Ok(None);
        };
        if self.compacting.replace(true) {
            return Ok(None);
        }
        let r = self.clean_pass(now_ms, c, map_budget).await;
        self.compacting.set(false);
        r
    }

    /// The offset below which every segment has been cleaned.
    pub fn cleaned_to(&self) -> i64 {
        self.cleaner.get().first_dirty.max(self.log_start())
    }

    /// The sealed segments a pass may clean, oldest first.
    fn cleanable(&self, now_ms: i64, c: &Compaction) -> Vec<SegInfo> {
        let stable = self.last_stable_offset();
        let st = self.state.borrow();
        let active = *st.segments.keys().next_back().expect("a segment");
        let mut out = Vec::new();
        for seg in st.segments.values() {
            // A damaged segment is kept as it is (rewriting it would drop
            // what cannot be read), and so is what follows it.
            if !seg.sealed()
                || seg.base() == active
                || seg.next_offset() > stable
                || seg.damaged_from().is_some()
            {
                break;
            }
            if c.min_lag_ms > 0 && seg.max_timestamp() > now_ms.saturating_sub(c.min_lag_ms) {
                break;
            }
            out.push(SegInfo {
                base: seg.base(),
                end: seg.next_offset(),
                size: seg.size(),
                file: seg.file().clone(),
                max_timestamp: seg.max_timestamp(),
            });
        }
        out
    }

    async fn clean_pass(
        &self,
        now_ms: i64,
        c: Compaction,
        map_budget: usize,
    ) -> Result<Option<Cleaned>, StorageError> {
        let segs = self.cleanable(now_ms, &c);
        let Some(first) = segs.first() else {
            return Ok(None);
        };
        let state = self.cleaner.get();
        let first_dirty = state.first_dirty.max(first.base);
        let dirty: Vec<&SegInfo> = segs.iter().filter(|s| s.end > first_dirty).collect();
        let dirty_bytes: u64 = dirty.iter().map(|s| s.size).sum();
        let all_bytes: u64 = segs.iter().map(|s| s.size).sum();
        let ratio_due = dirty_bytes > 0
            && dirty_bytes as u128 * 1_000_000 >= c.min_dirty_ratio_ppm as u128 * all_bytes as u128;
        let lag_due = dirty
            .iter()
            .any(|s| s.max_timestamp >= 0 && now_ms.saturating_sub(s.max_timestamp) > c.max_lag_ms);
        let tombstones_due = state.tombstones_due.is_some_and(|t| t <= now_ms);
        if !(ratio_due || lag_due || tombstones_due) {
            return Ok(None);
        }
        let (map, map_end) = self.key_map(&dirty, first_dirty, map_budget).await?;
        let mut done = Cleaned::default();
        let mut due: Option<i64> = None;
        let segment_bytes = self.config.get().segment_bytes.min(u32::MAX as u64);
        // Neighbours go into one new segment while what it holds so far and
        // the next one's bytes (what stays of them is no more) fit in
        // `segment.bytes`, and its offsets in the index's 32 bits.
        let mut rw: Option<Rewrite<'_>> = None;
        for s in segs.iter().filter(|s| s.end <= map_end) {
            if self.closed.get() {
                break;
            }
            if let Some(r) = rw.take() {
                if r.seg.size() + s.size <= segment_bytes && s.end - r.seg.base() <= i32::MAX as i64
                {
                    rw = Some(r);
                } else {
                    due = earlier(due, r.due);
                    self.finish_rewrite(r, &mut done).await?;
                }
            }
            let r = match rw.as_mut() {
                Some(r) => r,
                None => rw.insert(self.start_rewrite(s.base, now_ms).await?),
            };
            if let Err(e) = self.rewrite_segment(r, s, &map, now_ms, &c).await {
                remove_cleaned(&self.dir, r.seg.base());
                return Err(e);
            }
        }
        if let Some(r) = rw.take() {
            due = earlier(due, r.due);
            self.finish_rewrite(r, &mut done).await?;
        }
        if self.closed.get() {
            return Ok(Some(done));
        }
        let state = CleanerState {
            first_dirty: map_end.max(state.first_dirty),
            tombstones_due: due,
        };
        state.save(&self.dir)?;
        self.cleaner.set(state);
        Ok(Some(done))
    }

    /// Every key of the dirty segments with its latest offset, and the
    /// offset the map covers up to: whole segments, until the map passes
    /// the budget (so by at most one segment's keys).
    async fn key_map(
        &self,
        dirty: &[&SegInfo],
        first_dirty: i64,
        budget: usize,
    ) -> Result<(HashMap<Box<[u8]>, i64>, i64), StorageError> {
        let mut map: HashMap<Box<[u8]>, i64> = HashMap::new();
        let mut bytes = 0usize;
        let mut end = first_dirty;
        for s in dirty {
            if bytes > budget {
                break;
            }
            let mut batches = Batches { seg: s, pos: 0 };
            loop {
                let chunk = batches.next_chunk().await?;
                if chunk.is_empty() {
                    break;
                }
                for (h, batch) in chunk {
                    if h.is_control() || self.aborted(&h) {
                        continue;
                    }
                    let body = body_of(&batch, &h)?;
                    for r in raw_records(&body, &h).map_err(StorageError::Corrupt)? {
                        let Some(k) = r.key else { continue };
                        let key = &body[k];
                        match map.get_mut(key) {
                            Some(o) => *o = (*o).max(r.offset),
                            None => {
                                bytes += key.len() + ENTRY_OVERHEAD;
                                map.insert(key.into(), r.offset);
                            }
                        }
                    }
                }
                // Requests first: the pass's queue has a tenth of their
                // share, and its turn ends after each chunk.
                glommio::executor().yield_task_queue_now().await;
            }
            end = s.end;
        }
        Ok((map, end))
    }

    /// Whether a transactional batch belongs to an aborted transaction.
    fn aborted(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && self
                .producers
                .borrow()
                .aborted_between(h.base_offset, h.last_offset() + 1)
                .iter()
                .any(|t| t.producer_id == h.producer_id)
    }

    /// What stays of one batch (see the module's comment). A batch that
    /// keeps a tombstone carries its delete horizon (KIP-534: set by the
    /// first pass that keeps it, `delete.retention.ms` on; the tombstones
    /// go in the first pass after it); the earliest lowers `due`.
    fn keep(
        &self,
        h: &BatchHeader,
        batch: &Bytes,
        map: &HashMap<Box<[u8]>, i64>,
        now_ms: i64,
        delete_retention_ms: i64,
        due: &mut Option<i64>,
    ) -> Result<Kept, StorageError> {
        if h.is_control() || self.aborted(h) {
            return Ok(Kept::Whole);
        }
        let horizon = (h.attributes & ATTR_DELETE_HORIZON != 0).then_some(h.base_timestamp);
        let body = body_of(batch, h)?;
        let records = raw_records(&body, h).map_err(StorageError::Corrupt)?;
        let mut kept = Vec::with_capacity(records.len());
        let mut tombstones = false;
        for r in &records {
            let latest = r.key.as_ref().is_none_or(|k| {
                map.get(&body[k.clone()])
                    .is_none_or(|latest| *latest <= r.offset)
            });
            let expired = r.tombstone && horizon.is_some_and(|t| t <= now_ms);
            if latest && !expired {
                tombstones |= r.tombstone;
                kept.push(r);
            }
        }
        // The first pass to keep a tombstone stamps its batch's horizon.
        let new_horizon =
            (tombstones && horizon.is_none()).then(|| now_ms.saturating_add(delete_retention_ms));
        if tombstones {
            *due = earlier(*due, horizon.or(new_horizon));
        }
        if kept.len() == records.len() && new_horizon.is_none() {
            return Ok(Kept::Whole);
        }
        if kept.is_empty() {
            return Ok(Kept::Nothing);
        }
        let mut new_body = Vec::with_capacity(kept.iter().map(|r| r.bytes.len() + 8).sum());
        for r in &kept {
            match new_horizon {
                // The base timestamp becomes the horizon: each record's
                // timestamp delta is written again from it (Kafka's
                // `MemoryRecordsBuilder` does the same), so readers get
                // the same timestamps.
                Some(base) => {
                    let delta = h
                        .base_timestamp
                        .saturating_add(r.timestamp_delta)
                        .saturating_sub(base);
                    let mut head = bytes::BytesMut::with_capacity(12);
                    head.extend_from_slice(&body[r.bytes.start + r.len_bytes..][..1]);
                    write_varlong(&mut head, delta);
                    let rest = &body[r.after_timestamp.clone()];
                    let mut len = bytes::BytesMut::with_capacity(5);
                    write_varlong(&mut len, (head.len() + rest.len()) as i64);
                    new_body.extend_from_slice(&len);
                    new_body.extend_from_slice(&head);
                    new_body.extend_from_slice(rest);
                }
                None => new_body.extend_from_slice(&body[r.bytes.clone()]),
            }
        }
        let codec = h.attributes & ATTR_COMPRESSION_MASK;
        let packed = crate::compression::compress(codec, &new_body).map_err(StorageError::Io)?;
        let mut b = Vec::with_capacity(HEADER_LEN + packed.len());
        b.extend_from_slice(&batch[..HEADER_LEN]);
        b.extend_from_slice(&packed);
        let batch_length = (b.len() - LOG_OVERHEAD) as i32;
        b[8..12].copy_from_slice(&batch_length.to_be_bytes());
        if let Some(base) = new_horizon {
            let attributes = h.attributes | ATTR_DELETE_HORIZON;
            b[21..23].copy_from_slice(&attributes.to_be_bytes());
            b[27..35].copy_from_slice(&base.to_be_bytes());
        }
        b[57..61].copy_from_slice(&(kept.len() as i32).to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(Kept::Part(
            Bytes::from(b),
            (records.len() - kept.len()) as u64,
        ))
    }

    /// Starts a new segment at `base`, written aside.
    async fn start_rewrite<'a>(&self, base: i64, now_ms: i64) -> Result<Rewrite<'a>, StorageError> {
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
    async fn rewrite_segment<'a>(
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
    async fn finish_rewrite(
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
            crate::durable::sync_dir(&self.dir)
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

    /// Swaps a cleaned segment in for `group`, if every segment of it is
    /// still there as it was read (retention or DeleteRecords may have
    /// removed some meanwhile; a closed log swaps nothing). No await
    /// inside: nothing else touches the log between the commit and the
    /// segments' change in memory.
    fn install(&self, group: &[&SegInfo], seg: Segment) -> Result<bool, StorageError> {
        let (base, end) = (seg.base(), seg.next_offset());
        let intact = !self.closed.get() && {
            let st = self.state.borrow();
            group.iter().all(|g| {
                st.segments
                    .get(&g.base)
                    .is_some_and(|s| s.sealed() && s.next_offset() == g.end)
            })
        };
        if !intact {
            remove_cleaned(&self.dir, base);
            return Ok(false);
        }
        if crate::crash_point::reached("compaction-cleaned") {
            return Err(StorageError::Io("stopped at a crash point".into()));
        }
        let cleaned = cleaned_path(&crate::segment::log_path(&self.dir, base));
        std::fs::rename(&cleaned, swap_path(&self.dir, base, end))
            .map_err(|e| StorageError::Io(format!("renaming {}: {e}", cleaned.display())))?;
        crate::durable::sync_dir(&self.dir)?;
        if crate::crash_point::reached("compaction-committed") {
            return Err(StorageError::Io("stopped at a crash point".into()));
        }
        let retired = complete_swap(&self.dir, base, end)?;
        // Unlinking a large file frees its extents in the syscall: on the
        // blocking pool, not the shard.
        let unlink = glommio::executor().spawn_blocking(move || {
            for p in retired {
                if let Err(e) = std::fs::remove_file(&p) {
                    log::warn!("removing {}: {e}", p.display());
                }
            }
        });
        glommio::spawn_local(unlink).detach();
        let mut st = self.state.borrow_mut();
        for g in group {
            st.segments.remove(&g.base);
        }
        st.segments.insert(base, seg);
        // A read ahead holds positions in a file that is gone.
        *self.readahead.borrow_mut() = None;
        Ok(true)
    }
}

/// The earlier of two times, either of which may be missing.
fn earlier(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A batch's records' bytes, decompressed.
fn body_of(batch: &Bytes, h: &BatchHeader) -> Result<Bytes, StorageError> {
    crate::records::batch_body(batch, h, DECOMPRESS_LIMIT).map_err(|e| {
        StorageError::Corrupt(format!(
            "the batch at offset {} does not decompress: {e}",
            h.base_offset
        ))
    })
}

/// Removes the cleaned files of a segment never swapped in.
fn remove_cleaned(dir: &Path, base: i64) {
    let log = crate::segment::log_path(dir, base);
    for p in [
        cleaned_path(&log),
        cleaned_path(&log.with_extension("index")),
        cleaned_path(&log.with_extension("timeindex")),
    ] {
        let _ = std::fs::remove_file(p);
    }
}
