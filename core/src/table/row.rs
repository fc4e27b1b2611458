//! How a record becomes a row of a typed table (seed 000's table): a JSON
//! object value by column name, `_key`/`_timestamp` from the record,
//! Debezium change events unwrapped, tombstones deleting keys.
//!
//! A stored row is a JSON object with every column, in table order; a keyed
//! table's record key is the JSON object of its key columns. A table with a
//! `_value` column is different: it keeps each record as produced (bytes,
//! headers, compression), and its row is made from the record when it is
//! read (`record_row`); a produce into it is only checked (`check_record`).

use serde_json::Value;

use super::schema::{
    bytes_value, format_timestamp, parse_bytes, parse_timestamp, Column, ColumnType, TableSchema,
};

#[cfg(test)]
mod tests;

/// What one produced record does to a table.
#[derive(Debug, Clone, PartialEq)]
pub enum RowOp {
    /// Append (or, in a keyed table, upsert) this row.
    Row { key: Option<Vec<u8>>, row: Vec<u8> },
    /// Delete this key (keyed tables): stored as a tombstone.
    Delete { key: Vec<u8> },
    /// Nothing to store (a tombstone in an unkeyed table, a truncate).
    Skip,
}

/// The record as the conversion needs it.
pub struct Incoming<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The record's timestamp (the arrival time for a LogAppendTime batch).
    pub timestamp_ms: i64,
}

/// The row of a record in a table that keeps records (`_value`): `_value`,
/// `_key` and `_timestamp` from the record, every other column null. `None`
/// for a tombstone (a null or empty value), which is no row (and, in a keyed
/// table, deletes its key).
pub fn record_row(schema: &TableSchema, r: &Incoming) -> Option<Vec<Value>> {
    let v = r.value.filter(|v| !v.is_empty())?;
    Some(
        schema
            .columns
            .iter()
            .map(|c| match c.name.as_str() {
                "_value" => bytes_value(c.ty, v),
                "_key" => r.key.map_or(Value::Null, |k| bytes_value(c.ty, k)),
                "_timestamp" => Value::String(format_timestamp(r.timestamp_ms)),
                _ => Value::Null,
            })
            .collect(),
    )
}

/// Checks a record produced into a table that keeps records (`_value`):
/// the columns it fills must satisfy NOT NULL, and a keyed table's record
/// needs a key. The error says why it is refused.
pub fn check_record(schema: &TableSchema, r: &Incoming) -> Result<(), String> {
    if schema.is_keyed() && r.key.is_none() {
        return Err(format!(
            "a record without a key cannot name its row: the table's key is {:?}",
            schema.primary_key
        ));
    }
    match record_row(schema, r) {
        Some(row) => check_not_null(schema, &row),
        None => Ok(()),
    }
}

/// Converts one record of a JSON table; the error says why it is refused.
pub fn to_row(schema: &TableSchema, r: &Incoming) -> Result<RowOp, String> {
    debug_assert!(!schema.keeps_records(), "a _value table keeps records");
    let value = r.value.filter(|v| !v.is_empty());
    let Some(v) = value else {
        return tombstone(schema, r.key);
    };
    let mut buf = v.to_vec();
    let parsed: Value = simd_json::serde::from_slice(&mut buf).map_err(|_| {
        format!(
            "the value is not JSON: {}",
            preview(&String::from_utf8_lossy(v))
        )
    })?;
    let Value::Object(obj) = parsed else {
        return Err(format!(
            "the value is not a JSON object: {}",
            preview(&String::from_utf8_lossy(v))
        ));
    };
    let mut obj = match debezium(&obj) {
        Some(event) => match event.op {
            "c" | "r" | "u" => match event.after {
                Some(Value::Object(after)) => after.clone(),
                _ => {
                    return Err(format!(
                        "a Debezium {:?} event without an after row",
                        event.op
                    ))
                }
            },
            "d" => {
                if !schema.is_keyed() {
                    return Err(
                        "a Debezium delete needs a table with a PRIMARY KEY to name its row; this table has none"
                            .into(),
                    );
                }
                let Some(Value::Object(before)) = event.before else {
                    return Err("a Debezium delete without a before row".into());
                };
                return Ok(RowOp::Delete {
                    key: key_from_object(schema, before)?,
                });
            }
            _ => return Ok(RowOp::Skip),
        },
        None => obj,
    };
    let mut row = Vec::with_capacity(schema.columns.len());
    for c in &schema.columns {
        let v = match c.name.as_str() {
            "_key" => r.key.map_or(Value::Null, |k| bytes_value(c.ty, k)),
            "_timestamp" => Value::String(format_timestamp(r.timestamp_ms)),
            name => match obj.remove(name) {
                Some(v) => convert(c, v)?,
                None => c.default.clone().unwrap_or(Value::Null),
            },
        };
        row.push(v);
    }
    finish(schema, row)
}

