//! The registry's reads: subjects, versions, schemas by id, lookups,
//! compatibility checks, configs and modes (Confluent's answers).

use super::*;

pub(super) fn list_subjects(st: &State, req: &Request) -> Answer {
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

pub(super) fn list_versions(st: &State, s: &str, req: &Request) -> Result<Answer, Answer> {
    let vs = st.versions(s, req.flag("deleted"));
    if vs.is_empty() {
        return Err(subject_not_found(s));
    }
    Ok(Answer::ok(json!(vs
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>())))
}

/// A version's answer, and its schema alone (for `/schema`).
pub(super) fn get_version(
    st: &State,
    s: &str,
    v: &str,
    req: &Request,
) -> Result<(Answer, Answer), Answer> {
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

pub(super) fn referenced_by(st: &State, s: &str, v: &str, req: &Request) -> Result<Answer, Answer> {
    let n = version_number(st, s, v, req.flag("deleted"))?;
    Ok(Answer::ok(json!(st.referenced_by(s, n))))
}

pub(super) fn lookup(st: &State, s: &str, req: &Request) -> Result<Answer, Answer> {
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

pub(super) fn by_id(st: &State, id: &str, what: &str, req: &Request) -> Result<Answer, Answer> {
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

pub(super) fn compatibility(
    st: &State,
    s: &str,
    v: Option<&str>,
    req: &Request,
) -> Result<Answer, Answer> {
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

pub(super) fn get_config(st: &State, s: Option<&str>, req: &Request) -> Result<Answer, Answer> {
    let level = match s {
        None => st
            .config
            .get(&None)
            .map_or(crate::registry::state::DEFAULT_LEVEL, String::as_str),
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

pub(super) fn get_mode(st: &State, s: &str, req: &Request) -> Result<Answer, Answer> {
    match st.mode.get(&Some(s.to_string())) {
        Some(m) => Ok(Answer::ok(json!({"mode": m}))),
        None if req.flag("defaultToGlobal") => Ok(Answer::ok(json!({"mode": st.mode_of(None)}))),
        None => Err(Answer::error(
            40409,
            format!("Subject '{s}' does not have subject-level mode configured"),
        )),
    }
}
