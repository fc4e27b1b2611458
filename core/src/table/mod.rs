//! Topics are tables. A topic made with CREATE TABLE has a schema
//! ([`schema`]); each produced record is converted to a row ([`row`]) on
//! the partition's owner before it is appended, so the log holds rows (a
//! consumer reads them as JSON, a keyed table's deletes as tombstones) and
//! SQL reads the same log ([`scan`]).

pub mod row;
pub mod scan;
pub mod schema;

use bytes::Bytes;
use weir_storage::batch::BatchHeader;
use weir_storage::records::{batch_records, build_stamped_batch, Producer};

use crate::error::{ErrorCode, KafkaError};
use row::{to_row, Incoming, RowOp};
use schema::TableSchema;

/// The largest a produced batch may decompress to (a batch is at most
/// `max.message.bytes` compressed; this bounds a hostile ratio).
pub const MAX_DECOMPRESSED: usize = 256 << 20;

/// Converts one produced batch into the batch of rows to store, or `None`
/// when none of its records makes a row. Any record that cannot become a
/// row refuses the whole batch with INVALID_RECORD; the node logs why.
pub fn rows_batch(
    table: &str,
    schema: &TableSchema,
    h: &BatchHeader,
    batch: &Bytes,
    now_ms: i64,
) -> Result<Option<(BatchHeader, Bytes)>, KafkaError> {
    let records = batch_records(batch, h, MAX_DECOMPRESSED)
        .map_err(|e| KafkaError::new(ErrorCode::CorruptMessage, format!("table {table}: {e}")))?;
    let append_time = h.is_log_append_time();
    let mut out = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let ts = if append_time { now_ms } else { r.timestamp };
        let incoming = Incoming {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            timestamp_ms: ts,
        };
        match to_row(schema, &incoming) {
            Ok(RowOp::Row { key, row }) => out.push((ts, key, Some(row))),
            Ok(RowOp::Delete { key }) => out.push((ts, Some(key), None)),
            Ok(RowOp::Skip) => {}
            Err(why) => {
                let value = r
                    .value
                    .as_deref()
                    .map(|v| String::from_utf8_lossy(&v[..v.len().min(200)]).into_owned());
                log::warn!("table {table}: record {i} of a batch refused: {why} (value {value:?})");
                let mut e = KafkaError::new(ErrorCode::InvalidRecord, format!("record {i}: {why}"));
                e.record_index = Some(i as i32);
                return Err(e);
            }
        }
    }
    if out.is_empty() {
        return Ok(None);
    }
    // An idempotent producer's sequence: the stored batch ends where the
    // produced one did, so the next batch follows on (also after a restart,
    // when the state is rebuilt from stored batches).
    let skipped = (records.len() - out.len()) as i32;
    let producer = Producer {
        id: h.producer_id,
        epoch: h.producer_epoch,
        base_sequence: if h.producer_id >= 0 {
            h.base_sequence.wrapping_add(skipped)
        } else {
            -1
        },
        log_append_time: append_time,
    };
    let recs: Vec<_> = out
        .iter()
        .map(|(ts, k, v)| (*ts, k.as_deref(), v.as_deref()))
        .collect();
    let bytes = build_stamped_batch(&recs, &producer);
    let header = BatchHeader::parse(&bytes).expect("a built batch");
    Ok(Some((header, bytes)))
}
