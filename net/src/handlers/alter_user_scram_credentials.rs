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

pub async fn handle(
    cx: &RequestContext,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let names: Vec<String> = req
        .deletions
        .iter()
        .map(|d| d.name.to_string())
        .chain(req.upsertions.iter().map(|u| u.name.to_string()))
        .collect();
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
        let mut seen = std::collections::HashSet::new();
        let results = names
            .iter()
            .filter(|n| seen.insert(n.to_string()))
            .map(|n| result(n, ErrorCode::ClusterAuthorizationFailed, &why))
            .collect();
        return AlterUserScramCredentialsResponse::default().with_results(results);
    }
    // Per user, in order of first mention: its changes or why not.
    let mut order: Vec<String> = Vec::new();
    let mut refused: HashMap<String, (ErrorCode, String)> = HashMap::new();
    let mut changes: BTreeMap<String, Changes> = BTreeMap::new();
    let mut mentioned: HashMap<(String, i8), usize> = HashMap::new();
    let mut note = |name: &str, mech: i8| {
        if !order.iter().any(|n| n == name) {
            order.push(name.to_string());
        }
        let n = mentioned.entry((name.to_string(), mech)).or_default();
        *n += 1;
        *n
    };
    for d in &req.deletions {
        let name = d.name.to_string();
        if note(&name, d.mechanism) > 1 {
            refused.insert(
                name.clone(),
                (
                    ErrorCode::DuplicateResource,
                    format!("{name}: a mechanism twice"),
                ),
            );
        }
        match ScramHash::from_code(d.mechanism) {
            Some(h) => changes.entry(name).or_default().delete.push(h),
            None => {
                let why = format!("unknown SCRAM mechanism {}", d.mechanism);
                refused.insert(name, (ErrorCode::UnsupportedSaslMechanism, why));
            }
        }
    }
    for u in &req.upsertions {
        let name = u.name.to_string();
        if note(&name, u.mechanism) > 1 {
            refused.insert(
                name.clone(),
                (
                    ErrorCode::DuplicateResource,
                    format!("{name}: a mechanism twice"),
                ),
            );
        }
        let Some(h) = ScramHash::from_code(u.mechanism) else {
            let why = format!("unknown SCRAM mechanism {}", u.mechanism);
            refused.insert(name, (ErrorCode::UnsupportedSaslMechanism, why));
            continue;
        };
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&u.iterations) {
            let why = format!(
                "{} iterations: between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
                u.iterations
            );
            refused.insert(name, (ErrorCode::UnacceptableCredential, why));
            continue;
        }
        if !shard.config.role_tokens.any() {
            let why = "set an admin token before making users: once a user exists, only the \
                       admin role manages them"
                .to_string();
            refused.insert(name, (ErrorCode::UnacceptableCredential, why));
            continue;
        }
        if Role::from_name(&name).is_some() || name.is_empty() {
            let why = format!("{name:?} is not a name a user may have");
            refused.insert(name, (ErrorCode::UnacceptableCredential, why));
            continue;
        }
        let v = ScramVerifier::from_salted(h, &u.salt, u.iterations as u32, &u.salted_password);
        changes.entry(name).or_default().set.push((h, v));
    }
    let apply: BTreeMap<String, Changes> = changes
        .into_iter()
        .filter(|(n, _)| !refused.contains_key(n))
        .collect();
    let applied = shard
        .change_access(move |cat| {
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
            Ok::<_, KafkaError>(missing)
        })
        .await;
    let results = order
        .iter()
        .map(|name| {
            if let Some((code, why)) = refused.get(name) {
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
