//! The datum decoder: one Avro datum straight to the JSON values a row is
//! made of, every length checked against the bytes left, the nesting
//! bounded, and the items that take no bytes counted.

use std::collections::HashMap;

use apache_avro::schema::{
    ArraySchema, DecimalSchema, EnumSchema, MapSchema, Name, Namespace, RecordSchema, Schema,
    UnionSchema,
};
use serde_json::{Map, Value};

use super::{Writer, MAX_DEPTH};
use crate::table::schema::{bytes_value, format_timestamp, ColumnType};

/// The most items a datum's arrays of empty items (nulls, empty records)
/// may hold, all together: they take no bytes, so the bytes sent do not
/// bound them.
const MAX_EMPTY_ITEMS: usize = 1 << 16;

impl Writer {
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
            Schema::Uuid => self.uuid()?,
            Schema::Fixed(f) => bytes_value(ColumnType::Bytes, self.take(f.size)?),
            Schema::Enum(e) => self.symbol(e)?,
            Schema::Union(u) => self.union(u, ns)?,
            Schema::Array(a) => self.array(a, ns)?,
            Schema::Map(m) => self.map(m, ns)?,
            Schema::Record(r) => self.record(r, ns)?,
            Schema::Decimal(d) => self.decimal(d)?,
            Schema::BigDecimal => self.big_decimal()?,
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
            Schema::Ref { name } => self.named(name, ns)?,
        })
    }

    // Each kind of schema that takes more than a line, read (`value_in`).

    fn uuid(&mut self) -> Result<Value, String> {
        // As apache-avro reads it: 16 bytes, or the text form.
        let b = self.bytes()?;
        Ok(match b.len() {
            16 => Value::String(uuid_text(b)),
            _ => Value::String(
                std::str::from_utf8(b)
                    .map_err(|_| "a uuid that is not UTF-8")?
                    .to_string(),
            ),
        })
    }

    fn symbol(&mut self, e: &EnumSchema) -> Result<Value, String> {
        let i = self.long()?;
        let sym = usize::try_from(i).ok().and_then(|i| e.symbols.get(i));
        Ok(Value::String(
            sym.ok_or_else(|| format!("enum index {i} of {} symbols", e.symbols.len()))?
                .clone(),
        ))
    }

    fn union(&mut self, u: &UnionSchema, ns: &Namespace) -> Result<Value, String> {
        let i = self.long()?;
        let branch = usize::try_from(i).ok().and_then(|i| u.variants().get(i));
        let branch = branch.ok_or_else(|| format!("union branch {i} of {}", u.variants().len()))?;
        self.value(branch, ns)
    }

    fn array(&mut self, a: &ArraySchema, ns: &Namespace) -> Result<Value, String> {
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
        Ok(Value::Array(items))
    }

    fn map(&mut self, m: &MapSchema, ns: &Namespace) -> Result<Value, String> {
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
        Ok(Value::Object(items))
    }

    fn record(&mut self, r: &RecordSchema, ns: &Namespace) -> Result<Value, String> {
        let inner = r.name.fully_qualified_name(ns).namespace;
        let mut o = Map::new();
        for f in &r.fields {
            let v = self
                .value(&f.schema, &inner)
                .map_err(|why| format!("{}: {why}", f.name))?;
            o.insert(f.name.clone(), v);
        }
        Ok(Value::Object(o))
    }

    fn decimal(&mut self, d: &DecimalSchema) -> Result<Value, String> {
        let b = match &*d.inner {
            Schema::Fixed(f) => self.take(f.size)?,
            _ => self.bytes()?,
        };
        Ok(Value::String(decimal_text(b, d.scale)?))
    }

    fn big_decimal(&mut self) -> Result<Value, String> {
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
        Ok(Value::String(decimal_text(unscaled, scale)?))
    }

    /// A named type (`Ref`), read as the type it names.
    fn named(&mut self, name: &Name, ns: &Namespace) -> Result<Value, String> {
        let full = name.fully_qualified_name(ns);
        let names = self.names;
        let s = names
            .get(&full)
            .ok_or_else(|| format!("the schema names {full}, which it does not define"))?;
        self.value(s, &full.namespace)
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
pub(super) fn decimal_text(b: &[u8], scale: usize) -> Result<String, String> {
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
