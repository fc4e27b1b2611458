//! OffsetDelete (key 47): removes a group's committed offsets for some
//! partitions, except of topics its members subscribe to.

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, TopicName};
use weir_core::Shard;

use super::str;

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

pub async fn handle(
    shard: &Rc<Shard>,
    req: OffsetDeleteRequest,
    _version: i16,
) -> OffsetDeleteResponse {
    let group = req.group_id.0.to_string();
    let topics: Vec<(String, Vec<i32>)> = req
        .topics
        .into_iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let g = group.clone();
    let answer = shard
        .on_group(&group, move |s| async move {
            s.groups.delete_offsets(&g, topics).await
        })
        .await
        .unwrap_or_else(|e| Err(e.code));
    match answer {
        Err(code) => OffsetDeleteResponse::default().with_error_code(code.code()),
        Ok(topics) => OffsetDeleteResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(name, parts)| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(str(&name)))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(p, code)| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(code.code())
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}
