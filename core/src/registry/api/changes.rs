//! The registry's changes, each written to `_schemas` before it is
//! answered: registering, deleting subjects and versions (soft, then
//! hard), configs and modes.

use super::*;

pub(super) async fn register(
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

pub(super) async fn delete_subject(
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
pub(super) fn soft_deleted(st: &State, s: &str, n: i32, id: i32) -> Change {
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

pub(super) async fn delete_version(
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

#[derive(Clone, Copy)]
pub(super) enum Setting {
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

pub(super) async fn put_setting(
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

pub(super) async fn delete_setting(
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
