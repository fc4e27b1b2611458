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
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    if version >= 8 {
        let asks = req.groups.into_iter().map(|g| {
            let query = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            let id = g.group_id;
            async move {
                (
                    id.clone(),
                    committed(shard, caller, id.0.to_string(), query, req.require_stable).await,
                )
            }
        });
        let groups = join_all(asks)
            .await
            .into_iter()
            .map(|(id, r)| match r {
                Ok((answer, unstable)) => OffsetFetchResponseGroup::default()
                    .with_group_id(id)
                    .with_topics(
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
                                        if unstable.contains(
                                                &(topic.as_str(), p) as &dyn TopicPartitionRef
                                            ) {
                                                part.with_committed_offset(-1)
                                                    .with_error_code(UNSTABLE)
                                            } else {
                                                part
                                            }
                                    })
                                    .collect();
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(str(&topic)))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    ),
                Err(e) => OffsetFetchResponseGroup::default()
                    .with_group_id(id)
                    .with_error_code(e.code.code()),
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let query = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let stable = version >= 7 && req.require_stable;
    let group = req.group_id.0.to_string();
    let (answer, unstable, code) = match committed(shard, caller, group, query, stable).await {
        Ok((a, u)) => (a, u, ErrorCode::None),
        Err(e) => (Vec::new(), Unstable::default(), e.code),
    };
    let mut resp = OffsetFetchResponse::default().with_topics(
        answer
            .into_iter()
            .map(|(topic, ps)| {
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(str(&topic)))
                    .with_partitions(
                        ps.into_iter()
                            .map(|(p, c)| {
                                let (offset, epoch, meta) = parts(c);
                                let mut part = OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(offset)
                                    .with_metadata(Some(str(&meta)));
                                if unstable.contains(&(topic.as_str(), p) as &dyn TopicPartitionRef)
                                {
                                    part = part.with_committed_offset(-1).with_error_code(UNSTABLE);
                                }
                                if version >= 5 {
                                    part.with_committed_leader_epoch(epoch)
                                } else {
                                    part
                                }
                            })
                            .collect(),
                    )
            })
            .collect(),
    );
    if version >= 2 {
        resp = resp.with_error_code(code.code());
    }
    resp
}
