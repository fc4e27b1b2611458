//! ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3),
//! earliest local (-4), or the first offset at or after a timestamp
//! (`weir_core::shard::OffsetQuery`).

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::shard::OffsetQuery;
use weir_core::ByPartition;

use super::{denied_topic, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 10;

pub async fn handle(cx: &RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let mut by = ByPartition::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = caller.may(shard, Operation::Describe, ResourceType::Topic, &name);
        by.topic(t.name, name.clone());
        for p in t.partitions {
            let query = match allowed {
                true => OffsetQuery::from_wire(p.timestamp, req.isolation_level)
                    .map(|q| (q, p.current_leader_epoch)),
                false => Err(denied_topic(caller, "describe", &name)),
            };
            by.partition(p.partition_index, query);
        }
    }
    let results = shard.list_offsets(by.work()).await;
    let topics = by
        .answers(results)
        .into_iter()
        .map(|(name, parts)| {
            ListOffsetsTopicResponse::default()
                .with_name(name)
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(partition, r)| {
                            let p = ListOffsetsPartitionResponse::default()
                                .with_partition_index(partition);
                            match r {
                                Ok((offset, ts, epoch)) => p
                                    .with_offset(offset)
                                    .with_timestamp(ts)
                                    .with_leader_epoch(if version >= 4 { epoch } else { -1 }),
                                Err(e) => p
                                    .with_error_code(e.code.code())
                                    .with_offset(-1)
                                    .with_timestamp(-1),
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
