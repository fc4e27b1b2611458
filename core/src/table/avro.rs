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

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use apache_avro::schema::{Name, Namespace, RecordSchema, ResolvedSchema, Schema};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use serde_json::{Map, Value};
use weir_storage::batch::BatchHeader;
use weir_storage::records::batch_records;

use super::row::{check_not_null, convert, debezium, Incoming};
use super::schema::{bytes_value, format_timestamp, Column, ColumnType, TableSchema};
use crate::error::{ErrorCode, KafkaError};
use crate::registry::schema::{self as registry_schema, Kind};
use crate::shard::Shard;

/// The first byte of a framed value.
pub const MAGIC: u8 = 0;
/// The magic byte and the schema id.
const FRAME: usize = 5;
/// How deep a datum's values may nest.
const MAX_DEPTH: usize = 64;
/// The most items a datum's arrays of empty items (nulls, empty records)
/// may hold, all together: they take no bytes, so the bytes sent do not
/// bound them.
const MAX_EMPTY_ITEMS: usize = 1 << 16;
/// How soon a schema held without the table's subject is asked for again
/// (it may have been registered under it since).
const REFETCH_AFTER: Duration = Duration::from_secs(1);

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

/// A writer schema, ready to decode with.
pub struct Writer {
    pub id: u32,
    schema: Schema,
    /// Its named types by full name (what a `Ref` names).
    names: HashMap<Name, Schema>,
    /// The namespace its record's fields are read in (kept, not cloned
    /// for each datum).
    namespace: Namespace,
    /// The subjects a live version of it was registered under, when asked.
    subjects: Vec<String>,
    asked: Instant,
}

impl Writer {
    /// A registered schema as the registry gave it; refused unless it is an
    /// Avro record.
    pub fn new(f: &Fetched) -> Result<Writer, String> {
        if f.kind != Kind::Avro {
            return Err(format!(
                "schema id {} is a {} schema, not Avro",
                f.id,
                f.kind.name()
            ));
        }
        let schema = registry_schema::standalone_avro(&f.text, &f.refs)
            .map_err(|e| format!("schema id {} does not parse: {e}", f.id))?;
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| format!("schema id {}: {e}", f.id))?
            .get_names()
            .iter()
            .map(|(n, s)| (n.clone(), (*s).clone()))
            .collect();
        let mut w = Writer {
            id: f.id as u32,
            schema,
            names,
            namespace: None,
            subjects: f.subjects.clone(),
            asked: Instant::now(),
        };
        w.namespace = w.record()?.name.namespace.clone();
        Ok(w)
    }

    /// Whether its record has a field `name`.
    pub fn has_field(&self, name: &str) -> bool {
        self.record()
            .is_ok_and(|r| r.fields.iter().any(|f| f.name == name))
    }

    /// The record schema the datum is.
    fn record(&self) -> Result<&RecordSchema, String> {
        let mut s = &self.schema;
        if let Schema::Ref { name } = s {
            s = self.names.get(name).unwrap_or(s);
        }
        match s {
            Schema::Record(r) => Ok(r),
            other => Err(format!(
                "schema id {} is not an Avro record (it is {}): a table's rows are records",
                self.id,
                kind_name(other)
            )),
        }
    }

    /// Decodes one datum to its record's fields; every byte must be used.
    pub fn decode(&self, datum: &[u8]) -> Result<Map<String, Value>, String> {
        let record = self.record()?;
        let mut d = Decoder {
            buf: datum,
            pos: 0,
            names: &self.names,
            depth: 0,
            empty_items: 0,
        };
        let ns = &self.namespace;
        let mut out = Map::new();
        for f in &record.fields {
            let v = d
                .value(&f.schema, ns)
                .map_err(|why| format!("field {}: {why}", f.name))?;
            out.insert(f.name.clone(), v);
        }
        if d.pos != datum.len() {
            return Err(format!(
                "{} trailing bytes after the datum (schema id {} read {} of {})",
                datum.len() - d.pos,
                self.id,
                d.pos,
                datum.len()
            ));
        }
        Ok(out)
    }
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

struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    names: &'a HashMap<Name, Schema>,
    depth: usize,
    empty_items: usize,
}

