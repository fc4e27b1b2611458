//! The registry's state, made only by applying the records of the
//! `_schemas` topic in offset order (at start-up, and after each change
//! the registry writes), and those records' formats: Confluent's own
//! (`{"keytype":"SCHEMA","subject":…,"version":…,"magic":1}` and the
//! rest), so the topic reads as a Confluent registry's does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{Full, Kind, Reference, SchemaDef};

/// A subject's compatibility level.
pub const LEVELS: &[&str] = &[
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
];
pub const DEFAULT_LEVEL: &str = "BACKWARD";
pub const MODES: &[&str] = &["READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT"];
pub const DEFAULT_MODE: &str = "READWRITE";

/// One version of a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub id: i32,
    pub deleted: bool,
}

#[derive(Debug, Default)]
pub struct State {
    /// Every schema some version uses, by id.
    pub schemas: BTreeMap<i32, SchemaDef>,
    pub subjects: BTreeMap<String, BTreeMap<i32, Version>>,
    /// Compatibility levels: `None` is the global one.
    pub config: BTreeMap<Option<String>, String>,
    pub mode: BTreeMap<Option<String>, String>,
    /// The next id to give: past every id ever given (kept in its own
    /// record, so a schema deleted for good never gives its id again).
    pub next_id: i32,
    /// Every record of the topic below this offset is applied.
    pub upto: i64,
}

/// A record's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "keytype", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Key {
    Schema {
        subject: String,
        version: i32,
        magic: i32,
    },
    Config {
        subject: Option<String>,
        magic: i32,
    },
    Mode {
        subject: Option<String>,
        magic: i32,
    },
    /// weir's own: the next id to give.
    #[serde(rename = "WEIR_NEXT_ID")]
    NextId {
        magic: i32,
    },
    /// Records of Confluent's registry weir does not write (NOOP,
    /// DELETE_SUBJECT, CLEAR_SUBJECT): read and passed over.
    #[serde(other)]
    Other,
}

/// A SCHEMA record's value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaValue {
    pub subject: String,
    pub version: i32,
    pub id: i32,
    #[serde(default = "avro", skip_serializing_if = "is_avro")]
    pub schema_type: Kind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
    pub schema: String,
    #[serde(default)]
    pub deleted: bool,
}

fn avro() -> Kind {
    Kind::Avro
}

fn is_avro(k: &Kind) -> bool {
    *k == Kind::Avro
}

/// A record to write: its key and value (`None`: a tombstone).
pub type Change = (Key, Option<Value>);

pub fn schema_key(subject: &str, version: i32) -> Key {
    Key::Schema {
        subject: subject.to_string(),
        version,
        magic: 1,
    }
}

pub fn encode(change: &Change) -> (Vec<u8>, Option<Vec<u8>>) {
    let key = serde_json::to_vec(&change.0).expect("a key encodes");
    (key, change.1.as_ref().map(|v| v.to_string().into_bytes()))
}

