//! Rows written as datums (an INSERT's): a row's values encoded with a
//! writer schema's record and framed with its id.

use std::collections::HashMap;

use apache_avro::schema::{
    ArraySchema, DecimalSchema, MapSchema, Name, Namespace, RecordSchema, Schema, UnionSchema,
};
use serde_json::{Map, Value};

use super::{kind_name, Writer, MAGIC, MAX_DEPTH};

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
        let wrong = || wrong_value(s, v);
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
                Value::String(t) => crate::table::schema::parse_timestamp(t),
                _ => None,
            }
            .ok_or_else(wrong)
        };
        let raw = || -> Result<Vec<u8>, String> {
            v.as_str()
                .and_then(crate::table::schema::parse_bytes)
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
            Schema::Union(u) => return self.union(u, v, ns),
            Schema::Array(a) => self.array(a, s, v, ns)?,
            Schema::Map(m) => self.map(m, s, v, ns)?,
            Schema::Record(r) => {
                let fields = v.as_object().ok_or_else(wrong)?;
                let inner = r.name.fully_qualified_name(ns).namespace;
                self.fields(r, fields, &inner)?;
            }
            Schema::Date => self.date(s, v)?,
            Schema::TimestampMillis | Schema::LocalTimestampMillis => self.long(millis()?),
            Schema::TimestampMicros | Schema::LocalTimestampMicros => {
                self.long(millis()?.checked_mul(1000).ok_or_else(wrong)?)
            }
            Schema::TimestampNanos | Schema::LocalTimestampNanos => {
                self.long(millis()?.checked_mul(1_000_000).ok_or_else(wrong)?)
            }
            Schema::Decimal(d) => self.decimal(d, s, v)?,
            Schema::BigDecimal | Schema::Duration => {
                return Err(format!("{} values are not written from SQL", kind_name(s)))
            }
            Schema::Ref { name } => self.named(name, v, ns)?,
        }
        Ok(())
    }

    // Each kind of schema that takes more than a line, written (`value_in`).

    fn union(&mut self, u: &UnionSchema, v: &Value, ns: &Namespace) -> Result<(), String> {
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
        Err(format!(
            "no branch of the union takes it ({})",
            why.join("; ")
        ))
    }

    fn array(
        &mut self,
        a: &ArraySchema,
        s: &Schema,
        v: &Value,
        ns: &Namespace,
    ) -> Result<(), String> {
        let wrong = || wrong_value(s, v);
        let items = v.as_array().ok_or_else(wrong)?;
        if !items.is_empty() {
            self.long(items.len() as i64);
            for item in items {
                self.value(&a.items, item, ns)?;
            }
        }
        self.long(0);
        Ok(())
    }

    fn map(&mut self, m: &MapSchema, s: &Schema, v: &Value, ns: &Namespace) -> Result<(), String> {
        let wrong = || wrong_value(s, v);
        let items = v.as_object().ok_or_else(wrong)?;
        if !items.is_empty() {
            self.long(items.len() as i64);
            for (k, item) in items {
                self.bytes(k.as_bytes());
                self.value(&m.types, item, ns)?;
            }
        }
        self.long(0);
        Ok(())
    }

    fn date(&mut self, s: &Schema, v: &Value) -> Result<(), String> {
        let wrong = || wrong_value(s, v);
        let days = match v {
            Value::Number(n) => n.as_i64(),
            Value::String(t) => {
                crate::table::schema::parse_timestamp(t).map(|ms| ms.div_euclid(86_400_000))
            }
            _ => None,
        }
        .filter(|d| i32::try_from(*d).is_ok())
        .ok_or_else(wrong)?;
        self.long(days);
        Ok(())
    }

    fn decimal(&mut self, d: &DecimalSchema, s: &Schema, v: &Value) -> Result<(), String> {
        let wrong = || wrong_value(s, v);
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
        Ok(())
    }

    /// A named type (`Ref`), written as the type it names.
    fn named(&mut self, name: &Name, v: &Value, ns: &Namespace) -> Result<(), String> {
        let full = name.fully_qualified_name(ns);
        let names = self.names;
        let s = names
            .get(&full)
            .ok_or_else(|| format!("the schema names {full}, which it does not define"))?;
        self.value(s, v, &full.namespace)?;
        Ok(())
    }
}

/// Why `v` cannot be written as a value of `s`.
fn wrong_value(s: &Schema, v: &Value) -> String {
    let shown = match v {
        Value::Null => "null (no value and no default)".to_string(),
        other => other.to_string(),
    };
    format!("{shown} is not {}", kind_name(s))
}

/// A number (or its text) as a decimal's unscaled value at `scale`, when
/// it has no more digits past the point than that.
pub(super) fn decimal_unscaled(v: &Value, scale: usize) -> Option<i128> {
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
