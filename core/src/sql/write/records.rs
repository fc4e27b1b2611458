//! The records an INSERT writes, one per row, as a producer would send
//! them for each kind of table: a raw topic's (`_key`, `_value`,
//! `_headers`), a `_value` table's, an Avro table's (a datum of the
//! subject's latest schema) and a JSON table's (the row as a JSON object);
//! and a key or value from a SQL value (also a DELETE's keys).

use bytes::Bytes;
use serde_json::{Map, Value};

use super::Record;
use crate::sql::error::SqlResult;
use crate::table::avro;
use crate::table::row::{check_record, convert, object_bytes, to_row, Incoming};
use crate::table::schema::{parse_bytes, parse_timestamp, ColumnType, TableSchema};

/// A record's key or value from a SQL value: a string's bytes (a BYTES
/// column's decoded from base64 or `\x` hex), null as null, anything else
/// as its JSON text.
pub(super) fn record_bytes(ty: ColumnType, v: &Value) -> SqlResult<Option<Vec<u8>>> {
    Ok(match v {
        Value::Null => None,
        Value::String(s) if ty == ColumnType::Bytes => Some(
            parse_bytes(s)
                .ok_or_else(|| format!("{s:?} is not base64 or \\x and hex digits (BYTES)"))?,
        ),
        Value::String(s) => Some(s.as_bytes().to_vec()),
        other => Some(other.to_string().into_bytes()),
    })
}

/// A `_timestamp` value: epoch milliseconds or a timestamp's text.
fn timestamp(v: Option<Value>, now: i64) -> SqlResult<i64> {
    match v {
        None | Some(Value::Null) => Ok(now),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| format!("_timestamp {n} is not whole milliseconds")),
        Some(Value::String(s)) => {
            parse_timestamp(&s).ok_or_else(|| format!("_timestamp {s:?} is not a timestamp"))
        }
        Some(other) => Err(format!("_timestamp {other} is not a timestamp")),
    }
}

/// A record of a raw topic: `_key`, `_value`, `_headers` (the text of a
/// JSON object of text or null values), `_timestamp`, `_partition`.
pub(super) fn raw_record(mut row: Map<String, Value>, now: i64) -> SqlResult<Record> {
    let partition = match row.remove("_partition") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| format!("_partition {v} is not a partition number"))?,
        ),
    };
    let headers = match row.remove("_headers") {
        None | Some(Value::Null) => Vec::new(),
        // A SQL literal is text: the headers are a JSON object in it.
        Some(Value::String(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(o)) => o
                .into_iter()
                .map(|(k, v)| Ok((k, record_bytes(ColumnType::Varchar, &v)?.map(Bytes::from))))
                .collect::<SqlResult<_>>()?,
            _ => return Err(format!("_headers {text:?} is not a JSON object")),
        },
        Some(other) => return Err(format!("_headers {other} is not a JSON object")),
    };
    let record = Record {
        partition,
        timestamp: timestamp(row.remove("_timestamp"), now)?,
        key: record_bytes(
            ColumnType::Varchar,
            row.remove("_key").as_ref().unwrap_or(&Value::Null),
        )?,
        value: record_bytes(
            ColumnType::Varchar,
            row.remove("_value").as_ref().unwrap_or(&Value::Null),
        )?,
        headers,
    };
    if let Some(c) = row.keys().next() {
        return Err(format!(
            "a raw table has the columns _partition, _timestamp, _key, _value and _headers; {c} is not one it takes (_offset is given by the log)"
        ));
    }
    Ok(record)
}