/// A Debezium change event: its op and rows, with or without Kafka
/// Connect's schema/payload envelope.
pub(super) struct Event<'a> {
    pub op: &'a str,
    pub before: Option<&'a Value>,
    pub after: Option<&'a Value>,
}

pub(super) fn debezium(obj: &serde_json::Map<String, Value>) -> Option<Event<'_>> {
    let body = match obj.get("payload") {
        Some(Value::Object(p)) if p.contains_key("op") => p,
        _ => obj,
    };
    let op = body.get("op")?.as_str()?;
    if !body.contains_key("after") && !body.contains_key("before") {
        return None;
    }
    Some(Event {
        op,
        before: body.get("before"),
        after: body.get("after"),
    })
}

fn preview(s: &str) -> String {
    let mut p: String = s.chars().take(60).collect();
    if p.len() < s.len() {
        p.push('…');
    }
    format!("{p:?}")
}

/// A tombstone: deletes its key in a keyed table, skipped elsewhere.
fn tombstone(schema: &TableSchema, key: Option<&[u8]>) -> Result<RowOp, String> {
    if !schema.is_keyed() {
        return Ok(RowOp::Skip);
    }
    let key = key.ok_or("a tombstone (null value) without a key cannot name the row to delete")?;
    let mut buf = key.to_vec();
    let parsed: Value = simd_json::serde::from_slice(&mut buf).map_err(|_| {
        format!(
            "the key {} is not JSON",
            preview(&String::from_utf8_lossy(key))
        )
    })?;
    // Kafka Connect's JsonConverter with schemas on wraps the key as
    // {"schema": ..., "payload": key} (Debezium's tombstones carry it so).
    let parsed = match parsed {
        Value::Object(mut o) if o.len() == 2 && o.contains_key("schema") => {
            o.remove("payload").unwrap_or(Value::Object(o))
        }
        other => other,
    };
    let key = match parsed {
        Value::Object(o) => key_from_object(schema, &o)?,
        bare if schema.primary_key.len() == 1 => {
            let mut o = serde_json::Map::new();
            o.insert(schema.primary_key[0].clone(), bare);
            key_from_object(schema, &o)?
        }
        other => {
            return Err(format!(
                "the key {other} must be a JSON object of the key columns {:?}",
                schema.primary_key
            ))
        }
    };
    Ok(RowOp::Delete { key })
}

/// The stored key (`{"id":1}`) from an object holding the key columns.
fn key_from_object(
    schema: &TableSchema,
    o: &serde_json::Map<String, Value>,
) -> Result<Vec<u8>, String> {
    let mut parts = Vec::new();
    for k in &schema.primary_key {
        let c = schema.column(k).expect("key columns exist");
        let v = o.get(k).ok_or_else(|| format!("the key has no {k:?}"))?;
        let v = convert(c, v.clone())?;
        if v.is_null() {
            return Err(format!("key column {k} is null"));
        }
        parts.push((k.as_str(), v));
    }
    Ok(object_bytes(parts.iter().map(|(k, v)| (*k, v))))
}

/// Checks NOT NULL (key columns are NOT NULL whatever they say).
pub(super) fn check_not_null(schema: &TableSchema, row: &[Value]) -> Result<(), String> {
    for (c, v) in schema.columns.iter().zip(row) {
        if v.is_null() && (c.not_null || schema.primary_key.contains(&c.name)) {
            return Err(format!("{} is NOT NULL", c.name));
        }
    }
    Ok(())
}

