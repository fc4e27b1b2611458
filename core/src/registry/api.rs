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

/// A request, as the HTTP server read it (sent to the registry's shard).
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

fn list_subjects(st: &State, req: &Request) -> Answer {
    let deleted = req.flag("deleted");
    let prefix = req.param("subjectPrefix").unwrap_or("");
    let names: Vec<&String> = st
        .subjects
        .iter()
        .filter(|(name, vs)| name.starts_with(prefix) && vs.values().any(|v| deleted || !v.deleted))
        .map(|(name, _)| name)
        .collect();
    Answer::ok(json!(names))
}

fn list_versions(st: &State, s: &str, req: &Request) -> Result<Answer, Answer> {
    let vs = st.versions(s, req.flag("deleted"));
    if vs.is_empty() {
        return Err(subject_not_found(s));
    }
    Ok(Answer::ok(json!(vs
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>())))
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

/// A version's answer, and its schema alone (for `/schema`).
fn get_version(st: &State, s: &str, v: &str, req: &Request) -> Result<(Answer, Answer), Answer> {
    let n = version_number(st, s, v, req.flag("deleted"))?;
    let id = st.subjects[s][&n].id;
    let raw = st
        .schemas
        .get(&id)
        .map(|d| Answer {
            status: 200,
            body: raw_schema(d),
        })
        .ok_or_else(|| Answer::error(40403, format!("Schema {id} not found")))?;
    Ok((raw, Answer::ok(version_answer(st, s, n))))
}

/// A schema as `/schema` gives it: the document itself (a PROTOBUF
/// schema, not JSON, as a JSON string).
fn raw_schema(d: &SchemaDef) -> String {
    match d.kind {
        Kind::Protobuf => json!(d.text).to_string(),
        _ => d.text.clone(),
    }
}

fn referenced_by(st: &State, s: &str, v: &str, req: &Request) -> Result<Answer, Answer> {
    let n = version_number(st, s, v, req.flag("deleted"))?;
    Ok(Answer::ok(json!(st.referenced_by(s, n))))
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

async fn register(
    shard: &Rc<Shard>,
    reg: &Registry,
    s: &str,
    req: &Request,
) -> Result<Answer, Answer> {
    let changes = {
        let st = reg.state.borrow();
        writable(&st, s)?;
        let new = schema_of(&st, req)?;
        let live = st.versions(s, false);
        // The same schema again: its version's id, nothing written.
        if let Some((_, v)) = live
            .iter()
            .find(|(_, v)| st.schemas.get(&v.id) == Some(&new.def))
        {
            return Ok(Answer::ok(json!({"id": v.id})));
        }
        let ids: Vec<i32> = live.iter().map(|(_, v)| v.id).collect();
        let why = incompatibilities(&st, st.level(s), &new, &ids);
        if !why.is_empty() {
            return Err(Answer::error(
                409,
                format!(
                    "Schema being registered is incompatible with an earlier schema for subject \"{s}\", details: {why:?}"
                ),
            ));
        }
        let (id, fresh) = match st.id_of(&new.def) {
            Some(id) => (id, false),
            None => (st.next_id.max(1), true),
        };
        let version = st
            .subjects
            .get(s)
            .and_then(|vs| vs.keys().next_back())
            .map_or(1, |n| n + 1);
        let value = SchemaValue {
            subject: s.to_string(),
            version,
            id,
            schema_type: new.def.kind,
            references: new.def.references.clone(),
            schema: new.def.text.clone(),
            deleted: false,
        };
        let mut changes: Vec<Change> = Vec::new();
        if fresh {
            changes.push((Key::NextId { magic: 0 }, Some(json!({"next_id": id + 1}))));
        }
        changes.push((
            schema_key(s, version),
            Some(serde_json::to_value(value).expect("a value encodes")),
        ));
        (changes, id)
    };
    let (changes, id) = changes;
    reg.write(shard, &changes).await?;
    Ok(Answer::ok(json!({"id": id})))
}

fn lookup(st: &State, s: &str, req: &Request) -> Result<Answer, Answer> {
    let deleted = req.flag("deleted");
    if st.versions(s, deleted).is_empty() {
        return Err(subject_not_found(s));
    }
    let new = schema_of(st, req)?;
    st.versions(s, deleted)
        .iter()
        .find(|(_, v)| st.schemas.get(&v.id) == Some(&new.def))
        .map(|(n, _)| Answer::ok(version_answer(st, s, *n)))
        .ok_or_else(|| Answer::error(40403, "Schema not found"))
}

fn by_id(st: &State, id: &str, what: &str, req: &Request) -> Result<Answer, Answer> {
    let not_found = || Answer::error(40403, format!("Schema {id} not found"));
    let id: i32 = id.parse().map_err(|_| not_found())?;
    let def = st.schemas.get(&id).ok_or_else(not_found)?;
    let deleted = req.flag("deleted");
    let uses = || {
        st.subjects.iter().flat_map(move |(s, vs)| {
            vs.iter()
                .filter(move |(_, v)| v.id == id && (deleted || !v.deleted))
                .map(move |(n, _)| (s, *n))
        })
    };
    match what {
        "" => {
            let mut out = serde_json::Map::new();
            schema_fields(&mut out, def);
            Ok(Answer::ok(Value::Object(out)))
        }
        "schema" => Ok(Answer {
            status: 200,
            body: raw_schema(def),
        }),
        "subjects" => {
            let mut names: Vec<&String> = uses().map(|(s, _)| s).collect();
            names.dedup();
            Ok(Answer::ok(json!(names)))
        }
        "versions" => Ok(Answer::ok(json!(uses()
            .map(|(s, n)| json!({"subject": s, "version": n}))
            .collect::<Vec<_>>()))),
        _ => Err(Answer::error(
            404,
            format!("HTTP 404 Not Found: no route for {}", req.path),
        )),
    }
}

fn compatibility(st: &State, s: &str, v: Option<&str>, req: &Request) -> Result<Answer, Answer> {
    let new = schema_of(st, req)?;
    let live = st.versions(s, false);
    let level = st.level(s);
    let against: Vec<i32> = match v {
        None => live.iter().map(|(_, v)| v.id).collect(),
        Some(v) if (v == "latest" || v == "-1") && level.ends_with("_TRANSITIVE") => {
            live.iter().map(|(_, v)| v.id).collect()
        }
        Some(v) => {
            if live.is_empty() && (v == "latest" || v == "-1") {
                // Nothing to be incompatible with.
                return Ok(Answer::ok(json!({"is_compatible": true})));
            }
            let n = version_number(st, s, v, false)?;
            vec![st.subjects[s][&n].id]
        }
    };
    // Against one version, a transitive level is its plain form.
    let level = if v.is_some() && against.len() == 1 {
        level.trim_end_matches("_TRANSITIVE")
    } else {
        level
    };
    let why = incompatibilities(st, level, &new, &against);
    let mut out = json!({"is_compatible": why.is_empty()});
    if req.flag("verbose") {
        out["messages"] = json!(why);
    }
    Ok(Answer::ok(out))
}

async fn delete_subject(
    shard: &Rc<Shard>,
    reg: &Registry,
    s: &str,
    req: &Request,
) -> Result<Answer, Answer> {
    let permanent = req.flag("permanent");
    let (changes, deleted) = {
        let st = reg.state.borrow();
        writable(&st, s)?;
        let all = st.versions(s, true);
        if all.is_empty() {
            return Err(subject_not_found(s));
        }
        let live: Vec<(i32, i32)> = all
            .iter()
            .filter(|(_, v)| !v.deleted)
            .map(|(n, v)| (*n, v.id))
            .collect();
        for (n, _) in &all {
            unreferenced(&st, s, *n)?;
        }
        if permanent {
            if !live.is_empty() {
                return Err(Answer::error(
                    40405,
                    format!("Subject '{s}' was not deleted first before being permanently deleted"),
                ));
            }
            let mut changes: Vec<Change> =
                all.iter().map(|(n, _)| (schema_key(s, *n), None)).collect();
            let sub = Some(s.to_string());
            if st.config.contains_key(&sub) {
                changes.push((
                    Key::Config {
                        subject: sub.clone(),
                        magic: 0,
                    },
                    None,
                ));
            }
            if st.mode.contains_key(&sub) {
                changes.push((
                    Key::Mode {
                        subject: sub,
                        magic: 0,
                    },
                    None,
                ));
            }
            (changes, all.iter().map(|(n, _)| *n).collect::<Vec<_>>())
        } else {
            if live.is_empty() {
                return Err(Answer::error(
                    40404,
                    format!(
                        "Subject '{s}' was soft deleted.Set permanent=true to delete permanently"
                    ),
                ));
            }
            let changes = live
                .iter()
                .map(|(n, id)| soft_deleted(&st, s, *n, *id))
                .collect();
            (changes, live.iter().map(|(n, _)| *n).collect())
        }
    };
    reg.write(shard, &changes).await?;
    Ok(Answer::ok(json!(deleted)))
}

/// The SCHEMA record of a version marked deleted.
fn soft_deleted(st: &State, s: &str, n: i32, id: i32) -> Change {
    let def = &st.schemas[&id];
    let value = SchemaValue {
        subject: s.to_string(),
        version: n,
        id,
        schema_type: def.kind,
        references: def.references.clone(),
        schema: def.text.clone(),
        deleted: true,
    };
    (
        schema_key(s, n),
        Some(serde_json::to_value(value).expect("a value encodes")),
    )
}

async fn delete_version(
    shard: &Rc<Shard>,
    reg: &Registry,
    s: &str,
    v: &str,
    req: &Request,
) -> Result<Answer, Answer> {
    let permanent = req.flag("permanent");
    let (change, n) = {
        let st = reg.state.borrow();
        writable(&st, s)?;
        let n = version_number(&st, s, v, permanent)?;
        let version = &st.subjects[s][&n];
        unreferenced(&st, s, n)?;
        if permanent {
            if !version.deleted {
                return Err(Answer::error(
                    40407,
                    format!("Subject '{s}' Version {n} was not deleted first before being permanently deleted"),
                ));
            }
            ((schema_key(s, n), None), n)
        } else {
            if version.deleted {
                return Err(Answer::error(
                    40406,
                    format!("Subject '{s}' Version {n} was soft deleted.Set permanent=true to delete permanently"),
                ));
            }
            (soft_deleted(&st, s, n, version.id), n)
        }
    };
    reg.write(shard, &[change]).await?;
    Ok(Answer::ok(json!(n)))
}

fn get_config(st: &State, s: Option<&str>, req: &Request) -> Result<Answer, Answer> {
    let level = match s {
        None => st
            .config
            .get(&None)
            .map_or(super::state::DEFAULT_LEVEL, String::as_str),
        Some(s) => match st.config.get(&Some(s.to_string())) {
            Some(l) => l.as_str(),
            None if req.flag("defaultToGlobal") => st.level(s),
            None => {
                return Err(Answer::error(
                    40408,
                    format!("Subject '{s}' does not have subject-level compatibility configured"),
                ))
            }
        },
    };
    Ok(Answer::ok(json!({"compatibilityLevel": level})))
}

fn get_mode(st: &State, s: &str, req: &Request) -> Result<Answer, Answer> {
    match st.mode.get(&Some(s.to_string())) {
        Some(m) => Ok(Answer::ok(json!({"mode": m}))),
        None if req.flag("defaultToGlobal") => Ok(Answer::ok(json!({"mode": st.mode_of(None)}))),
        None => Err(Answer::error(
            40409,
            format!("Subject '{s}' does not have subject-level mode configured"),
        )),
    }
}

#[derive(Clone, Copy)]
enum Setting {
    Config,
    Mode,
}

impl Setting {
    fn key(self, subject: Option<&str>) -> Key {
        let subject = subject.map(str::to_string);
        match self {
            Setting::Config => Key::Config { subject, magic: 0 },
            Setting::Mode => Key::Mode { subject, magic: 0 },
        }
    }
}

async fn put_setting(
    shard: &Rc<Shard>,
    reg: &Registry,
    s: Option<&str>,
    req: &Request,
    setting: Setting,
) -> Result<Answer, Answer> {
    let body: Value = serde_json::from_slice(&req.body).map_err(|e| {
        Answer::error(
            400,
            format!("Unrecognized field or malformed JSON in the request body: {e}"),
        )
    })?;
    let (field, allowed, code, value_field) = match setting {
        Setting::Config => ("compatibility", LEVELS, 42203, "compatibilityLevel"),
        Setting::Mode => ("mode", MODES, 42204, "mode"),
    };
    let value = body
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_ascii_uppercase)
        .filter(|v| allowed.contains(&v.as_str()))
        .ok_or_else(|| {
            Answer::error(
                code,
                format!(
                    "Invalid {field} {}: one of {}",
                    body.get(field).map_or("(none)".into(), |v| v.to_string()),
                    allowed.join(", ")
                ),
            )
        })?;
    if let (Setting::Config, Some(s)) = (setting, s) {
        if matches!(reg.state.borrow().mode_of(Some(s)), "READONLY") {
            return Err(read_only(s));
        }
    }
    reg.write(
        shard,
        &[(setting.key(s), Some(json!({value_field: value})))],
    )
    .await?;
    Ok(Answer::ok(json!({field: value})))
}

async fn delete_setting(
    shard: &Rc<Shard>,
    reg: &Registry,
    s: Option<&str>,
    setting: Setting,
) -> Result<Answer, Answer> {
    let key = s.map(str::to_string);
    let (previous, answer_field) = {
        let st = reg.state.borrow();
        if let Some(s) = s {
            if !st.subjects.contains_key(s) {
                return Err(subject_not_found(s));
            }
        }
        match setting {
            Setting::Config => (
                st.config
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| st.level(s.unwrap_or("")).to_string()),
                "compatibilityLevel",
            ),
            Setting::Mode => (
                st.mode
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| st.mode_of(None).to_string()),
                "mode",
            ),
        }
    };
    reg.write(shard, &[(setting.key(s), None)]).await?;
    Ok(Answer::ok(json!({answer_field: previous})))
}
