//! DeleteRecords (key 21): move partitions' log start offsets forward.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::ByPartition;

use super::{denied_topic, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

pub async fn handle(cx: &RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let mut by = ByPartition::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = caller.may(shard, Operation::Delete, ResourceType::Topic, &name);
        by.topic(t.name, name.clone());
        for p in t.partitions {
            let offset = match allowed {
                true => Ok(p.offset),
                false => Err(denied_topic(caller, "delete records of", &name)),
            };
            by.partition(p.partition_index, offset);
        }
    }
    let results = shard.delete_records(by.work()).await;
    let topics = by
        .answers(results)
        .into_iter()
        .map(|(name, parts)| {
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(partition, r)| {
                            let p = DeleteRecordsPartitionResult::default()
                                .with_partition_index(partition);
                            match r {
                                Ok(low) => p.with_low_watermark(low),
                                Err(e) => p.with_error_code(e.code.code()).with_low_watermark(-1),
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
