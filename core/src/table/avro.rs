//! Avro tables: record values framed as Confluent's serializers write them
//! (a magic 0 byte, the writer schema's registry id in 4 bytes big-endian,
//! then one Avro datum), kept in the log as produced and made into rows
//! when read. The writer schemas come from the node's registry
//! (`crate::registry`), fetched by id and held per shard (`WriterSchemas`):
//! an id's schema never changes.
//!
//! A datum is decoded here rather than with apache-avro's reader: straight
//! to the JSON values a row is made of (`row::convert` then fits each to its
//! column, as for a JSON table), with every length checked against the
//! bytes left and the nesting bounded, so a hostile datum cannot make the
//! node allocate more than it sent (apache-avro's reader reserves an
//! array's announced count of items up front) or recurse off its stack.
//! An INSERT's rows are written the same way round (`encode_row`), with
//! the subject's latest schema.
//!
//! The parts: `writers` (a writer schema ready to use, and the ones a shard
//! holds, with where it asks for more), `decode` (a datum to JSON values),
//! `encode` (a row to a datum), `rows` (a record to a table's row),
//! `produced` (the checks of a produce into an Avro table) and `columns`
//! (a table's columns from a subject's schema).

use apache_avro::schema::Schema;
use serde_json::Value;

mod columns;
mod decode;
mod encode;
mod produced;
mod rows;
mod writers;

#[cfg(test)]
mod tests;

pub use columns::columns_of;
pub use encode::encode_row;
pub use produced::check_produced;
pub use rows::record_row;
pub use writers::{latest, Fetched, SchemaSource, Writer, WriterSchemas};

/// The first byte of a framed value.
pub const MAGIC: u8 = 0;
/// The magic byte and the schema id.
const FRAME: usize = 5;
/// How deep a datum's values may nest.
const MAX_DEPTH: usize = 64;

/// The schema id a framed value names, and its datum.
pub fn unframe(value: &[u8]) -> Result<(u32, &[u8]), String> {
    if value.len() < FRAME {
        return Err(format!(
            "the value is {} bytes, too short for the schema registry's framing (a magic 0 byte and a 4-byte schema id)",
            value.len()
        ));
    }
    if value[0] != MAGIC {
        return Err(format!(
            "the value starts with byte {:#04x}, not the schema registry's magic byte 0: it is not framed with a schema id",
            value[0]
        ));
    }
    let id = u32::from_be_bytes(value[1..FRAME].try_into().expect("4 bytes"));
    Ok((id, &value[FRAME..]))
}

fn kind_name(s: &Schema) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| match v {
            Value::String(t) => Some(t),
            Value::Object(o) => o.get("type").and_then(Value::as_str).map(str::to_string),
            Value::Array(_) => Some("a union".into()),
            _ => None,
        })
        .unwrap_or_else(|| "not a record".into())
}
