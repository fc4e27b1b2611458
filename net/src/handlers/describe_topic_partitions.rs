//! DescribeTopicPartitions (key 75, KIP-966): topics and their partitions
//! as Metadata tells them, paged. Kafka 4.x's Admin `describeTopics` and
//! `kafka-topics.sh --describe` send it rather than Metadata. As Kafka's
//! `DescribeTopicPartitionsRequestHandler`: the topics asked for (none:
//! every topic the caller may describe) in name order from the cursor's
//! topic and partition, at most `response_partition_limit` partitions
//! (and never more than `MAX_PARTITIONS_PER_RESPONSE`), `next_cursor`
//! naming the first partition left out.

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::catalog::TopicMeta;
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

/// Kafka's `max.request.partition.size.limit` default: the most partitions
/// one answer holds, whatever the request asks.
pub const MAX_PARTITIONS_PER_RESPONSE: i32 = 2000;

pub async fn handle(
    cx: &RequestContext,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let shard = &cx.shard;
    let catalog = shard.catalog();
    let may = |name: &str| {
        cx.caller
            .may(shard, Operation::Describe, ResourceType::Topic, name)
    };
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (c.topic_name.0.to_string(), c.partition_index),
        None => (String::new(), 0),
    };
    let every_topic = req.topics.is_empty();
    let mut out = DescribeTopicPartitionsResponse::default();
    if cursor_partition < 0 {
        return invalid(
            &req,
            &format!("cursor partition {cursor_partition} is negative"),
        );
    }
    let mut names: Vec<String> = match every_topic {
        true => catalog.topics.keys().cloned().collect(),
        false => req.topics.iter().map(|t| t.name.0.to_string()).collect(),
    };
    names.retain(|n| *n >= cursor_topic);
    names.sort_unstable();
    names.dedup();
    if req.cursor.is_some() && !every_topic && !names.contains(&cursor_topic) {
        let why = format!(
            "DescribeTopicPartitionsRequest topic list should contain the cursor topic: {cursor_topic}"
        );
        return invalid(&req, &why);
    }
    let mut refused = Vec::new();
    let mut remaining = req
        .response_partition_limit
        .clamp(1, MAX_PARTITIONS_PER_RESPONSE);
    let mut topics = Vec::new();
    for name in names {
        if !may(&name) {
            // Asked for by name: refused without telling whether it
            // exists; when listing every topic, left out.
            if !every_topic {
                refused.push(topic_error(&name, ErrorCode::TopicAuthorizationFailed));
            }
            continue;
        }
        if remaining == 0 {
            out.next_cursor = Some(cursor(&name, 0));
            break;
        }
        let Some(t) = catalog.topic(&name) else {
            if !every_topic {
                let code = match weir_core::catalog::validate_topic_name(&name) {
                    Ok(()) => ErrorCode::UnknownTopicOrPartition,
                    Err(_) => ErrorCode::InvalidTopicException,
                };
                topics.push(topic_error(&name, code));
            }
            continue;
        };
        let first = match name == cursor_topic {
            true => cursor_partition,
            false => 0,
        };
        let end = t.partitions().min(first.saturating_add(remaining));
        let partitions: Vec<_> = (first..end).map(|p| partition(shard, t, p)).collect();
        remaining -= partitions.len() as i32;
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(str(&name))))
                .with_topic_id(uuid::Uuid::from_bytes(t.id))
                .with_is_internal(name == weir_core::catalog::GROUPS_TOPIC)
                .with_partitions(partitions),
        );
        if end < t.partitions() {
            out.next_cursor = Some(cursor(&name, end));
            break;
        }
    }
    topics.extend(refused);
    out.with_topics(topics)
}

/// Kafka refuses the whole call with INVALID_REQUEST; the answer has no
/// top-level error, so every topic asked for carries it.
fn invalid(req: &DescribeTopicPartitionsRequest, why: &str) -> DescribeTopicPartitionsResponse {
    log::info!("DescribeTopicPartitions refused: {why}");
    DescribeTopicPartitionsResponse::default().with_topics(
        req.topics
            .iter()
            .map(|t| topic_error(&t.name, ErrorCode::InvalidRequest))
            .collect(),
    )
}

fn cursor(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(TopicName(str(topic)))
        .with_partition_index(partition)
}

fn topic_error(name: &str, code: ErrorCode) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(code.code())
        .with_name(Some(TopicName(str(name))))
}

/// One partition as Metadata tells it (`Shard::partition_view`); without a
/// live leader, LEADER_NOT_AVAILABLE. weir keeps no eligible leader
/// replicas (KIP-966's ELR): both lists are empty.
fn partition(
    shard: &weir_core::shard::Shard,
    t: &TopicMeta,
    p: i32,
) -> DescribeTopicPartitionsResponsePartition {
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
    let v = shard.partition_view(t, p);
    let out = DescribeTopicPartitionsResponsePartition::default()
        .with_partition_index(p)
        .with_leader_id(BrokerId(v.leader.unwrap_or(-1)))
        .with_leader_epoch(v.leader_epoch)
        .with_replica_nodes(ids(v.replicas))
        .with_isr_nodes(ids(v.isr))
        .with_eligible_leader_replicas(Some(Vec::new()))
        .with_last_known_elr(Some(Vec::new()))
        .with_offline_replicas(ids(v.offline));
    match v.leader {
        Some(_) => out,
        None => out.with_error_code(ErrorCode::LeaderNotAvailable.code()),
    }
}
