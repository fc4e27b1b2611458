//! DescribeProducers (key 61): the producers each partition remembers, with
//! their epoch, last sequence and time, and where their open transaction
//! began (-1 if none). Needs READ on the topic.

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::ByPartition;

use super::{denied_topic, error_parts, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

pub async fn handle(
    cx: &RequestContext,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let mut by = ByPartition::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = caller.may(shard, Operation::Read, ResourceType::Topic, &name);
        by.topic(t.name, name.clone());
        for p in t.partition_indexes {
            let ask = match allowed {
                true => Ok(()),
                false => Err(denied_topic(caller, "read", &name)),
            };
            by.partition(p, ask);
        }
    }
    let results = shard
        .on_partitions(by.work(), |_, p, ()| async move {
            Ok::<_, weir_core::KafkaError>(p.log.producers())
        })
        .await;
    let topics = by
        .answers(results)
        .into_iter()
        .map(|(name, parts)| {
            TopicResponse::default().with_name(name).with_partitions(
                parts
                    .into_iter()
                    .map(|(index, r)| match r {
                        Ok(producers) => PartitionResponse::default()
                            .with_partition_index(index)
                            .with_active_producers(
                                producers
                                    .into_iter()
                                    .map(|p| {
                                        ProducerState::default()
                                            .with_producer_id(ProducerId(p.producer_id))
                                            .with_producer_epoch(p.epoch as i32)
                                            .with_last_sequence(p.last_sequence)
                                            .with_last_timestamp(p.last_timestamp)
                                            .with_coordinator_epoch(p.coordinator_epoch)
                                            .with_current_txn_start_offset(
                                                p.txn_start_offset.unwrap_or(-1),
                                            )
                                    })
                                    .collect(),
                            ),
                        Err(e) => {
                            let (code, message) = error_parts(&e);
                            PartitionResponse::default()
                                .with_partition_index(index)
                                .with_error_code(code)
                                .with_error_message(message)
                        }
                    })
                    .collect(),
            )
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
