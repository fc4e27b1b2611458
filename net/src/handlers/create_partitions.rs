//! CreatePartitions (key 37): grow a topic's partition count.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::shard::PartitionCount;

use super::{denied_topic, error_parts, only_allowed, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 3;

pub async fn handle(cx: &RequestContext, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let names: Vec<_> = req.topics.iter().map(|t| t.name.clone()).collect();
    let items = req
        .topics
        .into_iter()
        .map(|t| PartitionCount {
            topic: t.name.0.to_string(),
            count: t.count,
        })
        .collect();
    let results = only_allowed(
        items,
        |p: &PartitionCount| caller.may(shard, Operation::Alter, ResourceType::Topic, &p.topic),
        |p| Err(denied_topic(caller, "add partitions to", &p.topic)),
        |items| shard.create_partitions(items, req.validate_only),
    )
    .await;
    CreatePartitionsResponse::default().with_results(
        names
            .into_iter()
            .zip(results)
            .map(|(name, r)| {
                let t = CreatePartitionsTopicResult::default().with_name(name);
                match r {
                    Ok(()) => t,
                    Err(e) => {
                        let (code, message) = error_parts(&e);
                        t.with_error_code(code).with_error_message(message)
                    }
                }
            })
            .collect(),
    )
}