/// A record of an Avro table: its value the row (but `_key` and
/// `_timestamp`, the record's) as a datum of the subject's latest schema,
/// framed with its id; the produce path checks it as any producer's.
pub(super) fn avro_record(
    schema: &TableSchema,
    writer: &avro::Writer,
    mut row: Map<String, Value>,
    now: i64,
) -> SqlResult<Record> {
    if let Some(c) = row.keys().find(|c| schema.column(c).is_none()) {
        return Err(format!("unknown column {c}"));
    }
    let ty = |name: &str| schema.column(name).map_or(ColumnType::Varchar, |c| c.ty);
    let timestamp = timestamp(row.remove("_timestamp"), now)?;
    let key = record_bytes(
        ty("_key"),
        row.remove("_key").as_ref().unwrap_or(&Value::Null),
    )?;
    if let Some(c) = row
        .iter()
        .find(|(c, v)| !v.is_null() && !writer.has_field(c))
        .map(|(c, _)| c)
    {
        return Err(format!(
            "column {c} is not a field of schema id {} (the subject's latest), so its value cannot be written",
            writer.id
        ));
    }
    Ok(Record {
        partition: None,
        timestamp,
        key,
        value: Some(avro::encode_row(writer, &row)?),
        headers: Vec::new(),
    })
}

/// A record of a `_value` table: `_key`, `_value`, `_timestamp` (the other
/// columns are always null).
pub(super) fn value_record(
    schema: &TableSchema,
    mut row: Map<String, Value>,
    now: i64,
) -> SqlResult<Record> {
    let ty = |name: &str| schema.column(name).map_or(ColumnType::Varchar, |c| c.ty);
    let record = Record {
        partition: None,
        timestamp: timestamp(row.remove("_timestamp"), now)?,
        key: record_bytes(
            ty("_key"),
            row.remove("_key").as_ref().unwrap_or(&Value::Null),
        )?,
        value: record_bytes(
            ty("_value"),
            row.remove("_value").as_ref().unwrap_or(&Value::Null),
        )?,
        headers: Vec::new(),
    };
    for (c, v) in &row {
        if schema.column(c).is_none() {
            return Err(format!("unknown column {c}"));
        }
        if !v.is_null() {
            return Err(format!(
                "{c} is always null in a table with a _value column (its rows are its records' _key, _value and _timestamp)"
            ));
        }
    }
    let incoming = Incoming {
        key: record.key.as_deref(),
        value: record.value.as_deref(),
        timestamp_ms: record.timestamp,
    };
    check_record(schema, &incoming)?;
    Ok(record)
}

/// A record of a JSON table: its value the row as a JSON object (converted
/// again by the produce path, as any producer's), its key a keyed table's
/// key object, `_key` and `_timestamp` the record's.
pub(super) fn json_record(
    schema: &TableSchema,
    mut row: Map<String, Value>,
    now: i64,
) -> SqlResult<Record> {
    if let Some(c) = row.keys().find(|c| schema.column(c).is_none()) {
        return Err(format!("unknown column {c}"));
    }
    let ts = timestamp(row.remove("_timestamp"), now)?;
    let key_col = row.remove("_key");
    let key = if schema.is_keyed() {
        let mut parts = Vec::new();
        for k in &schema.primary_key {
            let c = schema.column(k).expect("key columns exist");
            let v = match k.as_str() {
                "_key" => key_col.clone().unwrap_or(Value::Null),
                _ => row.get(k).cloned().unwrap_or(Value::Null),
            };
            match convert(c, v) {
                Ok(v) if !v.is_null() => parts.push((k.as_str(), v)),
                Ok(_) => return Err(format!("{k} is NOT NULL")),
                Err(why) => return Err(why),
            }
        }
        Some(object_bytes(parts.iter().map(|(k, v)| (*k, v))))
    } else {
        let ty = schema.column("_key").map_or(ColumnType::Varchar, |c| c.ty);
        record_bytes(ty, key_col.as_ref().unwrap_or(&Value::Null))?
    };
    let value = object_bytes(row.iter().map(|(k, v)| (k.as_str(), v)));
    let incoming = Incoming {
        key: key.as_deref(),
        value: Some(&value),
        timestamp_ms: ts,
    };
    to_row(schema, &incoming)?;
    Ok(Record {
        partition: None,
        timestamp: ts,
        key,
        value: Some(value),
        headers: Vec::new(),
    })
}
