//! ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3),
//! earliest local (-4), or the first offset at or after a timestamp
//! (`weir_core::shard::OffsetQuery`).

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use weir_core::shard::OffsetQuery;
use weir_core::Shard;

pub const MIN: i16 = 1;
pub const MAX: i16 = 8;

pub async fn handle(
    shard: &Rc<Shard>,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let mut items = Vec::new();
    let mut shape = Vec::new();
    let mut results = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut idx = Vec::new();
        for p in t.partitions {
            idx.push((p.partition_index, results.len()));
            match OffsetQuery::from_wire(p.timestamp) {
                Ok(q) => {
                    items.push((results.len(), name.clone(), p.partition_index, q));
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        shape.push((t.name, idx));
    }
    for (i, r) in shard.list_offsets(items).await {
        results[i] = Some(r);
    }
    let topics = shape
        .into_iter()
        .map(|(name, idx)| {
            ListOffsetsTopicResponse::default()
                .with_name(name)
                .with_partitions(
                    idx.into_iter()
                        .map(|(partition, i)| {
                            let p = ListOffsetsPartitionResponse::default()
                                .with_partition_index(partition);
                            match results[i].take() {
                                Some(Ok((offset, ts))) => p
                                    .with_offset(offset)
                                    .with_timestamp(ts)
                                    .with_leader_epoch(if version >= 4 { 0 } else { -1 }),
                                Some(Err(e)) => p
                                    .with_error_code(e.code.code())
                                    .with_offset(-1)
                                    .with_timestamp(-1),
                                None => p.with_error_code(-1).with_offset(-1).with_timestamp(-1),
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
