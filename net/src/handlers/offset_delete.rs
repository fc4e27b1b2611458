//! OffsetDelete (key 47): removes a group's committed offsets for some
//! partitions, except of topics its members subscribe to.

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::{ByPartition, TopicPartition};

use super::{denied_topic, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

pub async fn handle(cx: &RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let group = req.group_id.0.to_string();
    let mut by = ByPartition::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = caller.may(shard, Operation::Read, ResourceType::Topic, &name);
        by.topic(t.name, name.clone());
        for p in t.partitions {
            let arg = match allowed {
                true => Ok(()),
                false => Err(denied_topic(caller, "delete offsets of", &name)),
            };
            by.partition(p.partition_index, arg);
        }
    }
    let (places, partitions): (Vec<usize>, Vec<TopicPartition>) =
        by.work().into_iter().map(|w| (w.at, w.tp)).unzip();
    let g = group.clone();
    let answer = shard
        .on_group(&group, move |s| async move {
            s.groups.delete_offsets(&g, partitions).await
        })
        .await
        .unwrap_or_else(|e| Err(e.code));
    match answer {
        Err(code) => OffsetDeleteResponse::default().with_error_code(code.code()),
        Ok(codes) => OffsetDeleteResponse::default().with_topics(
            by.codes(places, codes)
                .into_iter()
                .map(|(name, parts)| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(name)
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(partition, code)| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(partition)
                                        .with_error_code(code.code())
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}
