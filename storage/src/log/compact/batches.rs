//! What a pass reads of a sealed segment: its batches a chunk at a time,
//! each checked against its CRC-32C, and the records of a batch as the
//! cleaner needs them (their bytes, offset, key and whether a tombstone).

use bytes::Bytes;

use super::SegInfo;
use crate::batch::{batch_start, crc_ok, BatchHeader, BatchIter};
use crate::log::read::read_exact;
use crate::varint::read_varlong;
use crate::StorageError;

/// Bytes of a segment read at a time while cleaning.
const CHUNK: usize = 1 << 20;
/// Most bytes one batch is decompressed to while cleaning (a produced
/// batch is far smaller: the largest request is 100 MiB).
const DECOMPRESS_LIMIT: usize = 256 << 20;

/// The batches of a sealed segment, a chunk at a time, each checked
/// against its CRC (a pass never rewrites what it cannot vouch for).
pub(super) struct Batches<'a> {
    pub(super) seg: &'a SegInfo,
    pub(super) pos: u64,
}

impl Batches<'_> {
    /// The next batches; none at the segment's end.
    pub(super) async fn next_chunk(&mut self) -> Result<Vec<(BatchHeader, Bytes)>, StorageError> {
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
pub(super) struct RawRecord {
    pub(super) bytes: std::ops::Range<usize>,
    /// The bytes of its length field, then (after the attributes byte)
    /// its timestamp delta, and where what follows that begins.
    pub(super) len_bytes: usize,
    pub(super) timestamp_delta: i64,
    pub(super) after_timestamp: std::ops::Range<usize>,
    pub(super) offset: i64,
    pub(super) key: Option<std::ops::Range<usize>>,
    pub(super) tombstone: bool,
}

/// The records of a batch (`body`: its records' bytes, decompressed) as
/// the cleaner needs them. The error says which record is malformed.
pub(super) fn raw_records(body: &[u8], h: &BatchHeader) -> Result<Vec<RawRecord>, String> {
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

/// A batch's records' bytes, decompressed.
pub(super) fn body_of(batch: &Bytes, h: &BatchHeader) -> Result<Bytes, StorageError> {
    crate::records::batch_body(batch, h, DECOMPRESS_LIMIT).map_err(|e| {
        StorageError::Corrupt(format!(
            "the batch at offset {} does not decompress: {e}",
            h.base_offset
        ))
    })
}
