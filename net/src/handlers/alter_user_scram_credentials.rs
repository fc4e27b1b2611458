//! AlterUserScramCredentials (key 51): sets or deletes users' SCRAM
//! credentials from salted passwords (the client runs the PBKDF2, as
//! Kafka's admin clients do); a user that does not exist is made, with
//! SCRAM only. Durable before the answer. Needs ALTER on the cluster.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::auth::users::{ScramHash, ScramVerifier, User};
use weir_core::auth::Role;
use weir_core::{ErrorCode, KafkaError};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

/// Kafka's bounds on a credential's iteration count.
const MIN_ITERATIONS: i32 = 4096;
const MAX_ITERATIONS: i32 = 16384;

/// One user's changes.
#[derive(Clone, Default)]
struct Changes {
    set: Vec<(ScramHash, ScramVerifier)>,
    delete: Vec<ScramHash>,
}

/// What the request asks, checked: each user in order of first mention,
/// why a user's changes are refused, and the changes of every user.
#[derive(Default)]
struct Asked {
    order: Vec<String>,
    refused: HashMap<String, (ErrorCode, String)>,
    changes: BTreeMap<String, Changes>,
    mentioned: HashMap<(String, i8), usize>,
}

impl Asked {
    /// Notes a mention of `name` with `mech`; the same mechanism twice for
    /// one user refuses the user's changes.
    fn note(&mut self, name: &str, mech: i8) {
        if !self.order.iter().any(|n| n == name) {
            self.order.push(name.to_string());
        }
        let n = self.mentioned.entry((name.to_string(), mech)).or_default();
        *n += 1;
        if *n > 1 {
            self.refused.insert(
                name.to_string(),
                (
                    ErrorCode::DuplicateResource,
                    format!("{name}: a mechanism twice"),
                ),
            );
        }
    }

    fn refuse(&mut self, name: String, code: ErrorCode, why: String) {
        self.refused.insert(name, (code, why));
    }
}

pub async fn handle(
    cx: &RequestContext,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let (shard, caller) = (&cx.shard, &cx.caller);
    let result = |user: &str, code: ErrorCode, why: &str| {
        let r = AlterUserScramCredentialsResult::default().with_user(str(user));
        match code {
            ErrorCode::None => r,
            _ => r
                .with_error_code(code.code())
                .with_error_message(Some(str(why))),
        }
    };
    if !caller.may(shard, Operation::Alter, ResourceType::Cluster, CLUSTER) {
        let why = format!("{} may not alter credentials", caller.principal);
        let names = req
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string()));
        let mut seen = std::collections::HashSet::new();
        let results = names
            .filter(|n| seen.insert(n.to_string()))
            .map(|n| result(&n, ErrorCode::ClusterAuthorizationFailed, &why))
            .collect();
        return AlterUserScramCredentialsResponse::default().with_results(results);
    }
    let asked = check(cx, &req);
    let apply: BTreeMap<String, Changes> = asked
        .changes
        .into_iter()
        .filter(|(n, _)| !asked.refused.contains_key(n))
        .collect();
    let applied = shard
        .change_access(move |cat| Ok::<_, KafkaError>(apply_to(cat, apply)))
        .await;
    let results = asked
        .order
        .iter()
        .map(|name| {
            if let Some((code, why)) = asked.refused.get(name) {
                return result(name, *code, why);
            }
            match &applied {
                Err(e) => result(name, e.code, &e.message),
                Ok(missing) if missing.contains(name) => result(
                    name,
                    ErrorCode::ResourceNotFound,
                    &format!("attempt to delete a user credential that does not exist: {name}"),
                ),
                Ok(_) => result(name, ErrorCode::None, ""),
            }
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Each deletion and upsertion checked, as Kafka checks them.
fn check(cx: &RequestContext, req: &AlterUserScramCredentialsRequest) -> Asked {
    let mut asked = Asked::default();
    for d in &req.deletions {
        let name = d.name.to_string();
        asked.note(&name, d.mechanism);
        match ScramHash::from_code(d.mechanism) {
            Some(h) => asked.changes.entry(name).or_default().delete.push(h),
            None => {
                let why = format!("unknown SCRAM mechanism {}", d.mechanism);
                asked.refuse(name, ErrorCode::UnsupportedSaslMechanism, why);
            }
        }
    }
    for u in &req.upsertions {
        let name = u.name.to_string();
        asked.note(&name, u.mechanism);
        let Some(h) = ScramHash::from_code(u.mechanism) else {
            let why = format!("unknown SCRAM mechanism {}", u.mechanism);
            asked.refuse(name, ErrorCode::UnsupportedSaslMechanism, why);
            continue;
        };
        if let Some(why) = unacceptable(cx, &name, u.iterations) {
            asked.refuse(name, ErrorCode::UnacceptableCredential, why);
            continue;
        }
        let v = ScramVerifier::from_salted(h, &u.salt, u.iterations as u32, &u.salted_password);
        asked.changes.entry(name).or_default().set.push((h, v));
    }
    asked
}

/// Why an upsertion for `name` with `iterations` is not acceptable, if it
/// is not.
fn unacceptable(cx: &RequestContext, name: &str, iterations: i32) -> Option<String> {
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Some(format!(
            "{iterations} iterations: between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
        ));
    }
    if !cx.shard.config.role_tokens.any() {
        return Some(
            "set an admin token before making users: once a user exists, only the \
             admin role manages them"
                .to_string(),
        );
    }
    if Role::from_name(name).is_some() || name.is_empty() {
        return Some(format!("{name:?} is not a name a user may have"));
    }
    None
}

/// Applies the users' changes to the catalog; answers the users asked to
/// lose a credential who do not exist.
fn apply_to(
    cat: &mut weir_core::catalog::Catalog,
    apply: BTreeMap<String, Changes>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for (name, c) in apply {
        if !c.delete.is_empty() && c.set.is_empty() && !cat.users.contains_key(&name) {
            missing.push(name);
            continue;
        }
        let user = cat.users.entry(name.clone()).or_insert_with(|| User {
            name: name.clone(),
            password_hash: None,
            scram_sha_256: None,
            scram_sha_512: None,
            tokens: Vec::new(),
        });
        for h in c.delete {
            *user.scram_mut(h) = None;
        }
        for (h, v) in c.set {
            *user.scram_mut(h) = Some(v);
        }
        if user.is_empty() {
            cat.users.remove(&name);
        }
    }
    missing
}
