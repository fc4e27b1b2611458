//! Confluent Schema Registry's REST API over the registry's state: the
//! routes, their answers and their errors (`{"error_code": 40401,
//! "message": …}`, the status the code's first three digits), as
//! Confluent's registry gives them.

use std::rc::Rc;

use serde_json::{json, Value};

use super::schema::{can_read, normalize, Full, Kind, Reference, SchemaDef};
use super::state::{schema_key, Change, Key, SchemaValue, State, LEVELS, MODES};
pub use super::Answer;
use super::Registry;
use crate::shard::Shard;

mod changes;
mod reads;

use changes::{delete_setting, delete_subject, delete_version, put_setting, register, Setting};
use reads::{
    by_id, compatibility, get_config, get_mode, get_version, list_subjects, list_versions, lookup,
    referenced_by,
};

/// Answers a request another node of the cluster forwarded (JSON of a
/// `Request`, answered with JSON of an `Answer`), on the registry's shard.
pub async fn handle_forwarded(shard: &Rc<Shard>, body: &[u8]) -> Result<Vec<u8>, String> {
    let req: Request =
        serde_json::from_slice(body).map_err(|e| format!("not a registry request: {e}"))?;
    let owner = super::owner(shard);
    let answer = shard
        .invoke_on(owner, move |s| async move { handle(&s, req).await })
        .await
        .unwrap_or_else(|e| Answer::error(50001, e.message));
    Ok(serde_json::to_vec(&answer).expect("answers serialise"))
}

/// A request, as the HTTP server read it (sent to the registry's shard,
/// or in a cluster to the node leading the registry's topic).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub method: String,
    /// The path without the query (for messages).
    pub path: String,
    /// The path's segments, percent-decoded.
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    fn flag(&self, name: &str) -> bool {
        self.query
            .iter()
            .any(|(k, v)| k == name && v.eq_ignore_ascii_case("true"))
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the request changes the registry (else it only reads).
    pub fn writes(&self) -> bool {
        match self.method.as_str() {
            "PUT" | "DELETE" => true,
            // POST /subjects/{s}/versions registers; the other POSTs
            // (lookup, compatibility) only read.
            "POST" => {
                let parts = &self.segments;
                parts.len() == 3 && parts[0] == "subjects" && parts[2] == "versions"
            }
            _ => false,
        }
    }
}

/// Answers `req` (on the registry's shard).
pub async fn handle(shard: &Rc<Shard>, req: Request) -> Answer {
    let reg = shard.state::<super::Registry>();
    // Changes one at a time: each is checked against the state it changes.
    let _turn = match req.writes() {
        true => Some(reg.writing.lock().await),
        false => None,
    };
    if let Err(a) = reg.refresh(shard).await {
        return a;
    }
    route(shard, &reg, &req).await
}