impl State {
    /// Applies one record of the topic; a record that is not the
    /// registry's is passed over (and said so by the caller).
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), String> {
        let key: Key =
            serde_json::from_slice(key).map_err(|e| format!("a key that does not parse: {e}"))?;
        let value: Option<Value> = match value {
            None => None,
            Some(v) => Some(
                serde_json::from_slice(v)
                    .map_err(|e| format!("a value that does not parse: {e}"))?,
            ),
        };
        match key {
            Key::Schema {
                subject, version, ..
            } => match value {
                None => {
                    let removed = self
                        .subjects
                        .get_mut(&subject)
                        .and_then(|vs| vs.remove(&version));
                    if self.subjects.get(&subject).is_some_and(|vs| vs.is_empty()) {
                        self.subjects.remove(&subject);
                    }
                    if let Some(v) = removed {
                        self.forget_if_unused(v.id);
                    }
                }
                Some(v) => {
                    let v: SchemaValue = serde_json::from_value(v)
                        .map_err(|e| format!("a SCHEMA value that does not parse: {e}"))?;
                    self.schemas.insert(
                        v.id,
                        SchemaDef {
                            kind: v.schema_type,
                            text: v.schema,
                            references: v.references,
                        },
                    );
                    self.next_id = self.next_id.max(v.id + 1);
                    let old = self.subjects.entry(subject).or_default().insert(
                        version,
                        Version {
                            id: v.id,
                            deleted: v.deleted,
                        },
                    );
                    if let Some(old) = old.filter(|o| o.id != v.id) {
                        self.forget_if_unused(old.id);
                    }
                }
            },
            Key::Config { subject, .. } => {
                let level = value
                    .as_ref()
                    .and_then(|v| v.get("compatibilityLevel"))
                    .and_then(Value::as_str);
                match level {
                    Some(l) => self.config.insert(subject, l.to_string()),
                    None => self.config.remove(&subject),
                };
            }
            Key::Mode { subject, .. } => {
                let mode = value
                    .as_ref()
                    .and_then(|v| v.get("mode"))
                    .and_then(Value::as_str);
                match mode {
                    Some(m) => self.mode.insert(subject, m.to_string()),
                    None => self.mode.remove(&subject),
                };
            }
            Key::NextId { .. } => {
                if let Some(n) = value
                    .as_ref()
                    .and_then(|v| v.get("next_id"))
                    .and_then(Value::as_i64)
                {
                    self.next_id = self.next_id.max(n as i32);
                }
            }
            Key::Other => {}
        }
        Ok(())
    }

    fn forget_if_unused(&mut self, id: i32) {
        let used = self
            .subjects
            .values()
            .any(|vs| vs.values().any(|v| v.id == id));
        if !used {
            self.schemas.remove(&id);
        }
    }

    /// The compatibility level that applies to `subject`.
    pub fn level(&self, subject: &str) -> &str {
        self.config
            .get(&Some(subject.to_string()))
            .or_else(|| self.config.get(&None))
            .map_or(DEFAULT_LEVEL, String::as_str)
    }

    /// The mode that applies to `subject` (`None`: the global one).
    pub fn mode_of(&self, subject: Option<&str>) -> &str {
        subject
            .and_then(|s| self.mode.get(&Some(s.to_string())))
            .or_else(|| self.mode.get(&None))
            .map_or(DEFAULT_MODE, String::as_str)
    }

    /// A subject's versions, the soft-deleted ones only when `deleted`.
    pub fn versions(&self, subject: &str, deleted: bool) -> Vec<(i32, &Version)> {
        self.subjects
            .get(subject)
            .map(|vs| {
                vs.iter()
                    .filter(|(_, v)| deleted || !v.deleted)
                    .map(|(n, v)| (*n, v))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The id an identical schema already has, if any.
    pub fn id_of(&self, def: &SchemaDef) -> Option<i32> {
        self.schemas
            .iter()
            .find(|(_, d)| *d == def)
            .map(|(id, _)| *id)
    }

    /// The schema `id` with the texts of the schemas it references.
    pub fn full(&self, id: i32) -> Option<Full> {
        let def = self.schemas.get(&id)?.clone();
        let refs = def
            .references
            .iter()
            .filter_map(|r| {
                let v = self.subjects.get(&r.subject)?.get(&r.version)?;
                Some(self.schemas.get(&v.id)?.text.clone())
            })
            .collect();
        Some(Full { def, refs })
    }

    /// The subjects a live version of schema `id` is registered under.
    pub fn subjects_of(&self, id: i32) -> Vec<String> {
        self.subjects
            .iter()
            .filter(|(_, vs)| vs.values().any(|v| v.id == id && !v.deleted))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// The (subject, version)s whose schemas reference `subject`'s `version`.
    pub fn referenced_by(&self, subject: &str, version: i32) -> Vec<i32> {
        let ids: Vec<i32> = self
            .schemas
            .iter()
            .filter(|(_, d)| {
                d.references
                    .iter()
                    .any(|r| r.subject == subject && r.version == version)
            })
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter(|id| {
                self.subjects
                    .values()
                    .any(|vs| vs.values().any(|v| v.id == *id && !v.deleted))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(st: &mut State, subject: &str, version: i32, id: i32, deleted: bool) {
        let value = SchemaValue {
            subject: subject.into(),
            version,
            id,
            schema_type: Kind::Avro,
            references: Vec::new(),
            schema: format!("\"s{id}\""),
            deleted,
        };
        let (k, v) = encode(&(
            schema_key(subject, version),
            Some(serde_json::to_value(value).unwrap()),
        ));
        st.apply(&k, v.as_deref()).unwrap();
    }

    #[test]
    fn records_make_the_state_and_ids_are_never_given_twice() {
        let mut st = State::default();
        put(&mut st, "a", 1, 1, false);
        put(&mut st, "a", 2, 2, false);
        assert_eq!(st.versions("a", false).len(), 2);
        put(&mut st, "a", 2, 2, true);
        assert_eq!(st.versions("a", false).len(), 1);
        assert_eq!(st.versions("a", true).len(), 2);
        // Deleted for good: the schema goes, its id is not given again.
        let (k, _) = encode(&(schema_key("a", 2), None));
        st.apply(&k, None).unwrap();
        assert!(!st.schemas.contains_key(&2));
        assert_eq!(st.next_id, 3);
        // Confluent's own records weir does not write are passed over.
        st.apply(br#"{"keytype":"NOOP","magic":0}"#, None).unwrap();
        assert!(st.apply(b"not json", None).is_err());
        let (k, v) = encode(&(
            Key::Config {
                subject: None,
                magic: 0,
            },
            Some(serde_json::json!({"compatibilityLevel": "FULL"})),
        ));
        st.apply(&k, v.as_deref()).unwrap();
        assert_eq!(st.level("a"), "FULL");
    }
}
