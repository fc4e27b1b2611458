//! ConsumerGroupHeartbeat (key 68, KIP-848): a member of a consumer group
//! of the new protocol joins, heartbeats, reports what it owns and leaves;
//! the coordinator answers its epoch and, when it changed, the partitions
//! it should own (by topic id). The group's state machine is
//! `weir_core::groups::consumer`. v1 lets the client choose its member id
//! and subscribe with a regular expression (matched against whole topic
//! names; an invalid one is INVALID_REGULAR_EXPRESSION).

use std::collections::BTreeSet;

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::groups::consumer::Heartbeat;
use weir_core::{ErrorCode, TopicPartition};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

pub async fn handle(
    cx: &RequestContext,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let shard = &cx.shard;
    let client_id = cx.client_id();
    let caller = &cx.caller;
    let refuse = |code: ErrorCode, message: String| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code.code())
            .with_error_message(Some(str(&message)))
            .with_member_epoch(-1)
    };
    let group = req.group_id.0.to_string();
    if !caller.may(shard, Operation::Read, ResourceType::Group, &group) {
        let why = format!("{} may not read group {group:?}", caller.principal);
        return refuse(ErrorCode::GroupAuthorizationFailed, why);
    }
    let catalog = shard.catalog();
    // Owned partitions come by topic id; a topic deleted meanwhile is
    // simply not owned any more.
    let owned = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|t| catalog.topic_by_id(t.topic_id.as_bytes()).map(|m| (m, t)))
            .flat_map(|(m, t)| {
                let name: std::sync::Arc<str> = m.name.as_str().into();
                t.partitions
                    .iter()
                    .map(move |p| TopicPartition::new(name.clone(), *p))
            })
            .collect::<BTreeSet<_>>()
    });
    let hb = Heartbeat {
        member_id: req.member_id.to_string(),
        epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed: req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
        regex: req.subscribed_topic_regex.as_ref().map(|r| r.to_string()),
        assignor: req
            .server_assignor
            .as_ref()
            .map(|s| s.to_string())
            .filter(|s| !s.is_empty()),
        owned,
        client_id,
        client_host: caller.host.to_string(),
    };
    let interval = shard.config.groups.consumer_heartbeat_interval.as_millis() as i32;
    let g = group.clone();
    let answer = shard
        .on_group(&group, move |s| async move {
            let catalog = s.catalog();
            s.groups.consumer_heartbeat(&g, hb, &catalog).await
        })
        .await;
    let answer = match answer {
        Ok(Ok(a)) => a,
        Ok(Err((code, message))) => return refuse(code, message),
        Err(e) => return refuse(e.code, e.message),
    };
    let catalog = shard.catalog();
    let assignment = answer.assignment.map(|tps| {
        let mut topics: Vec<TopicPartitions> = Vec::new();
        for TopicPartition {
            topic,
            partition: p,
        } in tps
        {
            let Some(meta) = catalog.topic(&topic) else {
                continue;
            };
            let id = uuid::Uuid::from_bytes(meta.id);
            match topics.last_mut() {
                Some(t) if t.topic_id == id => t.partitions.push(p),
                _ => topics.push(
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(vec![p]),
                ),
            }
        }
        Assignment::default().with_topic_partitions(topics)
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(str(&answer.member_id)))
        .with_member_epoch(answer.epoch)
        .with_heartbeat_interval_ms(interval)
        .with_assignment(assignment)
}
