//! FindCoordinator (key 10): each group and transactional id belongs to one
//! shard. The answer is this node (requests are carried to that shard
//! inside), or with `--shard-ports` that shard's own broker, so the
//! client's group traffic needs no hop; in a cluster, the node the key
//! hashes to.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use weir_core::ErrorCode;

use weir_core::auth::acl::{Operation, ResourceType};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 6;

/// How long a lookup waits for a leaderless coordinator slot to get a
/// leader (an election takes under 2 s) before it answers
/// COORDINATOR_NOT_AVAILABLE; well under every client's request timeout
/// (librdkafka 60 s, Java 30 s, franz-go 10 s).
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Key types: 0 a group, 1 a transactional id.
fn check_key_type(key_type: i8) -> Result<(), (i16, StrBytes)> {
    match key_type {
        0 | 1 => Ok(()),
        other => Err((
            ErrorCode::InvalidRequest.code(),
            str(&format!(
                "key type {other} is not a group (0) or a transaction (1)"
            )),
        )),
    }
}

pub async fn handle(cx: &RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let key_type = req.key_type;
    let checked = check_key_type(key_type);
    // DESCRIBE on the group or transactional id the key names.
    let refused = |key: &str| -> Option<(i16, StrBytes)> {
        let (resource, code) = match key_type {
            1 => (
                ResourceType::TransactionalId,
                ErrorCode::TransactionalIdAuthorizationFailed,
            ),
            _ => (ResourceType::Group, ErrorCode::GroupAuthorizationFailed),
        };
        (!caller.may(shard, Operation::Describe, resource, key)).then(|| {
            let why = format!("{} may not describe {key:?}", caller.principal);
            (code.code(), str(&why))
        })
    };
    if let Err(e) = shard.place_group_coordinators().await {
        log::warn!("placing the cluster's group coordinators: {e}");
    }
    // Only for keys the caller may look up: a refusal is answered at once.
    if checked.is_ok() {
        let keys: Vec<&str> = match version {
            4.. => req.coordinator_keys.iter(),
            _ => std::slice::from_ref(&req.key).iter(),
        }
        .map(|k| k.as_str())
        .filter(|k| refused(k).is_none())
        .collect();
        shard.coordinators_known(&keys, LEADER_WAIT).await;
    }
    let coordinator = |key: &str| {
        shard
            .coordinator(key)
            .map(|b| (BrokerId(b.id), str(&b.host), b.port as i32))
            .map_err(|e| (e.code.code(), str(&e.message)))
    };
    if version >= 4 {
        FindCoordinatorResponse::default().with_coordinators(
            req.coordinator_keys
                .into_iter()
                .map(|k| {
                    match checked
                        .clone()
                        .and_then(|()| refused(&k).map_or(Ok(()), Err))
                        .and_then(|()| coordinator(&k))
                    {
                        Ok((node, host, port)) => Coordinator::default()
                            .with_key(k)
                            .with_node_id(node)
                            .with_host(host)
                            .with_port(port),
                        Err((code, why)) => Coordinator::default()
                            .with_key(k)
                            .with_node_id(BrokerId(-1))
                            .with_host(str(""))
                            .with_port(-1)
                            .with_error_code(code)
                            .with_error_message(Some(why)),
                    }
                })
                .collect(),
        )
    } else {
        let r = FindCoordinatorResponse::default();
        match checked
            .and_then(|()| refused(&req.key).map_or(Ok(()), Err))
            .and_then(|()| coordinator(&req.key))
        {
            Ok((node, host, port)) => r.with_node_id(node).with_host(host).with_port(port),
            Err((code, why)) => r
                .with_error_code(code)
                .with_error_message(Some(why))
                .with_node_id(BrokerId(-1))
                .with_host(str(""))
                .with_port(-1),
        }
    }
}