impl<'a> Decoder<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.left() {
            return Err(format!(
                "the datum ends: {n} bytes wanted at byte {}, {} left",
                self.pos,
                self.left()
            ));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// A zig-zag varint.
    fn long(&mut self) -> Result<i64, String> {
        let mut z: u64 = 0;
        for i in 0..10 {
            let b = *self
                .take(1)
                .map_err(|_| "the datum ends inside a number".to_string())?
                .first()
                .expect("one byte");
            z |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(format!(
            "a number longer than 10 bytes at byte {}",
            self.pos
        ))
    }

    fn int(&mut self) -> Result<i32, String> {
        let n = self.long()?;
        i32::try_from(n).map_err(|_| format!("{n} is out of range for an Avro int"))
    }

    /// A length: not negative, and no more than the bytes left.
    fn len(&mut self) -> Result<usize, String> {
        let n = self.long()?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.left())
            .ok_or_else(|| format!("a length of {n} with {} bytes left", self.left()))
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.len()?;
        self.take(n)
    }

    fn string(&mut self) -> Result<String, String> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| "a string that is not UTF-8".to_string())
    }

    /// The item count of an array or map block (0 ends it); a negative
    /// count is followed by the block's size in bytes.
    fn block(&mut self, empty_items: bool) -> Result<usize, String> {
        let n = self.long()?;
        let n = if n < 0 {
            self.long()?;
            n.checked_neg().ok_or("an item count out of range")?
        } else {
            n
        };
        let n = n as u64;
        if empty_items {
            self.empty_items = self.empty_items.saturating_add(n as usize);
            if self.empty_items > MAX_EMPTY_ITEMS {
                return Err(format!(
                    "more than {MAX_EMPTY_ITEMS} items that take no bytes"
                ));
            }
        } else if n > self.left() as u64 {
            return Err(format!("{n} items with {} bytes left", self.left()));
        }
        Ok(n as usize)
    }

    fn number(f: f64) -> Value {
        // JSON has no NaN or infinity: they read as null.
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }

    fn value(&mut self, s: &Schema, ns: &Namespace) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("values nested more than {MAX_DEPTH} deep"));
        }
        let v = self.value_in(s, ns);
        self.depth -= 1;
        v
    }

    fn value_in(&mut self, s: &Schema, ns: &Namespace) -> Result<Value, String> {
        Ok(match s {
            Schema::Null => Value::Null,
            Schema::Boolean => match self.take(1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("a boolean byte {b}, not 0 or 1")),
            },
            Schema::Int | Schema::TimeMillis => Value::from(self.int()?),
            Schema::Long | Schema::TimeMicros => Value::from(self.long()?),
            Schema::Float => {
                let b = self.take(4)?;
                Self::number(f32::from_le_bytes(b.try_into().expect("4")) as f64)
            }
            Schema::Double => {
                let b = self.take(8)?;
                Self::number(f64::from_le_bytes(b.try_into().expect("8")))
            }
            Schema::Bytes => bytes_value(ColumnType::Bytes, self.bytes()?),
            Schema::String => Value::String(self.string()?),
            Schema::Uuid => {
                // As apache-avro reads it: 16 bytes, or the text form.
                let b = self.bytes()?;
                match b.len() {
                    16 => Value::String(uuid_text(b)),
                    _ => Value::String(
                        std::str::from_utf8(b)
                            .map_err(|_| "a uuid that is not UTF-8")?
                            .to_string(),
                    ),
                }
            }
            Schema::Fixed(f) => bytes_value(ColumnType::Bytes, self.take(f.size)?),
            Schema::Enum(e) => {
                let i = self.long()?;
                let sym = usize::try_from(i).ok().and_then(|i| e.symbols.get(i));
                Value::String(
                    sym.ok_or_else(|| format!("enum index {i} of {} symbols", e.symbols.len()))?
                        .clone(),
                )
            }
            Schema::Union(u) => {
                let i = self.long()?;
                let branch = usize::try_from(i).ok().and_then(|i| u.variants().get(i));
                let branch =
                    branch.ok_or_else(|| format!("union branch {i} of {}", u.variants().len()))?;
                self.value(branch, ns)?
            }
            Schema::Array(a) => {
                let empty = takes_no_bytes(&a.items, self.names, 0);
                let mut items = Vec::new();
                loop {
                    let n = self.block(empty)?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        items.push(self.value(&a.items, ns)?);
                    }
                }
                Value::Array(items)
            }
            Schema::Map(m) => {
                let mut items = Map::new();
                loop {
                    // A key takes a byte at least.
                    let n = self.block(false)?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        let k = self.string()?;
                        let v = self.value(&m.types, ns)?;
                        items.insert(k, v);
                    }
                }
                Value::Object(items)
            }
            Schema::Record(r) => {
                let inner = r.name.fully_qualified_name(ns).namespace;
                let mut o = Map::new();
                for f in &r.fields {
                    let v = self
                        .value(&f.schema, &inner)
                        .map_err(|why| format!("{}: {why}", f.name))?;
                    o.insert(f.name.clone(), v);
                }
                Value::Object(o)
            }
            Schema::Decimal(d) => {
                let b = match &*d.inner {
                    Schema::Fixed(f) => self.take(f.size)?,
                    _ => self.bytes()?,
                };
                Value::String(decimal_text(b, d.scale)?)
            }
            Schema::BigDecimal => {
                // Its bytes hold the unscaled value's bytes, then the scale.
                let inner = self.bytes()?;
                let mut d = Decoder {
                    buf: inner,
                    pos: 0,
                    names: self.names,
                    depth: MAX_DEPTH,
                    empty_items: 0,
                };
                let unscaled = d.bytes()?;
                let scale = d.long()?;
                let scale = usize::try_from(scale)
                    .ok()
                    .filter(|s| *s <= 76)
                    .ok_or_else(|| format!("a big-decimal scale of {scale}"))?;
                Value::String(decimal_text(unscaled, scale)?)
            }
            Schema::Date => {
                let days = i64::from(self.int()?);
                let text = format_timestamp(days * 86_400_000);
                Value::String(text.split(' ').next().unwrap_or_default().to_string())
            }
            Schema::TimestampMillis | Schema::LocalTimestampMillis => {
                Value::String(format_timestamp(self.long()?))
            }
            Schema::TimestampMicros | Schema::LocalTimestampMicros => {
                Value::String(format_timestamp(self.long()?.div_euclid(1000)))
            }
            Schema::TimestampNanos | Schema::LocalTimestampNanos => {
                Value::String(format_timestamp(self.long()?.div_euclid(1_000_000)))
            }
            Schema::Duration => {
                let b = self.take(12)?;
                let part = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
                serde_json::json!({"months": part(0), "days": part(4), "millis": part(8)})
            }
            Schema::Ref { name } => {
                let full = name.fully_qualified_name(ns);
                let names = self.names;
                let s = names
                    .get(&full)
                    .ok_or_else(|| format!("the schema names {full}, which it does not define"))?;
                self.value(s, &full.namespace)?
            }
        })
    }
}

