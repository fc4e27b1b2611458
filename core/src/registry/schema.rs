//! A registered schema's kind, its text as the registry keeps it, and the
//! compatibility of two Avro schemas by Avro's own resolution rules (the
//! `apache-avro` crate's `SchemaCompatibility`).
//!
//! AVRO schemas are parsed (with their references) and kept in the form
//! the parser writes back, so `"string"` and `{"type": "string"}` are one
//! schema with one id, as Confluent's registry keeps Avro's `toString()`.
//! JSON schemas must be JSON and are kept minified; PROTOBUF schemas are
//! kept as given. Compatibility is checked for AVRO only: a JSON or
//! PROTOBUF schema is taken as compatible with any other (said in the
//! README).

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::Schema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A schema's type, as the registry's API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Kind {
    Avro,
    Json,
    Protobuf,
}

impl Kind {
    pub fn parse(name: &str) -> Result<Kind, String> {
        match name.to_ascii_uppercase().as_str() {
            "AVRO" => Ok(Kind::Avro),
            "JSON" => Ok(Kind::Json),
            "PROTOBUF" => Ok(Kind::Protobuf),
            _ => Err(format!(
                "unknown schema type {name:?}: AVRO, JSON or PROTOBUF"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Avro => "AVRO",
            Kind::Json => "JSON",
            Kind::Protobuf => "PROTOBUF",
        }
    }
}

/// A schema's reference to another subject's version (a named type it
/// uses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i32,
}

/// A schema as registered: the same kind, text and references are the
/// same schema (and id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaDef {
    pub kind: Kind,
    pub text: String,
    pub references: Vec<Reference>,
}

/// The text the registry keeps for `text` of `kind` (`refs`: the texts of
/// the schemas it references, in order), or why it is not a schema.
pub fn normalize(kind: Kind, text: &str, refs: &[String]) -> Result<String, String> {
    match kind {
        Kind::Avro => {
            let schema = parse_avro(text, refs)?;
            let written = serde_json::to_string(&schema).map_err(|e| e.to_string())?;
            // Kept as the parser writes it back when that parses to the
            // same schema; as given (minified) otherwise.
            match parse_avro(&written, refs) {
                Ok(again) if again == schema => Ok(written),
                _ => minify(text),
            }
        }
        Kind::Json => minify(text),
        Kind::Protobuf => {
            let t = text.trim();
            if t.is_empty() {
                return Err("an empty PROTOBUF schema".into());
            }
            Ok(t.to_string())
        }
    }
}

fn minify(text: &str) -> Result<String, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(v.to_string())
}

fn parse_avro(text: &str, refs: &[String]) -> Result<Schema, String> {
    if refs.is_empty() {
        Schema::parse_str(text).map_err(|e| e.to_string())
    } else {
        Schema::parse_str_with_list(text, refs)
            .map(|(s, _)| s)
            .map_err(|e| e.to_string())
    }
}

/// An Avro schema with its references' named types written in place
/// where first used, so it can be resolved against another on its own.
pub fn standalone_avro(text: &str, refs: &[String]) -> Result<Schema, String> {
    if refs.is_empty() {
        return parse_avro(text, &[]);
    }
    let mut named: Vec<(String, Value)> = Vec::new();
    for r in refs {
        let v: Value = serde_json::from_str(r).map_err(|e| e.to_string())?;
        if let Some(full) = full_name(&v) {
            named.push((full, v));
        }
    }
    let mut v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    inline(&mut v, &mut named);
    Schema::parse_str(&v.to_string()).map_err(|e| e.to_string())
}

fn full_name(v: &Value) -> Option<String> {
    let name = v.get("name")?.as_str()?;
    match v.get("namespace").and_then(Value::as_str) {
        Some(ns) if !name.contains('.') && !ns.is_empty() => Some(format!("{ns}.{name}")),
        _ => Some(name.to_string()),
    }
}

/// Replaces the first use of each name in `named` by its definition.
fn inline(v: &mut Value, named: &mut Vec<(String, Value)>) {
    match v {
        Value::String(s) => {
            let at = named
                .iter()
                .position(|(full, _)| full == s || full.rsplit('.').next() == Some(s.as_str()));
            if let Some(at) = at {
                let (_, def) = named.remove(at);
                *v = def;
                inline(v, named);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| inline(i, named)),
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                if matches!(k.as_str(), "type" | "items" | "values" | "fields") {
                    inline(item, named);
                }
            }
        }
        _ => {}
    }
}

/// Whether data written with `writer` can be read with `reader`, or why
/// not (Avro only: other kinds are always compatible).
pub fn can_read(writer: &Full, reader: &Full) -> Result<(), String> {
    if writer.def.kind != Kind::Avro || reader.def.kind != Kind::Avro {
        return Ok(());
    }
    let w = standalone_avro(&writer.def.text, &writer.refs)?;
    let r = standalone_avro(&reader.def.text, &reader.refs)?;
    SchemaCompatibility::can_read(&w, &r).map_err(|e| e.to_string())
}

/// A schema with the texts of the schemas it references.
pub struct Full {
    pub def: SchemaDef,
    pub refs: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avro(text: &str) -> Full {
        Full {
            def: SchemaDef {
                kind: Kind::Avro,
                text: normalize(Kind::Avro, text, &[]).unwrap(),
                references: Vec::new(),
            },
            refs: Vec::new(),
        }
    }

    #[test]
    fn one_avro_schema_in_two_spellings_is_one_text() {
        assert_eq!(
            normalize(Kind::Avro, "\"string\"", &[]).unwrap(),
            normalize(Kind::Avro, "{\"type\": \"string\"}", &[]).unwrap()
        );
        assert!(normalize(Kind::Avro, "{\"type\": \"nope\"}", &[]).is_err());
        assert!(normalize(Kind::Json, "{", &[]).is_err());
    }

    #[test]
    fn a_field_added_with_a_default_reads_old_data_and_one_without_does_not() {
        let v1 = avro(r#"{"type":"record","name":"T","fields":[{"name":"a","type":"long"}]}"#);
        let v2 = avro(
            r#"{"type":"record","name":"T","fields":[{"name":"a","type":"long"},{"name":"b","type":"string","default":"x"}]}"#,
        );
        let v3 = avro(
            r#"{"type":"record","name":"T","fields":[{"name":"a","type":"long"},{"name":"c","type":"string"}]}"#,
        );
        assert!(can_read(&v1, &v2).is_ok());
        assert!(can_read(&v1, &v3).is_err());
        // Old readers ignore the new field.
        assert!(can_read(&v3, &v1).is_ok());
    }

    #[test]
    fn a_reference_is_written_in_place_for_the_check() {
        let inner = r#"{"type":"record","name":"Money","namespace":"m","fields":[{"name":"cents","type":"long"}]}"#
            .to_string();
        let outer =
            r#"{"type":"record","name":"Trade","fields":[{"name":"price","type":"m.Money"}]}"#;
        let text = normalize(Kind::Avro, outer, std::slice::from_ref(&inner)).unwrap();
        let full = Full {
            def: SchemaDef {
                kind: Kind::Avro,
                text,
                references: Vec::new(),
            },
            refs: vec![inner],
        };
        assert!(can_read(&full, &full).is_ok());
    }
}
