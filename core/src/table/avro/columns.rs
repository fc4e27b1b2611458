//! A table's columns from a subject's record schema (CREATE TABLE ...
//! WITH (format = 'avro')).

use std::collections::HashMap;

use apache_avro::schema::{Name, RecordSchema, Schema};

use super::Writer;
use crate::table::row::convert;
use crate::table::schema::{Column, ColumnType};

/// The columns of a table made from a subject's record schema: one per
/// field, typed as its Avro type reads (a `["null", T]` union as T), with
/// the field's default as the column's DEFAULT where it fits. No column is
/// NOT NULL: a later version may drop a field (BACKWARD allows it).
pub fn columns_of(w: &Writer) -> Result<Vec<Column>, String> {
    let record = envelope_row(w.record()?, &w.names).unwrap_or(w.record()?);
    let mut out = Vec::new();
    for field in &record.fields {
        let ty = column_type(&field.schema, &w.names);
        let mut c = Column {
            name: field.name.clone(),
            ty,
            not_null: false,
            default: None,
        };
        c.default = field
            .default
            .clone()
            .filter(|d| !d.is_null())
            .and_then(|d| convert(&c, d).ok());
        out.push(c);
    }
    Ok(out)
}

/// The row record of a Debezium change event's schema (`before` and
/// `after`, each `["null", Row]`, beside `op`), whose fields are a table's
/// columns rather than the envelope's.
fn envelope_row<'s>(
    r: &'s RecordSchema,
    names: &'s HashMap<Name, Schema>,
) -> Option<&'s RecordSchema> {
    let field = |n: &str| r.fields.iter().find(|f| f.name == n);
    field("op")?;
    ["before", "after"].iter().find_map(|n| {
        let Schema::Union(u) = &field(n)?.schema else {
            return None;
        };
        u.variants().iter().find_map(|v| match v {
            Schema::Record(row) => Some(row),
            Schema::Ref { name } => match names.get(name)? {
                Schema::Record(row) => Some(row),
                _ => None,
            },
            _ => None,
        })
    })
}

fn column_type(s: &Schema, names: &HashMap<Name, Schema>) -> ColumnType {
    match s {
        Schema::Boolean => ColumnType::Boolean,
        Schema::Int | Schema::TimeMillis => ColumnType::Int,
        Schema::Long | Schema::TimeMicros => ColumnType::BigInt,
        Schema::Float => ColumnType::Real,
        Schema::Double | Schema::Decimal(_) | Schema::BigDecimal => ColumnType::Double,
        Schema::String | Schema::Enum(_) | Schema::Uuid => ColumnType::Varchar,
        Schema::Bytes | Schema::Fixed(_) => ColumnType::Bytes,
        Schema::Date
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => ColumnType::Timestamp,
        Schema::Union(u) => {
            let non_null: Vec<&Schema> = u
                .variants()
                .iter()
                .filter(|v| !matches!(v, Schema::Null))
                .collect();
            match non_null[..] {
                [one] => column_type(one, names),
                _ => ColumnType::Json,
            }
        }
        Schema::Ref { name } => match names.get(name) {
            Some(s @ (Schema::Enum(_) | Schema::Fixed(_))) => column_type(s, names),
            _ => ColumnType::Json,
        },
        Schema::Null | Schema::Array(_) | Schema::Map(_) | Schema::Record(_) | Schema::Duration => {
            ColumnType::Json
        }
    }
}