/// Whether a value of `s` is written with no bytes (so its count in an
/// array is not bounded by the datum's length).
fn takes_no_bytes(s: &Schema, names: &HashMap<Name, Schema>, depth: usize) -> bool {
    match s {
        Schema::Null => true,
        Schema::Fixed(f) => f.size == 0,
        Schema::Record(r) => r
            .fields
            .iter()
            .all(|f| takes_no_bytes(&f.schema, names, depth + 1)),
        // A record that holds itself with no union between cannot be
        // written at all; past a few references it counts as empty, the
        // bounded choice.
        Schema::Ref { name } => {
            depth > 8
                || names
                    .get(name)
                    .is_none_or(|s| takes_no_bytes(s, names, depth + 1))
        }
        _ => false,
    }
}

fn uuid_text(b: &[u8]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A decimal's text from its unscaled two's-complement big-endian bytes.
fn decimal_text(b: &[u8], scale: usize) -> Result<String, String> {
    // A schema may say any scale; past 76 digits it says nothing an i128
    // can hold, and its text would be as long as the scale.
    if scale > 76 {
        return Err(format!("a decimal scale of {scale}: at most 76 is read"));
    }
    if b.len() > 16 {
        return Err(format!(
            "a decimal of {} bytes: at most 16 (38 digits) are read",
            b.len()
        ));
    }
    let mut n: i128 = if b.first().is_some_and(|x| x & 0x80 != 0) {
        -1
    } else {
        0
    };
    for x in b {
        n = (n << 8) | i128::from(*x);
    }
    let digits = n.unsigned_abs().to_string();
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (whole, frac) = digits.split_at(digits.len() - scale);
    let sign = if n < 0 { "-" } else { "" };
    Ok(if scale == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{frac}")
    })
}

// ---- rows ---------------------------------------------------------------

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
fn row_of(
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

fn unknown(id: u32) -> String {
    format!("schema id {id} is not registered in the node's schema registry")
}

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
        let records = batch_records(b, h, super::MAX_DECOMPRESSED).map_err(|e| {
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
                .map_err(|why| super::refusal(topic, i, r.value.as_deref(), why))?;
        }
    }
    Ok(())
}

/// The latest version of `subject`'s schema (to make a table's columns
/// from, or to write rows with), asked of the registry.
pub async fn latest(shard: &Rc<Shard>, subject: &str) -> Result<Writer, String> {
    let source = shard.state::<WriterSchemas>().source()?;
    let f = source
        .latest(shard, subject.to_string())
        .await
        .map_err(|why| format!("asking the schema registry for {subject}: {why}"))?
        .ok_or_else(|| format!("subject {subject} has no schema in the registry"))?;
    Writer::new(&f).map_err(|why| format!("subject {subject}'s latest schema: {why}"))
}

/// A registered schema as another shard takes it, to read records with
/// (`table::avro`).
#[derive(Debug, Clone)]
pub struct Fetched {
    pub id: i32,
    pub kind: Kind,
    pub text: String,
    /// The texts of the schemas it references.
    pub refs: Vec<String>,
    /// The subjects a live version of it is registered under.
    pub subjects: Vec<String>,
}

