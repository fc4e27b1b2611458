//! AlterClientQuotas (key 49): sets and removes quotas of users, client
//! ids and IPs, each entity's changes all or none, checked as Kafka's
//! `ClientQuotaControlManager` checks them; durable before the answer.
//! Needs ALTER_CONFIGS on the cluster.

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::quota::{Entity, Ops};
use weir_core::{ErrorCode, KafkaError};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

/// One entry of the request: the entity as sent, and what it asks
/// (checked) or why it is refused.
type Asked = (Vec<EntityData>, Result<(Entity, Ops), KafkaError>);

pub async fn handle(
    cx: &RequestContext,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let asked: Vec<Asked> = req
        .entries
        .iter()
        .map(|e| {
            let sent = e
                .entity
                .iter()
                .map(|p| {
                    EntityData::default()
                        .with_entity_type(p.entity_type.clone())
                        .with_entity_name(p.entity_name.clone())
                })
                .collect();
            (sent, check(e))
        })
        .collect();
    let allowed = cx.caller.may(
        &cx.shard,
        Operation::AlterConfigs,
        ResourceType::Cluster,
        CLUSTER,
    );
    let denied = KafkaError::new(
        ErrorCode::ClusterAuthorizationFailed,
        format!("{} may not alter client quotas", cx.caller.principal),
    );
    let changes: Vec<_> = asked
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok().cloned())
        .collect();
    let applied = match allowed {
        false => Err(denied),
        true => Ok(cx.shard.alter_quotas(changes, req.validate_only).await),
    };
    let mut applied = applied.map(|r| r.into_iter());
    let entries = asked
        .into_iter()
        .map(|(sent, a)| {
            let outcome = match (a, &mut applied) {
                (Err(e), _) => Err(e),
                (Ok(_), Err(e)) => Err(e.clone()),
                (Ok(_), Ok(results)) => results.next().unwrap_or(Ok(())),
            };
            let entry = EntryData::default().with_entity(sent);
            match outcome {
                Ok(()) => entry,
                Err(e) => entry
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str(&e.message))),
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// One entry's entity and operations, checked before anything is changed.
fn check(
    e: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
) -> Result<(Entity, Ops), KafkaError> {
    let entity = Entity::parse(
        e.entity
            .iter()
            .map(|p| (p.entity_type.as_str(), p.entity_name.as_deref())),
    )?;
    let ops: Ops = e
        .ops
        .iter()
        .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
        .collect();
    for (i, (key, _)) in ops.iter().enumerate() {
        if ops[..i].iter().any(|(k, _)| k == key) {
            return Err(KafkaError::new(
                ErrorCode::InvalidRequest,
                format!("Duplicate quota key {key} not updating quota for entity {entity:?}"),
            ));
        }
    }
    Ok((entity, ops))
}
