//! The checks of a produce into an Avro table, on the partition's owner
//! before the batches are appended as produced: the writer schemas the
//! records name fetched, then every record decoded and fitted to the
//! columns.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use weir_storage::batch::BatchHeader;
use weir_storage::records::batch_records;

use super::rows::row_of;
use super::{unframe, WriterSchemas};
use crate::error::{ErrorCode, KafkaError};
use crate::shard::Shard;
use crate::table::row::{check_not_null, Incoming};
use crate::table::schema::TableSchema;

/// How soon a schema held without the table's subject is asked for again
/// (it may have been registered under it since).
const REFETCH_AFTER: Duration = Duration::from_secs(1);

/// Checks a record produced into an Avro table: it decodes with its writer
/// schema, which is a version of the table's subject, its row satisfies
/// NOT NULL, and a keyed table's record has a key.
fn check_record(schema: &TableSchema, writers: &WriterSchemas, r: &Incoming) -> Result<(), String> {
    if schema.is_keyed() && r.key.is_none() {
        return Err(format!(
            "a record without a key cannot name its row: the table's key is {:?}",
            schema.primary_key
        ));
    }
    let Some(v) = r.value.filter(|v| !v.is_empty()) else {
        return Ok(()); // a tombstone
    };
    let (id, datum) = unframe(v)?;
    let subject = schema.avro_subject().unwrap_or_default();
    let writer = writers.get(id)?;
    if !writer.subjects.iter().any(|s| s == subject) {
        return Err(format!(
            "schema id {id} is not a version of subject {subject:?} (it is registered under {:?})",
            writer.subjects
        ));
    }
    match row_of(schema, &writer, datum, r)? {
        Some(row) => check_not_null(schema, &row),
        None => Ok(()),
    }
}

/// Checks the batches of a produce into an Avro table (on the partition's
/// owner) before they are appended as produced: any record that fails
/// refuses the request with INVALID_RECORD saying which and why. The
/// writer schemas the records name are fetched from the registry first.
pub async fn check_produced(
    shard: &Rc<Shard>,
    topic: &str,
    schema: &TableSchema,
    batches: &[(BatchHeader, Bytes)],
) -> Result<(), KafkaError> {
    let subject = schema.avro_subject().unwrap_or_default();
    for (h, b) in batches {
        let records = batch_records(b, h, crate::table::MAX_DECOMPRESSED).map_err(|e| {
            KafkaError::new(ErrorCode::CorruptMessage, format!("table {topic}: {e}"))
        })?;
        // The ids to ask the registry for: not held, or held without the
        // table's subject a while ago.
        let writers = shard.state::<WriterSchemas>();
        let wanted: BTreeSet<u32> = records
            .iter()
            .filter_map(|r| r.value.as_deref().and_then(|v| unframe(v).ok()))
            .map(|(id, _)| id)
            .filter(|id| match writers.get(*id) {
                Ok(w) => {
                    !w.subjects.iter().any(|s| s == subject) && w.asked.elapsed() > REFETCH_AFTER
                }
                Err(_) => !writers.holds(*id),
            })
            .collect();
        if !wanted.is_empty() {
            writers.fetch(shard, wanted).await.map_err(|why| {
                KafkaError::new(
                    ErrorCode::UnknownServerError,
                    format!("table {topic}: asking the schema registry: {why}"),
                )
            })?;
        }
        for (i, r) in records.iter().enumerate() {
            let incoming = Incoming {
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                timestamp_ms: r.timestamp,
            };
            check_record(schema, &writers, &incoming)
                .map_err(|why| crate::table::refusal(topic, i, r.value.as_deref(), why))?;
        }
    }
    Ok(())
}