/// Where writer schemas come from: the node's schema registry, which sets
/// itself here at start-up (`crate::registry::install`). A trait, so that
/// tables need not know the registry (which keeps its schemas in a topic,
/// and so uses tables).
pub trait SchemaSource {
    /// Those of `ids` that are registered.
    fn by_id(
        &self,
        shard: &Rc<Shard>,
        ids: Vec<i32>,
    ) -> LocalBoxFuture<'static, Result<Vec<Fetched>, String>>;

    /// The latest live version of `subject`'s schema, if it has one.
    fn latest(
        &self,
        shard: &Rc<Shard>,
        subject: String,
    ) -> LocalBoxFuture<'static, Result<Option<Fetched>, String>>;
}

impl crate::shard::ShardState for WriterSchemas {}

/// The writer schemas one shard holds, by id, and where it asks for more.
#[derive(Default)]
pub struct WriterSchemas {
    by_id: RefCell<HashMap<u32, Result<Rc<Writer>, String>>>,
    source: RefCell<Option<Rc<dyn SchemaSource>>>,
}

impl WriterSchemas {
    /// Asks `source` for writer schemas from now on.
    pub fn set_source(&self, source: Rc<dyn SchemaSource>) {
        *self.source.borrow_mut() = Some(source);
    }

    fn source(&self) -> Result<Rc<dyn SchemaSource>, String> {
        self.source
            .borrow()
            .clone()
            .ok_or_else(|| "this node has no schema registry".to_string())
    }

    /// The writer schema `id`, or why records framed with it cannot be read.
    pub fn get(&self, id: u32) -> Result<Rc<Writer>, String> {
        self.by_id
            .borrow()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| Err(unknown(id)))
    }

    fn holds(&self, id: u32) -> bool {
        self.by_id.borrow().contains_key(&id)
    }

    /// Asks the registry for `ids` and holds those registered, or why one
    /// cannot be read (not Avro, not a record): an id the registry does
    /// not know stays unknown and is asked for again next time.
    pub async fn fetch(&self, shard: &Rc<Shard>, ids: BTreeSet<u32>) -> Result<(), String> {
        let ids: Vec<i32> = ids
            .into_iter()
            .filter_map(|id| i32::try_from(id).ok())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let asked = self.source()?.by_id(shard, ids);
        for f in asked.await? {
            let held = Writer::new(&f).map(Rc::new);
            self.by_id.borrow_mut().insert(f.id as u32, held);
        }
        Ok(())
    }

    /// Fetches the writer schemas of the framed values among `values` not
    /// held yet (a scan's, before it makes rows).
    pub async fn fetch_missing<'v>(
        &self,
        shard: &Rc<Shard>,
        values: impl Iterator<Item = Option<&'v [u8]>>,
    ) -> Result<(), String> {
        let wanted: BTreeSet<u32> = values
            .flatten()
            .filter_map(|v| unframe(v).ok())
            .map(|(id, _)| id)
            .filter(|id| !self.holds(*id))
            .collect();
        self.fetch(shard, wanted).await
    }
}

// ---- rows written as datums -----------------------------------------

/// A row (column name to value, as an INSERT gives them) written as a datum
/// of `writer`'s record and framed with its id: each field takes the value
/// of its name, or its default, or null where the field takes null.
pub fn encode_row(writer: &Writer, row: &Map<String, Value>) -> Result<Vec<u8>, String> {
    let record = writer.record()?;
    let mut out = vec![MAGIC];
    out.extend(writer.id.to_be_bytes());
    let ns = &writer.namespace;
    let mut e = Encoder {
        out,
        names: &writer.names,
        depth: 0,
    };
    e.fields(record, row, ns)?;
    Ok(e.out)
}

struct Encoder<'a> {
    out: Vec<u8>,
    names: &'a HashMap<Name, Schema>,
    depth: usize,
}

