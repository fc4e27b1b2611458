//! OffsetCommit (key 8): written to the group log and fsynced before the
//! answer. A commit may move an offset either way (rewinding a group is a
//! normal operation); one from a stale generation is refused.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::groups::OffsetToCommit;
use weir_core::ByPartition;

use super::{denied_topic, RequestContext};

pub const MIN: i16 = 2;
pub const MAX: i16 = 9;

pub async fn handle(cx: &RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let group = req.group_id.0.to_string();
    let mut by = ByPartition::new();
    for t in req.topics {
        let topic = t.name.0.to_string();
        let allowed = caller.may(shard, Operation::Read, ResourceType::Topic, &topic);
        by.topic(t.name, topic.clone());
        for p in t.partitions {
            if !allowed {
                by.partition(
                    p.partition_index,
                    Err(denied_topic(caller, "commit offsets of", &topic)),
                );
                continue;
            }
            let offset = OffsetToCommit {
                topic: topic.clone(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: if version >= 6 {
                    p.committed_leader_epoch
                } else {
                    -1
                },
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
            };
            by.partition(p.partition_index, Ok(offset));
        }
    }
    let (places, offsets): (Vec<usize>, Vec<OffsetToCommit>) =
        by.work().into_iter().map(|w| (w.at, w.arg)).unzip();
    let n = offsets.len();
    let g = group.clone();
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(|s| s.to_string());
    let generation = req.generation_id_or_member_epoch;
    let codes = shard
        .on_group(&group, move |s| async move {
            let catalog = s.catalog();
            s.groups
                .commit(
                    &g,
                    &member,
                    instance.as_deref(),
                    generation,
                    offsets,
                    &catalog,
                )
                .await
        })
        .await
        .unwrap_or_else(|e| vec![e.code; n]);
    OffsetCommitResponse::default().with_topics(
        by.codes(places, codes)
            .into_iter()
            .map(|(name, parts)| {
                OffsetCommitResponseTopic::default()
                    .with_name(name)
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(partition, code)| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(partition)
                                    .with_error_code(code.code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