async fn route(shard: &Rc<Shard>, reg: &Registry, req: &Request) -> Answer {
    let p: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let m = req.method.as_str();
    let result = match (m, &p[..]) {
        ("GET", ["subjects"]) => Ok(list_subjects(&reg.state.borrow(), req)),
        ("GET", ["subjects", s, "versions"]) => list_versions(&reg.state.borrow(), s, req),
        ("POST", ["subjects", s, "versions"]) => register(shard, reg, s, req).await,
        ("GET", ["subjects", s, "versions", v]) => {
            get_version(&reg.state.borrow(), s, v, req).map(|(_, a)| a)
        }
        ("GET", ["subjects", s, "versions", v, "schema"]) => {
            get_version(&reg.state.borrow(), s, v, req).map(|(raw, _)| raw)
        }
        ("GET", ["subjects", s, "versions", v, "referencedby"]) => {
            referenced_by(&reg.state.borrow(), s, v, req)
        }
        ("POST", ["subjects", s]) => lookup(&reg.state.borrow(), s, req),
        ("DELETE", ["subjects", s]) => delete_subject(shard, reg, s, req).await,
        ("DELETE", ["subjects", s, "versions", v]) => delete_version(shard, reg, s, v, req).await,
        ("GET", ["schemas", "types"]) => Ok(Answer::ok(json!(["JSON", "PROTOBUF", "AVRO"]))),
        ("GET", ["schemas", "ids", id]) => by_id(&reg.state.borrow(), id, "", req),
        ("GET", ["schemas", "ids", id, what]) => by_id(&reg.state.borrow(), id, what, req),
        ("POST", ["compatibility", "subjects", s, "versions"]) => {
            compatibility(&reg.state.borrow(), s, None, req)
        }
        ("POST", ["compatibility", "subjects", s, "versions", v]) => {
            compatibility(&reg.state.borrow(), s, Some(v), req)
        }
        ("GET", ["config"]) => Ok(get_config(&reg.state.borrow(), None, req).unwrap_or_else(|a| a)),
        ("GET", ["config", s]) => get_config(&reg.state.borrow(), Some(s), req),
        ("PUT", ["config"]) => put_setting(shard, reg, None, req, Setting::Config).await,
        ("PUT", ["config", s]) => put_setting(shard, reg, Some(s), req, Setting::Config).await,
        ("DELETE", ["config"]) => delete_setting(shard, reg, None, Setting::Config).await,
        ("DELETE", ["config", s]) => delete_setting(shard, reg, Some(s), Setting::Config).await,
        ("GET", ["mode"]) => Ok(Answer::ok(
            json!({"mode": reg.state.borrow().mode_of(None)}),
        )),
        ("GET", ["mode", s]) => get_mode(&reg.state.borrow(), s, req),
        ("PUT", ["mode"]) => put_setting(shard, reg, None, req, Setting::Mode).await,
        ("PUT", ["mode", s]) => put_setting(shard, reg, Some(s), req, Setting::Mode).await,
        ("DELETE", ["mode", s]) => delete_setting(shard, reg, Some(s), Setting::Mode).await,
        _ => Err(Answer::error(
            404,
            format!("HTTP 404 Not Found: no route for {m} {}", req.path),
        )),
    };
    result.unwrap_or_else(|a| a)
}

fn subject_not_found(s: &str) -> Answer {
    Answer::error(40401, format!("Subject '{s}' not found."))
}

fn version_not_found(v: impl std::fmt::Display) -> Answer {
    Answer::error(40402, format!("Version {v} not found."))
}

fn read_only(s: &str) -> Answer {
    Answer::error(
        42205,
        format!("Subject {s} is in read-only mode: changes are refused (see /mode)"),
    )
}

/// Refuses a change to `s` when it (or the registry) is read-only.
fn writable(st: &State, s: &str) -> Result<(), Answer> {
    match st.mode_of(Some(s)) {
        "READONLY" | "READONLY_OVERRIDE" => Err(read_only(s)),
        _ => Ok(()),
    }
}

/// Refuses to delete a version another schema references.
fn unreferenced(st: &State, s: &str, n: i32) -> Result<(), Answer> {
    if st.referenced_by(s, n).is_empty() {
        return Ok(());
    }
    Err(Answer::error(
        42206,
        format!("One or more references exist to the schema {{subject={s}, version={n}}}"),
    ))
}

/// A version named in a path: a number, `latest` or -1.
fn version_number(st: &State, s: &str, v: &str, deleted: bool) -> Result<i32, Answer> {
    let vs = st.versions(s, deleted);
    if v == "latest" || v == "-1" {
        return vs
            .last()
            .map(|(n, _)| *n)
            .ok_or_else(|| subject_not_found(s));
    }
    let n: i32 = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
        Answer::error(
            42202,
            format!(
                "The specified version '{v}' is not a valid version id. \
                 Allowed values are between [1, 2^31-1] and the string \"latest\""
            ),
        )
    })?;
    if st.subjects.get(s).is_none_or(|vs| vs.is_empty()) {
        return Err(subject_not_found(s));
    }
    if vs.iter().any(|(m, _)| *m == n) {
        Ok(n)
    } else {
        Err(version_not_found(n))
    }
}

