//! A typed table's schema: its columns, their types, NOT NULL, DEFAULT and
//! the primary key. Kept in the catalog with the topic; a topic without a
//! schema is a raw table.

use serde::{Deserialize, Serialize};

/// Column types of a typed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnType {
    BigInt,
    Int,
    SmallInt,
    Double,
    Real,
    Boolean,
    Varchar,
    Timestamp,
    Json,
    /// Bytes, shown in SQL as `\\x` and hex digits (PostgreSQL's bytea
    /// form); in a JSON record, base64 (Kafka Connect's and Debezium's
    /// encoding) or that same hex form.
    Bytes,
}

impl ColumnType {
    /// The type named in SQL (`BIGINT`, `TEXT`, …), case-insensitive.
    pub fn parse(name: &str) -> Option<ColumnType> {
        Some(match name.to_ascii_uppercase().as_str() {
            "BIGINT" | "INT8" | "LONG" => ColumnType::BigInt,
            "INT" | "INTEGER" | "INT4" => ColumnType::Int,
            "SMALLINT" | "INT2" => ColumnType::SmallInt,
            "DOUBLE" | "DOUBLE PRECISION" | "FLOAT8" | "FLOAT" => ColumnType::Double,
            "REAL" | "FLOAT4" => ColumnType::Real,
            "BOOLEAN" | "BOOL" => ColumnType::Boolean,
            "VARCHAR" | "TEXT" | "STRING" | "CHARACTER VARYING" => ColumnType::Varchar,
            "TIMESTAMP" => ColumnType::Timestamp,
            "JSON" | "JSONB" => ColumnType::Json,
            "BYTES" | "BYTEA" | "BLOB" | "VARBINARY" | "BINARY" => ColumnType::Bytes,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::BigInt => "BIGINT",
            ColumnType::Int => "INT",
            ColumnType::SmallInt => "SMALLINT",
            ColumnType::Double => "DOUBLE",
            ColumnType::Real => "REAL",
            ColumnType::Boolean => "BOOLEAN",
            ColumnType::Varchar => "VARCHAR",
            ColumnType::Timestamp => "TIMESTAMP",
            ColumnType::Json => "JSON",
            ColumnType::Bytes => "BYTES",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    pub not_null: bool,
    /// The DEFAULT, converted to the column's type (kept in the catalog as
    /// its JSON text; parsed once, not for each record that omits it).
    #[serde(default, with = "json_text")]
    pub default: Option<serde_json::Value>,
}

/// A value kept as JSON text in the catalog (as it always was).
mod json_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(v: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().map(Value::to_string).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| serde_json::from_str(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub columns: Vec<Column>,
    /// Primary key column names, in key order; empty for an unkeyed table.
    pub primary_key: Vec<String>,
    /// How the table's records are written (JSON unless it says Avro).
    #[serde(default, skip_serializing_if = "Format::is_json")]
    pub format: Format,
}

/// The encoding of a typed table's record values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    /// JSON objects, converted to rows as they are produced.
    #[default]
    Json,
    /// Avro, framed with a schema id of the node's registry (a magic 0
    /// byte and the id, 4 bytes big-endian), kept as produced; `subject`
    /// names the registry subject whose schemas the records must use.
    Avro { subject: String },
}

impl Format {
    pub fn is_json(&self) -> bool {
        *self == Format::Json
    }
}

impl TableSchema {
    pub fn is_keyed(&self) -> bool {
        !self.primary_key.is_empty()
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.column(name).is_some()
    }

    /// A table with a `_value` column, or of Avro records, keeps each
    /// record as produced (its bytes, headers and compression) and makes
    /// its row when it is read; any other typed table stores rows.
    pub fn keeps_records(&self) -> bool {
        self.has("_value") || self.avro_subject().is_some()
    }

    /// The registry subject of an Avro table.
    pub fn avro_subject(&self) -> Option<&str> {
        match &self.format {
            Format::Avro { subject } => Some(subject),
            Format::Json => None,
        }
    }

    /// Indexes of the key columns in `columns`.
    pub fn key_indexes(&self) -> Vec<usize> {
        self.primary_key
            .iter()
            .filter_map(|k| self.columns.iter().position(|c| &c.name == k))
            .collect()
    }
}

/// The columns every raw table (a topic made by CreateTopics) has.
pub const RAW_COLUMNS: [&str; 6] = [
    "_partition",
    "_offset",
    "_timestamp",
    "_key",
    "_value",
    "_headers",
];

// ---- bytes --------------------------------------------------------------

/// Bytes as a SQL value: for a VARCHAR column (`_key`, `_value`) the text
/// when they are valid UTF-8, otherwise (and always for BYTES) `\\x`
/// followed by two lowercase hex digits a byte, as PostgreSQL shows bytea.
pub fn bytes_value(ty: ColumnType, b: &[u8]) -> serde_json::Value {
    if ty != ColumnType::Bytes {
        if let Ok(text) = std::str::from_utf8(b) {
            return serde_json::Value::String(text.to_string());
        }
    }
    let mut out = String::with_capacity(2 + 2 * b.len());
    out.push_str("\\x");
    for byte in b {
        use std::fmt::Write;
        let _ = write!(out, "{byte:02x}");
    }
    serde_json::Value::String(out)
}

/// The bytes a JSON string gives a BYTES column: `\\x` and hex digits, or
/// standard base64 (padded or not).
pub fn parse_bytes(s: &str) -> Option<Vec<u8>> {
    if let Some(hex) = s.strip_prefix("\\x") {
        if hex.len() % 2 != 0 {
            return None;
        }
        return (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect();
    }
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(s))
        .ok()
}

// ---- time ---------------------------------------------------------------

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS.mmm` (UTC), the
/// form TIMESTAMP values are stored and shown in (it sorts as time does).
pub fn format_timestamp(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, rem) = (rem / 3_600_000, rem % 3_600_000);
    let (min, rem) = (rem / 60_000, rem % 60_000);
    let (s, milli) = (rem / 1000, rem % 1000);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{milli:03}")
}

/// Parses `YYYY-MM-DD[( |T)HH:MM[:SS[.fff]]][Z|±HH:MM]` to milliseconds
/// since the epoch.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let mut ms = days_from_civil(y, mo, d) * 86_400_000;
    let mut rest = &s[10..];
    if rest.is_empty() {
        return Some(ms);
    }
    if !rest.starts_with(' ') && !rest.starts_with('T') {
        return None;
    }
    rest = &rest[1..];
    let (time, zone) = match rest.find(['Z', '+', '-']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let mut parts = time.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let mi: i64 = parts.next()?.parse().ok()?;
    let sec = parts.next().unwrap_or("0");
    if parts.next().is_some() || h > 23 || mi > 59 {
        return None;
    }
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let whole: i64 = whole.parse().ok()?;
    let frac_ms: i64 = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        digits.parse().ok()?
    };
    ms += h * 3_600_000 + mi * 60_000 + whole * 1000 + frac_ms;
    match zone {
        "" | "Z" => {}
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (zh, zm) = z[1..].split_once(':').unwrap_or((&z[1..], "0"));
            let offset = zh.parse::<i64>().ok()? * 3_600_000 + zm.parse::<i64>().ok()? * 60_000;
            ms -= sign * offset;
        }
    }
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        for ms in [
            0,
            1,
            999,
            1_700_000_000_123,
            -86_400_001,
            253_402_300_799_999,
        ] {
            assert_eq!(parse_timestamp(&format_timestamp(ms)), Some(ms), "{ms}");
        }
        assert_eq!(format_timestamp(0), "1970-01-01 00:00:00.000");
        assert_eq!(
            parse_timestamp("2024-02-29T12:30:00Z"),
            parse_timestamp("2024-02-29 12:30:00.000")
        );
        assert_eq!(
            parse_timestamp("2024-02-29T14:30:00+02:00"),
            parse_timestamp("2024-02-29 12:30:00")
        );
        assert_eq!(parse_timestamp("2024-13-01"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn a_default_is_kept_as_json_text_in_the_catalog() {
        // As catalogs written before the default was parsed once hold it.
        let stored = r#"{"name":"amount","ty":"Double","not_null":false,"default":"0.5"}"#;
        let c: Column = serde_json::from_str(stored).unwrap();
        assert_eq!(c.default, Some(serde_json::Value::from(0.5)));
        assert_eq!(serde_json::to_string(&c).unwrap(), stored);
        let text = Column {
            default: Some(serde_json::Value::from("a \"b\"")),
            ..c.clone()
        };
        let back: Column = serde_json::from_str(&serde_json::to_string(&text).unwrap()).unwrap();
        assert_eq!(back, text);
        let none = Column { default: None, ..c };
        assert!(serde_json::to_string(&none)
            .unwrap()
            .contains(r#""default":null"#));
        assert!(serde_json::from_str::<Column>(&stored.replace("0.5", "{oops")).is_err());
        let without = r#"{"name":"n","ty":"BigInt","not_null":true}"#;
        assert_eq!(
            serde_json::from_str::<Column>(without).unwrap().default,
            None
        );
    }

    #[test]
    fn type_names() {
        assert_eq!(ColumnType::parse("text"), Some(ColumnType::Varchar));
        assert_eq!(ColumnType::parse("BIGINT"), Some(ColumnType::BigInt));
        assert_eq!(ColumnType::parse("blob"), Some(ColumnType::Bytes));
        assert_eq!(ColumnType::parse("blobs"), None);
    }
}
