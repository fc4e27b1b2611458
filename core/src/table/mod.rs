//! Topics are tables. A topic made with CREATE TABLE has a schema
//! ([`schema`]); each record produced into a JSON table is converted to a
//! row ([`row`]) on the partition's owner before it is appended, so the log
//! holds rows (a consumer reads them as JSON with the record's headers, a
//! keyed table's deletes as tombstones) and SQL reads the same log
//! ([`scan`]). A table with a `_value` column keeps the records as produced
//! (checked, not converted) and makes rows as it reads them.

pub mod avro;
pub mod ingest;
pub mod keyed;
pub mod keyed_snapshot;
pub mod read;
pub mod row;
/// A table's columns and format, kept in the catalog.
pub use crate::catalog::schema;

use bytes::Bytes;
use weir_storage::batch::BatchHeader;
use weir_storage::records::{batch_records, build_stamped_batch, Producer};

use crate::error::{ErrorCode, KafkaError};
use row::{check_record, to_row, Incoming, RowOp};
use schema::TableSchema;

/// The most a produce request into a typed table may decompress to, all
/// its batches together (and so the most rows it may hold before they are
/// appended): a batch is at most `max.message.bytes` compressed, and this
/// bounds what a hostile compression ratio could make the node hold.
pub const MAX_DECOMPRESSED: usize = 256 << 20;

/// Converts one produced batch into the batch of rows to store, or `None`
/// when none of its records makes a row. Any record that cannot become a
/// row refuses the whole batch with INVALID_RECORD; the node logs why.
/// The batch may decompress to at most `limit` bytes. Rows take `now_ms`
/// as their timestamp when the batch or the table (`log_append_time`, its
/// `message.timestamp.type`) says LogAppendTime.
pub fn rows_batch(
    table: &str,
    schema: &TableSchema,
    h: &BatchHeader,
    batch: &Bytes,
    now_ms: i64,
    log_append_time: bool,
    limit: usize,
) -> Result<Option<(BatchHeader, Bytes)>, KafkaError> {
    let records = batch_records(batch, h, limit)
        .map_err(|e| KafkaError::new(ErrorCode::CorruptMessage, format!("table {table}: {e}")))?;
    let append_time = log_append_time || h.is_log_append_time();
    let mut out = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let ts = if append_time { now_ms } else { r.timestamp };
        let incoming = Incoming {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            timestamp_ms: ts,
        };
        // The record's headers go with its row.
        match to_row(schema, &incoming) {
            Ok(RowOp::Row { key, row }) => out.push((ts, key, Some(row), &r.headers[..])),
            Ok(RowOp::Delete { key }) => out.push((ts, Some(key), None, &r.headers[..])),
            Ok(RowOp::Skip) => {}
            Err(why) => return Err(refusal(table, i, r.value.as_deref(), why)),
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
        transactional: h.is_transactional(),
        control: false,
    };
    let recs: Vec<_> = out
        .iter()
        .map(|(ts, k, v, headers)| (*ts, k.as_deref(), v.as_deref(), *headers))
        .collect();
    let bytes = build_stamped_batch(&recs, &producer);
    let header = BatchHeader::parse(&bytes).expect("a built batch");
    Ok(Some((header, bytes)))
}

/// Checks one batch produced into a table that keeps records (`_value`),
/// which is stored as produced: any record that breaks NOT NULL (or has no
/// key, in a keyed table) refuses it with INVALID_RECORD. A table whose
/// records cannot break anything is not decompressed at all.
pub fn check_records(
    table: &str,
    schema: &TableSchema,
    h: &BatchHeader,
    batch: &Bytes,
    limit: usize,
) -> Result<(), KafkaError> {
    let constrained = schema.is_keyed() || schema.columns.iter().any(|c| c.not_null);
    if !constrained {
        return Ok(());
    }
    let records = batch_records(batch, h, limit)
        .map_err(|e| KafkaError::new(ErrorCode::CorruptMessage, format!("table {table}: {e}")))?;
    for (i, r) in records.iter().enumerate() {
        let incoming = Incoming {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            timestamp_ms: r.timestamp,
        };
        check_record(schema, &incoming)
            .map_err(|why| refusal(table, i, r.value.as_deref(), why))?;
    }
    Ok(())
}

/// INVALID_RECORD for record `i` of a batch. The start of its value goes to
/// the log with the refusal (the produce handler logs it), not back to the
/// client.
fn refusal(table: &str, i: usize, value: Option<&[u8]>, why: String) -> KafkaError {
    let value = match value {
        Some(v) => format!(
            "value {:?}",
            String::from_utf8_lossy(&v[..v.len().min(200)])
        ),
        None => "no value".to_string(),
    };
    let mut e = KafkaError::new(
        ErrorCode::InvalidRecord,
        format!("table {table}: record {i}: {why}"),
    );
    e.record_index = Some(i as i32);
    e.detail = Some(value);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::schema::{Column, ColumnType};
    use weir_storage::batch::HEADER_LEN;

    /// A zstd batch of `n` JSON records `{"n": i}`.
    fn zstd_batch(n: usize) -> Bytes {
        let values: Vec<Vec<u8>> = (0..n)
            .map(|i| format!(r#"{{"n":{i}}}"#).into_bytes())
            .collect();
        let recs: Vec<_> = values
            .iter()
            .map(|v| (0i64, None, Some(&v[..]), &[][..]))
            .collect();
        let plain = build_stamped_batch(&recs, &Producer::NONE);
        let body = zstd::encode_all(&plain[HEADER_LEN..], 3).unwrap();
        let mut b = plain[..HEADER_LEN].to_vec();
        b.extend(body);
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[21..23].copy_from_slice(&4i16.to_be_bytes()); // zstd
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn compressed_batches_convert_within_their_bound() {
        let schema = TableSchema {
            columns: vec![Column {
                name: "n".into(),
                ty: ColumnType::BigInt,
                not_null: true,
                default: None,
            }],
            primary_key: vec![],
            format: Default::default(),
        };
        let batch = zstd_batch(1000);
        let h = BatchHeader::parse(&batch).unwrap();
        let (rh, rows) = rows_batch("t", &schema, &h, &batch, 0, false, 1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(rh.record_count, 1000);
        assert!(rows.len() > 8000);
        // A LogAppendTime table: the rows take the append time.
        let (sh, _) = rows_batch("t", &schema, &h, &batch, 12_345, true, 1 << 20)
            .unwrap()
            .unwrap();
        assert!(sh.is_log_append_time() && !rh.is_log_append_time());
        assert_eq!(sh.max_timestamp, 12_345);
        let e = rows_batch("t", &schema, &h, &batch, 0, false, 1000).unwrap_err();
        assert_eq!(e.code, ErrorCode::CorruptMessage);
        assert!(e.message.contains("more than 1000 bytes"), "{}", e.message);
    }
}
