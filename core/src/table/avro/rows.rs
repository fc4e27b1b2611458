//! Rows from an Avro table's records: the datum decoded with its writer
//! schema and fitted to the table's columns, a Debezium change event as its
//! `after` row.

use serde_json::Value;

use super::{unframe, Writer, WriterSchemas};
use crate::table::row::{convert, debezium, Incoming};
use crate::table::schema::{bytes_value, format_timestamp, TableSchema};

/// The row of a record of an Avro table, `None` for a tombstone (a null or
/// empty value: no row, and in a keyed table its key is deleted). Each
/// column takes the record field of its name, fitted to its type as a JSON
/// table's would be (its DEFAULT, or null, when the writer's record has no
/// such field); `_key` and `_timestamp` come from the record. A Debezium
/// change event (as its AvroConverter writes them) is its `after` row, a
/// delete is no row (in a keyed table, its key deleted, as the tombstone
/// that follows it does), as in a JSON table.
pub fn record_row(
    schema: &TableSchema,
    writers: &WriterSchemas,
    r: &Incoming,
) -> Result<Option<Vec<Value>>, String> {
    let Some(v) = r.value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let (id, datum) = unframe(v)?;
    row_of(schema, &*writers.get(id)?, datum, r)
}

/// The row of `datum` (the value of `r`) written with `writer`.
pub(super) fn row_of(
    schema: &TableSchema,
    writer: &Writer,
    datum: &[u8],
    r: &Incoming,
) -> Result<Option<Vec<Value>>, String> {
    let decoded = writer.decode(datum)?;
    let mut fields = match debezium(&decoded) {
        None => decoded,
        Some(event) => match (event.op, event.after) {
            ("c" | "r" | "u", Some(Value::Object(after))) => after.clone(),
            ("c" | "r" | "u", _) => {
                return Err(format!(
                    "a Debezium {:?} event without an after row",
                    event.op
                ))
            }
            ("d", _) if !schema.is_keyed() => {
                return Err(
                    "a Debezium delete needs a table with PRIMARY KEY (_key) to name its row; this table has none"
                        .into(),
                )
            }
            // A delete, or an event that is no row change (a truncate, a
            // message).
            _ => return Ok(None),
        },
    };
    let mut row = Vec::with_capacity(schema.columns.len());
    for c in &schema.columns {
        row.push(match c.name.as_str() {
            "_key" => r.key.map_or(Value::Null, |k| bytes_value(c.ty, k)),
            "_timestamp" => Value::String(format_timestamp(r.timestamp_ms)),
            name => match fields.remove(name) {
                Some(v) => convert(c, v)?,
                None => c.default.clone().unwrap_or(Value::Null),
            },
        });
    }
    Ok(Some(row))
}