impl Encoder<'_> {
    fn long(&mut self, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            self.out.push((z as u8) | 0x80);
            z >>= 7;
        }
        self.out.push(z as u8);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.long(b.len() as i64);
        self.out.extend_from_slice(b);
    }

    fn fields(
        &mut self,
        r: &RecordSchema,
        row: &Map<String, Value>,
        ns: &Namespace,
    ) -> Result<(), String> {
        for f in &r.fields {
            let v = row
                .get(&f.name)
                .filter(|v| !v.is_null())
                .or(f.default.as_ref())
                .unwrap_or(&Value::Null);
            self.value(&f.schema, v, ns)
                .map_err(|why| format!("field {}: {why}", f.name))?;
        }
        Ok(())
    }

    fn value(&mut self, s: &Schema, v: &Value, ns: &Namespace) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("values nested more than {MAX_DEPTH} deep"));
        }
        let r = self.value_in(s, v, ns);
        self.depth -= 1;
        r
    }

    fn value_in(&mut self, s: &Schema, v: &Value, ns: &Namespace) -> Result<(), String> {
        let wrong = || {
            let shown = match v {
                Value::Null => "null (no value and no default)".to_string(),
                other => other.to_string(),
            };
            format!("{shown} is not {}", kind_name(s))
        };
        let int = |lo: i64, hi: i64| -> Result<i64, String> {
            match v {
                Value::Number(n) => n.as_i64(),
                Value::String(t) => t.trim().parse().ok(),
                _ => None,
            }
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(wrong)
        };
        let float = || -> Result<f64, String> {
            match v {
                Value::Number(n) => n.as_f64(),
                Value::String(t) => t.trim().parse().ok(),
                _ => None,
            }
            .ok_or_else(wrong)
        };
        let millis = || -> Result<i64, String> {
            match v {
                Value::Number(n) => n.as_i64(),
                Value::String(t) => super::schema::parse_timestamp(t),
                _ => None,
            }
            .ok_or_else(wrong)
        };
        let raw = || -> Result<Vec<u8>, String> {
            v.as_str()
                .and_then(super::schema::parse_bytes)
                .ok_or_else(|| {
                    format!(
                        "{}: bytes are given as base64 or \\x and hex digits",
                        wrong()
                    )
                })
        };
        match s {
            Schema::Null if v.is_null() => {}
            Schema::Null => return Err(wrong()),
            Schema::Boolean => match v {
                Value::Bool(b) => self.out.push(u8::from(*b)),
                _ => return Err(wrong()),
            },
            Schema::Int | Schema::TimeMillis => self.long(int(i32::MIN.into(), i32::MAX.into())?),
            Schema::Long | Schema::TimeMicros => self.long(int(i64::MIN, i64::MAX)?),
            Schema::Float => self.out.extend((float()? as f32).to_le_bytes()),
            Schema::Double => self.out.extend(float()?.to_le_bytes()),
            Schema::String | Schema::Uuid => match v {
                Value::String(t) => self.bytes(t.as_bytes()),
                _ => return Err(wrong()),
            },
            Schema::Bytes => self.bytes(&raw()?),
            Schema::Fixed(f) => {
                let b = raw()?;
                if b.len() != f.size {
                    return Err(format!("{} bytes for a fixed of {}", b.len(), f.size));
                }
                self.out.extend(b);
            }
            Schema::Enum(e) => {
                let i = v
                    .as_str()
                    .and_then(|t| e.symbols.iter().position(|x| x == t))
                    .ok_or_else(|| format!("{}: one of {:?}", wrong(), e.symbols))?;
                self.long(i as i64);
            }
            Schema::Union(u) => {
                // The first branch that takes the value (null the null one).
                let start = self.out.len();
                let mut why = Vec::new();
                for (i, branch) in u.variants().iter().enumerate() {
                    self.long(i as i64);
                    match self.value(branch, v, ns) {
                        Ok(()) => return Ok(()),
                        Err(e) => {
                            self.out.truncate(start);
                            why.push(e);
                        }
                    }
                }
                return Err(format!(
                    "no branch of the union takes it ({})",
                    why.join("; ")
                ));
            }
            Schema::Array(a) => {
                let items = v.as_array().ok_or_else(wrong)?;
                if !items.is_empty() {
                    self.long(items.len() as i64);
                    for item in items {
                        self.value(&a.items, item, ns)?;
                    }
                }
                self.long(0);
            }
            Schema::Map(m) => {
                let items = v.as_object().ok_or_else(wrong)?;
                if !items.is_empty() {
                    self.long(items.len() as i64);
                    for (k, item) in items {
                        self.bytes(k.as_bytes());
                        self.value(&m.types, item, ns)?;
                    }
                }
                self.long(0);
            }
            Schema::Record(r) => {
                let fields = v.as_object().ok_or_else(wrong)?;
                let inner = r.name.fully_qualified_name(ns).namespace;
                self.fields(r, fields, &inner)?;
            }
            Schema::Date => {
                let days = match v {
                    Value::Number(n) => n.as_i64(),
                    Value::String(t) => {
                        super::schema::parse_timestamp(t).map(|ms| ms.div_euclid(86_400_000))
                    }
                    _ => None,
                }
                .filter(|d| i32::try_from(*d).is_ok())
                .ok_or_else(wrong)?;
                self.long(days);
            }
            Schema::TimestampMillis | Schema::LocalTimestampMillis => self.long(millis()?),
            Schema::TimestampMicros | Schema::LocalTimestampMicros => {
                self.long(millis()?.checked_mul(1000).ok_or_else(wrong)?)
            }
            Schema::TimestampNanos | Schema::LocalTimestampNanos => {
                self.long(millis()?.checked_mul(1_000_000).ok_or_else(wrong)?)
            }
            Schema::Decimal(d) => {
                let unscaled = decimal_unscaled(v, d.scale).ok_or_else(wrong)?;
                let full = unscaled.to_be_bytes();
                // The fewest bytes that keep the sign.
                let mut at = 0;
                while at < 15
                    && ((full[at] == 0 && full[at + 1] & 0x80 == 0)
                        || (full[at] == 0xff && full[at + 1] & 0x80 != 0))
                {
                    at += 1;
                }
                match &*d.inner {
                    Schema::Fixed(f) => {
                        let len = 16 - at;
                        // A schema may declare any size: a value is 16
                        // bytes at most, padded to no more than 64.
                        if len > f.size || f.size > 64 {
                            return Err(format!("{}: too wide for {} bytes", wrong(), f.size));
                        }
                        let pad = if unscaled < 0 { 0xff } else { 0 };
                        self.out.extend(std::iter::repeat_n(pad, f.size - len));
                        self.out.extend(&full[at..]);
                    }
                    _ => self.bytes(&full[at..]),
                }
            }
            Schema::BigDecimal | Schema::Duration => {
                return Err(format!("{} values are not written from SQL", kind_name(s)))
            }
            Schema::Ref { name } => {
                let full = name.fully_qualified_name(ns);
                let names = self.names;
                let s = names
                    .get(&full)
                    .ok_or_else(|| format!("the schema names {full}, which it does not define"))?;
                self.value(s, v, &full.namespace)?;
            }
        }
        Ok(())
    }
}