/// A schema's fields in an answer (the type left out for AVRO, as
/// Confluent's registry does; references only when there are some).
fn schema_fields(out: &mut serde_json::Map<String, Value>, def: &SchemaDef) {
    if def.kind != Kind::Avro {
        out.insert("schemaType".into(), json!(def.kind.name()));
    }
    if !def.references.is_empty() {
        out.insert("references".into(), json!(def.references));
    }
    out.insert("schema".into(), json!(def.text));
}

fn version_answer(st: &State, s: &str, n: i32) -> Value {
    let v = &st.subjects[s][&n];
    let mut out = serde_json::Map::new();
    out.insert("subject".into(), json!(s));
    out.insert("version".into(), json!(n));
    out.insert("id".into(), json!(v.id));
    if let Some(def) = st.schemas.get(&v.id) {
        schema_fields(&mut out, def);
    }
    Value::Object(out)
}

/// A schema as `/schema` gives it: the document itself (a PROTOBUF
/// schema, not JSON, as a JSON string).
fn raw_schema(d: &SchemaDef) -> String {
    match d.kind {
        Kind::Protobuf => json!(d.text).to_string(),
        _ => d.text.clone(),
    }
}

/// A schema in a request body, checked: its definition and the texts of
/// what it references.
fn schema_of(st: &State, req: &Request) -> Result<Full, Answer> {
    let body: Value = serde_json::from_slice(&req.body).map_err(|e| {
        Answer::error(
            400,
            format!("Unrecognized field or malformed JSON in the request body: {e}"),
        )
    })?;
    let text = body
        .get("schema")
        .and_then(Value::as_str)
        .ok_or_else(|| Answer::error(42201, "Invalid schema: the body has no \"schema\" string"))?;
    let kind = match body.get("schemaType").and_then(Value::as_str) {
        None => Kind::Avro,
        Some(k) => {
            Kind::parse(k).map_err(|why| Answer::error(42201, format!("Invalid schema: {why}")))?
        }
    };
    let references: Vec<Reference> = match body.get("references") {
        None | Some(Value::Null) => Vec::new(),
        Some(r) => serde_json::from_value(r.clone())
            .map_err(|e| Answer::error(42201, format!("Invalid schema: references: {e}")))?,
    };
    let mut refs = Vec::with_capacity(references.len());
    for r in &references {
        let found = st
            .subjects
            .get(&r.subject)
            .and_then(|vs| vs.get(&r.version))
            .and_then(|v| st.schemas.get(&v.id));
        match found {
            Some(d) => refs.push(d.text.clone()),
            None => {
                return Err(Answer::error(
                    42201,
                    format!(
                    "Invalid schema: reference {:?} to subject {:?} version {} is not registered",
                    r.name, r.subject, r.version
                ),
                ))
            }
        }
    }
    let text = normalize(kind, text, &refs)
        .map_err(|why| Answer::error(42201, format!("Invalid schema {}: {why}", kind.name())))?;
    Ok(Full {
        def: SchemaDef {
            kind,
            text,
            references,
        },
        refs,
    })
}

/// Why `new` cannot follow `against` (the subject's versions, oldest
/// first) at `level`; empty when it can.
fn incompatibilities(st: &State, level: &str, new: &Full, against: &[i32]) -> Vec<String> {
    let (backward, forward) = match level.trim_end_matches("_TRANSITIVE") {
        "BACKWARD" => (true, false),
        "FORWARD" => (false, true),
        "FULL" => (true, true),
        _ => return Vec::new(),
    };
    let ids: Vec<i32> = if level.ends_with("_TRANSITIVE") {
        against.to_vec()
    } else {
        against.last().copied().into_iter().collect()
    };
    let mut why = Vec::new();
    for id in ids {
        let Some(old) = st.full(id) else { continue };
        if backward {
            if let Err(e) = can_read(&old, new) {
                why.push(format!(
                    "the new schema cannot read data written with schema id {id} ({level}): {e}"
                ));
            }
        }
        if forward {
            if let Err(e) = can_read(new, &old) {
                why.push(format!(
                    "schema id {id} cannot read data written with the new schema ({level}): {e}"
                ));
            }
        }
    }
    why
}
