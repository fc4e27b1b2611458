//! OffsetForLeaderEpoch (key 23): where a leader epoch ended in a
//! partition's log (`weir_core::leader_epoch`), so a consumer can tell
//! whether what it read was truncated since (KIP-320). Authorized as
//! Kafka's: CLUSTER_ACTION (a replica's right) covers every topic, else
//! DESCRIBE on each topic.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::ByPartition;

use super::{denied_topic, RequestContext};

pub const MIN: i16 = 2;
pub const MAX: i16 = 4;

pub async fn handle(
    cx: &RequestContext,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let replica_rights = caller.may(
        shard,
        Operation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER,
    );
    let mut by = ByPartition::new();
    for t in req.topics {
        let name = t.topic.0.to_string();
        let allowed =
            replica_rights || caller.may(shard, Operation::Describe, ResourceType::Topic, &name);
        by.topic(t.topic, name.clone());
        for p in t.partitions {
            let asked = match allowed {
                true => Ok((p.current_leader_epoch, p.leader_epoch)),
                false => Err(denied_topic(caller, "describe", &name)),
            };
            by.partition(p.partition, asked);
        }
    }
    let results = shard.offsets_for_leader_epoch(by.work()).await;
    let topics = by
        .answers(results)
        .into_iter()
        .map(|(topic, parts)| {
            OffsetForLeaderTopicResult::default()
                .with_topic(topic)
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(partition, r)| {
                            let p = EpochEndOffset::default().with_partition(partition);
                            match r {
                                Ok((epoch, end)) => p.with_leader_epoch(epoch).with_end_offset(end),
                                Err(e) => p
                                    .with_error_code(e.code.code())
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1),
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
