//! A table's records read back from its log as rows, on the shard that
//! owns the partition: every committed record in offset order
//! (`each_record`), and a record as its table's row (`table_row`). SQL's
//! scans (`sql::scan`), keyed tables' rows (`keyed`) and the schema
//! registry read through here.

use std::ops::ControlFlow;
use std::rc::Rc;

use serde_json::Value;
use weir_storage::batch::BatchIter;
use weir_storage::records::{batch_records, Record};

use super::avro::{self, WriterSchemas};
use super::row::{record_row, Incoming};
use super::schema::{TableSchema, RAW_COLUMNS};
use super::MAX_DECOMPRESSED;
use crate::catalog::TopicMeta;
use crate::partition::Partition;
use crate::shard::Shard;

/// Why one partition's scan failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ScanError {
    /// The statement's fault: a WHERE or an aggregate that fails on some
    /// row, or more rows or groups than the scan limit allows.
    Statement(String),
    /// The node's: the log could not be read, or holds a batch that does
    /// not decode.
    Read(String),
}

/// What evaluating a statement over a row says is wrong is the statement's.
impl From<String> for ScanError {
    fn from(why: String) -> Self {
        ScanError::Statement(why)
    }
}

/// The columns of a table, in order.
pub fn columns(meta: &TopicMeta) -> Vec<String> {
    match &meta.schema {
        Some(s) => s.columns.iter().map(|c| c.name.clone()).collect(),
        None => RAW_COLUMNS.iter().map(|c| c.to_string()).collect(),
    }
}

/// A stored row (a JSON object) as values in column order.
pub fn typed_row(schema: &TableSchema, value: &[u8]) -> Vec<Value> {
    let mut b = value.to_vec();
    match simd_json::serde::from_slice::<Value>(&mut b) {
        Ok(Value::Object(mut o)) => schema
            .columns
            .iter()
            .map(|c| o.remove(&c.name).unwrap_or(Value::Null))
            .collect(),
        _ => vec![Value::Null; schema.columns.len()],
    }
}

/// A record's row in a typed table: the stored row of a JSON table, the row
/// made from the record in a `_value` or Avro table (with the writer
/// schemas `writers` holds); `None` for a tombstone.
pub fn table_row(
    schema: &TableSchema,
    writers: &WriterSchemas,
    r: &Record,
) -> Result<Option<Vec<Value>>, ScanError> {
    let incoming = || Incoming {
        key: r.key.as_deref(),
        value: r.value.as_deref(),
        timestamp_ms: r.timestamp,
    };
    if schema.avro_subject().is_some() {
        // Every record was checked when produced: one that does not read
        // now names a schema since deleted for good.
        avro::record_row(schema, writers, &incoming())
            .map_err(|why| ScanError::Read(format!("the record at offset {}: {why}", r.offset)))
    } else if schema.keeps_records() {
        Ok(record_row(schema, &incoming()))
    } else {
        Ok(r.value.as_deref().map(|v| typed_row(schema, v)))
    }
}

/// Calls `f` on every committed record from `from` to the last stable
/// offset, in order, until `f` says to stop: as a read_committed consumer
/// reads, so rows of an open or aborted transaction are never seen (and a
/// keyed table's state moves only when a transaction commits). With
/// `avro` (an Avro table's scan), the writer schemas a batch's records
/// name are fetched into that shard's `writers` before `f` sees them.
pub(crate) async fn each_record(
    p: &Partition,
    from: i64,
    avro: Option<&Rc<Shard>>,
    f: &mut dyn FnMut(&Record) -> Result<ControlFlow<()>, ScanError>,
) -> Result<i64, ScanError> {
    let stable = p.log.last_stable_offset();
    let mut offset = from.max(p.log.log_start());
    while offset < stable {
        let read = p
            .read(offset, 1 << 20, true)
            .await
            .map_err(|e| ScanError::Read(format!("{}-{}: {}", p.topic, p.index, e.message)))?;
        // Batches are parsed from one piece (a scan may copy; fetches don't).
        let records = read.records.to_bytes();
        let mut advanced = false;
        for (pos, h) in BatchIter::new(&records) {
            if h.last_offset() < offset {
                continue;
            }
            let aborted = read.aborted.as_deref().unwrap_or_default().iter().any(|t| {
                t.producer_id == h.producer_id
                    && (t.first_offset..t.last_offset).contains(&h.base_offset)
            });
            if h.is_control() || (h.is_transactional() && aborted) {
                offset = h.last_offset() + 1;
                advanced = true;
                continue;
            }
            let batch = records.slice(pos..pos + h.total_len());
            let rows = batch_records(&batch, &h, MAX_DECOMPRESSED)
                .map_err(|e| ScanError::Read(format!("{}-{}: {e}", p.topic, p.index)))?;
            if let Some(shard) = avro {
                let values = rows.iter().map(|r| r.value.as_deref());
                shard
                    .state::<WriterSchemas>()
                    .fetch_missing(shard, values)
                    .await
                    .map_err(|why| {
                        ScanError::Read(format!(
                            "{}-{}: asking the schema registry: {why}",
                            p.topic, p.index
                        ))
                    })?;
            }
            for r in rows.iter().filter(|r| r.offset >= offset) {
                if f(r)?.is_break() {
                    return Ok(r.offset + 1);
                }
            }
            offset = h.last_offset() + 1;
            advanced = true;
        }
        if !advanced {
            return Err(ScanError::Read(format!(
                "{}-{}: no batch at offset {offset}",
                p.topic, p.index
            )));
        }
    }
    Ok(offset)
}
