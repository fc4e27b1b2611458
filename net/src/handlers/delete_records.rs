//! DeleteRecords (key 21): move partitions' log start offsets forward.

use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use weir_core::Shard;

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    req: DeleteRecordsRequest,
    _version: i16,
) -> DeleteRecordsResponse {
    let mut items = Vec::new();
    let mut shape = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let idx: Vec<_> = t
            .partitions
            .iter()
            .map(|p| {
                items.push((items.len(), name.clone(), p.partition_index, p.offset));
                (p.partition_index, items.len() - 1)
            })
            .collect();
        shape.push((t.name, idx));
    }
    let mut results = vec![None; items.len()];
    for (i, r) in shard.delete_records(items).await {
        results[i] = Some(r);
    }
    let topics = shape
        .into_iter()
        .map(|(name, idx)| {
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(
                    idx.into_iter()
                        .map(|(partition, i)| {
                            let p = DeleteRecordsPartitionResult::default()
                                .with_partition_index(partition);
                            match results[i].take() {
                                Some(Ok(low)) => p.with_low_watermark(low),
                                Some(Err(e)) => {
                                    p.with_error_code(e.code.code()).with_low_watermark(-1)
                                }
                                None => p.with_error_code(-1).with_low_watermark(-1),
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
