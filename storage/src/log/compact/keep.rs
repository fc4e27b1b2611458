//! What cleaning keeps of one batch: all of it, none, or a batch rebuilt
//! of the records that stay (see the module's comment in `compact`).

use std::collections::HashMap;

use bytes::Bytes;

use super::batches::{body_of, raw_records, RawRecord};
use super::earlier;
use crate::batch::{BatchHeader, ATTR_COMPRESSION_MASK, ATTR_DELETE_HORIZON, HEADER_LEN};
use crate::log::PartitionLog;
use crate::varint::write_varlong;
use crate::StorageError;

/// What cleaning keeps of one batch.
pub(super) enum Kept {
    Whole,
    Nothing,
    /// The batch rebuilt of the records that stay, and how many went.
    Part(Bytes, u64),
}

impl PartitionLog {
    /// What stays of one batch (see the module's comment). A batch that
    /// keeps a tombstone carries its delete horizon (KIP-534: set by the
    /// first pass that keeps it, `delete.retention.ms` on; the tombstones
    /// go in the first pass after it); the earliest lowers `due`.
    pub(super) fn keep(
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
        let rebuilt = rebuild(h, batch, &body, &kept, new_horizon)?;
        Ok(Kept::Part(rebuilt, (records.len() - kept.len()) as u64))
    }
}

/// A batch rebuilt of the records that stay (`kept`, whose bytes are in
/// `body`, the batch's records decompressed): the header as it was but for
/// the length and record count (the offsets' span stays, readers step over
/// the gaps) and, with `new_horizon`, the delete horizon as its base
/// timestamp; the records compressed again with the batch's codec.
fn rebuild(
    h: &BatchHeader,
    batch: &Bytes,
    body: &[u8],
    kept: &[&RawRecord],
    new_horizon: Option<i64>,
) -> Result<Bytes, StorageError> {
    let mut new_body = Vec::with_capacity(kept.iter().map(|r| r.bytes.len() + 8).sum());
    for r in kept {
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
    if let Some(base) = new_horizon {
        let attributes = h.attributes | ATTR_DELETE_HORIZON;
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
        b[27..35].copy_from_slice(&base.to_be_bytes());
    }
    b[57..61].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    crate::batch::seal(&mut b);
    Ok(Bytes::from(b))
}
