//! OffsetFetch (key 9): a group's committed offsets (-1 where none); from
//! v8 several groups at once, each asked of the shard coordinating it.
//! With `require_stable` (v7+), a partition with an offset pending in a
//! transaction answers UNSTABLE_OFFSET_COMMIT (the client retries); else
//! the last committed offset is answered.

use std::rc::Rc;

use futures::future::join_all;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};
use weir_core::groups::{OffsetAnswer, OffsetQuery};
use weir_core::{ErrorCode, KafkaError, Shard, TopicPartition, TopicPartitionRef};

use weir_core::auth::acl::{Operation, ResourceType};

use super::{str, Caller, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 9;

/// Partitions with an offset pending in a transaction.
type Unstable = std::collections::HashSet<TopicPartition>;

async fn committed(
    shard: &Rc<Shard>,
    caller: &Caller,
    group: String,
    query: OffsetQuery,
    require_stable: bool,
) -> Result<(OffsetAnswer, Unstable), KafkaError> {
    if !caller.may(shard, Operation::Describe, ResourceType::Group, &group) {
        return Err(KafkaError::new(
            ErrorCode::GroupAuthorizationFailed,
            format!("{} may not describe group {group:?}", caller.principal),
        ));
    }
    let g = group.clone();
    shard
        .on_group(&group, move |s| async move {
            let unstable = match require_stable {
                true => s.groups.pending_partitions(&g),
                false => Unstable::default(),
            };
            (s.groups.committed(&g, query), unstable)
        })
        .await
}

const UNSTABLE: i16 = ErrorCode::UnstableOffsetCommit as i16;

/// (offset, leader epoch, metadata) of one answer.
fn parts(c: Option<weir_core::groups::store::Committed>) -> (i64, i32, String) {
    match c {
        Some(c) => (c.offset, c.leader_epoch, c.metadata),
        None => (-1, -1, String::new()),
    }
}

pub async fn handle(cx: &RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse {
    if cx.version >= 8 {
        return grouped(cx, req).await;
    }
    let query = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let stable = cx.version >= 7 && req.require_stable;
    let group = req.group_id.0.to_string();
    let (answer, unstable, code) =
        match committed(&cx.shard, &cx.caller, group, query, stable).await {
            Ok((a, u)) => (a, u, ErrorCode::None),
            Err(e) => (Vec::new(), Unstable::default(), e.code),
        };
    let topics = answer
        .into_iter()
        .map(|(topic, ps)| {
            let partitions = ps
                .into_iter()
                .map(|(p, c)| {
                    let (offset, epoch, meta) = parts(c);
                    let mut part = OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_metadata(Some(str(&meta)));
                    if is_unstable(&unstable, &topic, p) {
                        part = part.with_committed_offset(-1).with_error_code(UNSTABLE);
                    }
                    if cx.version >= 5 {
                        part.with_committed_leader_epoch(epoch)
                    } else {
                        part
                    }
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str(&topic)))
                .with_partitions(partitions)
        })
        .collect();
    let resp = OffsetFetchResponse::default().with_topics(topics);
    if cx.version >= 2 {
        resp.with_error_code(code.code())
    } else {
        resp
    }
}

/// Whether `topic`-`p` has a transactional commit pending (answered
/// UNSTABLE_OFFSET_COMMIT when the request requires stable offsets).
fn is_unstable(unstable: &Unstable, topic: &str, p: i32) -> bool {
    unstable.contains(&(topic, p) as &dyn TopicPartitionRef)
}

/// v8 and later: several groups in one request, each answered apart.
async fn grouped(cx: &RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let (shard, caller) = (&cx.shard, &cx.caller);
    let asks = req.groups.into_iter().map(|g| {
        let query = g.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes))
                .collect()
        });
        let id = g.group_id;
        async move {
            let answer = committed(shard, caller, id.0.to_string(), query, req.require_stable);
            (id.clone(), answer.await)
        }
    });
    let groups = join_all(asks)
        .await
        .into_iter()
        .map(|(id, r)| match r {
            Ok((answer, unstable)) => OffsetFetchResponseGroup::default()
                .with_group_id(id)
                .with_topics(group_topics(answer, &unstable)),
            Err(e) => OffsetFetchResponseGroup::default()
                .with_group_id(id)
                .with_error_code(e.code.code()),
        })
        .collect();
    OffsetFetchResponse::default().with_groups(groups)
}

/// One group's committed offsets as v8 answers them.
fn group_topics(answer: OffsetAnswer, unstable: &Unstable) -> Vec<OffsetFetchResponseTopics> {
    answer
        .into_iter()
        .map(|(topic, ps)| {
            let partitions = ps
                .into_iter()
                .map(|(p, c)| {
                    let (offset, epoch, meta) = parts(c);
                    let part = OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(str(&meta)));
                    if is_unstable(unstable, &topic, p) {
                        part.with_committed_offset(-1).with_error_code(UNSTABLE)
                    } else {
                        part
                    }
                })
                .collect();
            OffsetFetchResponseTopics::default()
                .with_name(TopicName(str(&topic)))
                .with_partitions(partitions)
        })
        .collect()
}