/// Checks NOT NULL and builds the stored row (and key).
fn finish(schema: &TableSchema, row: Vec<Value>) -> Result<RowOp, String> {
    check_not_null(schema, &row)?;
    let key = schema.is_keyed().then(|| {
        object_bytes(
            schema
                .key_indexes()
                .into_iter()
                .map(|i| (schema.columns[i].name.as_str(), &row[i])),
        )
    });
    let bytes = object_bytes(
        schema
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .zip(row.iter()),
    );
    Ok(RowOp::Row { key, row: bytes })
}

/// A JSON object with its fields in the given order, in a buffer sized
/// for it up front (growing a 1 KiB row from 256 bytes copied it twice).
pub fn object_bytes<'a>(fields: impl Iterator<Item = (&'a str, &'a Value)> + Clone) -> Vec<u8> {
    let size: usize = fields
        .clone()
        .map(|(k, v)| {
            k.len()
                + 4
                + match v {
                    Value::String(s) => s.len() + 2,
                    Value::Array(_) | Value::Object(_) => 64,
                    _ => 24,
                }
        })
        .sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'{');
    for (i, (k, v)) in fields.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(&mut out, k);
        out.push(b':');
        write_value(&mut out, v);
    }
    out.push(b'}');
    out
}

/// Writes `v` as JSON. Strings without characters to escape (the usual
/// case) are copied whole: serde_json escapes byte by byte, which was the
/// largest cost of ingest into a typed table.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::String(s) => write_str(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, x);
            }
            out.push(b']');
        }
        Value::Object(o) => {
            out.push(b'{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, x);
            }
            out.push(b'}');
        }
        other => serde_json::to_writer(&mut *out, other).expect("a value serialises"),
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    // A branch-free test per 32-byte chunk, which the compiler vectorises.
    let needs_escape = s.as_bytes().chunks(32).any(|c| {
        c.iter().fold(false, |acc, &b| {
            acc | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    });
    if needs_escape {
        serde_json::to_writer(&mut *out, s).expect("a string serialises");
    } else {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// A JSON field converted to a column's type. Taken by value: a string or
/// JSON field is stored as it came, not copied (a 1 KiB string per record
/// was copied here).
pub fn convert(c: &Column, v: Value) -> Result<Value, String> {
    let failed = |v: &Value| {
        let shown = match v {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        format!(
            "failed to parse {shown} as {} (column {})",
            c.ty.name(),
            c.name
        )
    };
    let fail = || failed(&v);
    if v.is_null() {
        return Ok(Value::Null);
    }
    let int = |lo: i64, hi: i64| -> Result<Value, String> {
        let n = match &v {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            }),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        }
        .filter(|n| (lo..=hi).contains(n))
        .ok_or_else(fail)?;
        Ok(Value::from(n))
    };
    let float = || -> Result<Value, String> {
        let f = match &v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
            _ => None,
        }
        .ok_or_else(fail)?;
        serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(fail)
    };
    match c.ty {
        ColumnType::BigInt => int(i64::MIN, i64::MAX),
        ColumnType::Int => int(i32::MIN as i64, i32::MAX as i64),
        ColumnType::SmallInt => int(i16::MIN as i64, i16::MAX as i64),
        ColumnType::Double | ColumnType::Real => float(),
        ColumnType::Boolean => match &v {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(Value::Bool(true)),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(Value::Bool(false)),
            _ => Err(fail()),
        },
        ColumnType::Varchar => match v {
            Value::String(s) => Ok(Value::String(s)),
            other => Err(failed(&other)),
        },
        ColumnType::Timestamp => {
            let ms = match &v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => parse_timestamp(s),
                _ => None,
            }
            .ok_or_else(fail)?;
            Ok(Value::String(format_timestamp(ms)))
        }
        ColumnType::Json => Ok(v),
        ColumnType::Bytes => match &v {
            Value::String(s) => parse_bytes(s)
                .map(|b| bytes_value(ColumnType::Bytes, &b))
                .ok_or_else(|| {
                    format!(
                        "{}: BYTES are given as base64 (as Kafka Connect and Debezium write them) or as \\x and hex digits",
                        fail()
                    )
                }),
            _ => Err(fail()),
        },
    }
}