/// A number (or its text) as a decimal's unscaled value at `scale`, when
/// it has no more digits past the point than that.
fn decimal_unscaled(v: &Value, scale: usize) -> Option<i128> {
    if scale > 76 {
        return None;
    }
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(t) => t.trim().to_string(),
        _ => return None,
    };
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale
        || whole.is_empty() && frac.is_empty()
        || !whole
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let padded = format!("{whole}{frac:0<scale$}");
    let n: i128 = padded.parse().ok()?;
    Some(if neg { -n } else { n })
}

// ---- columns from a schema ---------------------------------------------

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

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Value as AvroValue;

    const TRADE: &str = r#"{"type":"record","name":"Trade","namespace":"t","fields":[
        {"name":"id","type":"long"},
        {"name":"symbol","type":"string"},
        {"name":"quantity","type":"int"},
        {"name":"price","type":"double"},
        {"name":"venue","type":["null","string"],"default":null},
        {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"again","type":"Side"}
    ]}"#;

    fn fetched(text: &str) -> Fetched {
        Fetched {
            id: 7,
            kind: Kind::Avro,
            text: text.into(),
            refs: Vec::new(),
            subjects: vec!["trades-value".into()],
        }
    }

    fn trade() -> Vec<u8> {
        let schema = Schema::parse_str(TRADE).unwrap();
        let v = AvroValue::Record(vec![
            ("id".into(), AvroValue::Long(42)),
            ("symbol".into(), AvroValue::String("ACME".into())),
            ("quantity".into(), AvroValue::Int(10)),
            ("price".into(), AvroValue::Double(12.5)),
            (
                "venue".into(),
                AvroValue::Union(1, Box::new(AvroValue::String("X".into()))),
            ),
            ("side".into(), AvroValue::Enum(1, "SELL".into())),
            ("at".into(), AvroValue::TimestampMillis(1_700_000_000_123)),
            (
                "tags".into(),
                AvroValue::Array(vec![AvroValue::String("a".into())]),
            ),
            ("again".into(), AvroValue::Enum(0, "BUY".into())),
        ]);
        let mut out = vec![0, 0, 0, 0, 7];
        out.extend(apache_avro::to_avro_datum(&schema, v).unwrap());
        out
    }

    #[test]
    fn a_framed_datum_decodes_to_its_fields() {
        let w = Writer::new(&fetched(TRADE)).unwrap();
        let framed = trade();
        let (id, datum) = unframe(&framed).unwrap();
        assert_eq!(id, 7);
        let o = w.decode(datum).unwrap();
        assert_eq!(o["id"], 42);
        assert_eq!(o["symbol"], "ACME");
        assert_eq!(o["price"], 12.5);
        assert_eq!(o["venue"], "X");
        assert_eq!(o["side"], "SELL");
        assert_eq!(o["again"], "BUY");
        assert_eq!(o["at"], "2023-11-14 22:13:20.123");
        assert_eq!(o["tags"], serde_json::json!(["a"]));
        // Every byte is the datum's.
        let mut longer = datum.to_vec();
        longer.push(0);
        assert!(w.decode(&longer).unwrap_err().contains("1 trailing bytes"));
        // A cut datum says where it ends.
        let cut = w.decode(&datum[..datum.len() - 3]).unwrap_err();
        assert!(
            cut.contains("field tags") && cut.contains("0 bytes left"),
            "{cut}"
        );
    }

    #[test]
    fn bad_framing_is_named() {
        assert!(unframe(&[1, 0, 0, 0, 1, 2]).unwrap_err().contains("magic"));
        assert!(unframe(&[0, 0, 1]).unwrap_err().contains("too short"));
    }

    #[test]
    fn hostile_lengths_are_refused_before_anything_is_held() {
        let s = r#"{"type":"record","name":"R","fields":[
            {"name":"a","type":{"type":"array","items":"null"}},
            {"name":"b","type":{"type":"array","items":"long"}}]}"#;
        let w = Writer::new(&fetched(s)).unwrap();
        // 2^40 nulls: no bytes each, bounded by count.
        let mut d = Vec::new();
        let mut z = (1u64 << 40) << 1;
        while z >= 0x80 {
            d.push((z as u8) | 0x80);
            z >>= 7;
        }
        d.push(z as u8);
        assert!(w.decode(&d).unwrap_err().contains("take no bytes"));
        // 1,000,000 longs announced in 3 bytes.
        let d = [0u8, 0x80, 0x89, 0x7a];
        assert!(w.decode(&d).unwrap_err().contains("items with"));
        // A string longer than the datum.
        let s = r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}"#;
        let w = Writer::new(&fetched(s)).unwrap();
        assert!(w
            .decode(&[0x80, 0x01])
            .unwrap_err()
            .contains("length of 64"));
        // A recursive schema nested past the bound.
        let s = r#"{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}"#;
        let w = Writer::new(&fetched(s)).unwrap();
        let deep = vec![2u8; 1000];
        assert!(w.decode(&deep).unwrap_err().contains("nested"));
    }

    #[test]
    fn a_debezium_envelope_is_its_after_row() {
        // As Debezium's AvroConverter writes a change event's schema: the
        // row record defined in `before`, named in `after`.
        let envelope = r#"{"type":"record","name":"Envelope","namespace":"pg.public.users","fields":[
            {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
                {"name":"id","type":"int"},{"name":"name","type":["null","string"],"default":null}]}],"default":null},
            {"name":"after","type":["null","Value"],"default":null},
            {"name":"op","type":"string"},
            {"name":"ts_ms","type":["null","long"],"default":null}]}"#;
        let cols = columns_of(&Writer::new(&fetched(envelope)).unwrap()).unwrap();
        let names: Vec<&str> = cols.iter().map(|c| &c.name[..]).collect();
        assert_eq!(names, ["id", "name"]);
        let writers = WriterSchemas::default();
        let w = Writer::new(&fetched(envelope)).unwrap();
        writers.by_id.borrow_mut().insert(7, Ok(Rc::new(w)));
        let schema = Schema::parse_str(envelope).unwrap();
        let event = |op: &str, before: Option<i32>, after: Option<i32>| {
            let row = |id: i32| {
                AvroValue::Record(vec![
                    ("id".into(), AvroValue::Int(id)),
                    (
                        "name".into(),
                        AvroValue::Union(1, Box::new(AvroValue::String(format!("u{id}")))),
                    ),
                ])
            };
            let side = |v: Option<i32>| match v {
                Some(id) => AvroValue::Union(1, Box::new(row(id))),
                None => AvroValue::Union(0, Box::new(AvroValue::Null)),
            };
            let v = AvroValue::Record(vec![
                ("before".into(), side(before)),
                ("after".into(), side(after)),
                ("op".into(), AvroValue::String(op.into())),
                (
                    "ts_ms".into(),
                    AvroValue::Union(0, Box::new(AvroValue::Null)),
                ),
            ]);
            let mut out = vec![0, 0, 0, 0, 7];
            out.extend(apache_avro::to_avro_datum(&schema, v).unwrap());
            out
        };
        let keyed = TableSchema {
            columns: std::iter::once(Column {
                name: "_key".into(),
                ty: ColumnType::Varchar,
                not_null: false,
                default: None,
            })
            .chain(cols.clone())
            .collect(),
            primary_key: vec!["_key".into()],
            format: super::super::schema::Format::Avro {
                subject: "trades-value".into(),
            },
        };
        let row_of = |schema: &TableSchema, value: &[u8]| {
            record_row(
                schema,
                &writers,
                &Incoming {
                    key: Some(b"k"),
                    value: Some(value),
                    timestamp_ms: 0,
                },
            )
        };
        assert_eq!(
            row_of(&keyed, &event("u", Some(1), Some(2))).unwrap(),
            Some(vec![Value::from("k"), Value::from(2), Value::from("u2")])
        );
        assert_eq!(row_of(&keyed, &event("d", Some(1), None)).unwrap(), None);
        let unkeyed = TableSchema {
            columns: cols,
            primary_key: vec![],
            format: keyed.format.clone(),
        };
        assert!(row_of(&unkeyed, &event("d", Some(1), None))
            .unwrap_err()
            .contains("needs a table with PRIMARY KEY"));
        assert!(row_of(&unkeyed, &event("c", None, None))
            .unwrap_err()
            .contains("without an after row"));
    }

    #[test]
    fn a_row_written_as_a_datum_reads_back() {
        let w = Writer::new(&fetched(TRADE)).unwrap();
        let row = serde_json::json!({"id": 42, "symbol": "ACME", "quantity": "10", "price": 12.5,
            "side": "SELL", "at": "2023-11-14 22:13:20.123", "tags": ["a", "b"], "again": "BUY"});
        let framed = encode_row(&w, row.as_object().unwrap()).unwrap();
        let (id, datum) = unframe(&framed).unwrap();
        assert_eq!(id, 7);
        let o = w.decode(datum).unwrap();
        assert_eq!(o["quantity"], 10);
        assert_eq!(o["venue"], Value::Null, "a nullable field left out is null");
        assert_eq!(o["at"], "2023-11-14 22:13:20.123");
        assert_eq!(o["tags"], serde_json::json!(["a", "b"]));
        // apache-avro reads it as the same record.
        let schema = Schema::parse_str(TRADE).unwrap();
        let v = apache_avro::from_avro_datum(&schema, &mut &datum[..], None).unwrap();
        let AvroValue::Record(fields) = v else {
            panic!("a record")
        };
        assert_eq!(fields[4].1, AvroValue::Union(0, Box::new(AvroValue::Null)));
        // What does not fit says which field and why.
        let mut bad = row.as_object().unwrap().clone();
        bad.insert("side".into(), Value::from("HOLD"));
        assert!(encode_row(&w, &bad).unwrap_err().starts_with("field side:"));
        bad.remove("side");
        assert!(encode_row(&w, &bad)
            .unwrap_err()
            .contains("no value and no default"));
    }

    #[test]
    fn decimals_write_with_their_scale() {
        assert_eq!(decimal_unscaled(&Value::from("12.34"), 2), Some(1234));
        assert_eq!(decimal_unscaled(&Value::from("-12.3"), 2), Some(-1230));
        assert_eq!(decimal_unscaled(&Value::from(5), 3), Some(5000));
        assert_eq!(decimal_unscaled(&Value::from("1.234"), 2), None);
        assert_eq!(decimal_unscaled(&Value::from("1"), 1_000_000_000), None);
        let s = r#"{"type":"record","name":"D","fields":[
            {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
            {"name":"f","type":{"type":"fixed","name":"F","size":4,"logicalType":"decimal","precision":9,"scale":2}}]}"#;
        let w = Writer::new(&fetched(s)).unwrap();
        let row = serde_json::json!({"d": "-12.34", "f": "3.5"});
        let framed = encode_row(&w, row.as_object().unwrap()).unwrap();
        let o = w.decode(&framed[5..]).unwrap();
        assert_eq!(o["d"], "-12.34");
        assert_eq!(o["f"], "3.50");
    }

    #[test]
    fn decimals_read_with_their_scale() {
        assert_eq!(decimal_text(&[0x04, 0xd2], 2).unwrap(), "12.34");
        assert_eq!(decimal_text(&[0xfb, 0x2e], 2).unwrap(), "-12.34");
        assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
        assert_eq!(decimal_text(&[0x05], 0).unwrap(), "5");
        assert!(decimal_text(&[0x05], 1_000_000_000).is_err());
    }

    #[test]
    fn columns_follow_the_record() {
        let cols = columns_of(&Writer::new(&fetched(TRADE)).unwrap()).unwrap();
        let got: Vec<(&str, ColumnType)> = cols.iter().map(|c| (&c.name[..], c.ty)).collect();
        assert_eq!(
            got,
            vec![
                ("id", ColumnType::BigInt),
                ("symbol", ColumnType::Varchar),
                ("quantity", ColumnType::Int),
                ("price", ColumnType::Double),
                ("venue", ColumnType::Varchar),
                ("side", ColumnType::Varchar),
                ("at", ColumnType::Timestamp),
                ("tags", ColumnType::Json),
                ("again", ColumnType::Varchar),
            ]
        );
        let not_record = Fetched {
            text: "\"string\"".into(),
            ..fetched(TRADE)
        };
        assert!(Writer::new(&not_record)
            .and_then(|w| columns_of(&w))
            .unwrap_err()
            .contains("not an Avro record"));
    }
}
