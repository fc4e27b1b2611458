//! Produce (key 0): validate and append each partition's batches on the
//! shard that owns it; answer after the fsync (acks 1/-1) or not at all
//! (acks 0).

use std::rc::Rc;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use weir_core::{ErrorCode, KafkaError, Shard};

use super::error_parts;

pub const MIN: i16 = 3;
pub const MAX: i16 = 11;

pub async fn handle(
    shard: &Rc<Shard>,
    req: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    let mut items = Vec::new();
    let mut refused = Vec::new();
    let mut shape = Vec::new(); // (topic name, partitions in request order)
    let mut i = 0usize;
    for t in req.topic_data {
        let topic = t.name.0.to_string();
        let mut parts = Vec::new();
        for p in t.partition_data {
            parts.push((p.index, i));
            match (acks, p.records) {
                (-1..=1, Some(records)) => items.push((i, topic.clone(), p.index, records)),
                (-1..=1, None) => refused.push((
                    i,
                    KafkaError::new(ErrorCode::CorruptMessage, "produce data has null records"),
                )),
                (a, _) => refused.push((
                    i,
                    KafkaError::new(
                        ErrorCode::InvalidRequiredAcks,
                        format!("acks={a}: only 0, 1 and -1 are valid"),
                    ),
                )),
            }
            i += 1;
        }
        shape.push((t.name, parts));
    }
    let mut results: Vec<Option<Result<weir_core::Appended, KafkaError>>> = vec![None; i];
    for (i, e) in refused {
        results[i] = Some(Err(e));
    }
    for (i, r) in shard.produce(items, acks).await {
        if let Err(e) = &r {
            // Which partition, looked up only for a refusal.
            let at = shape.iter().find_map(|(name, parts)| {
                let &(index, _) = parts.iter().find(|&&(_, j)| j == i)?;
                Some((name.0.as_str(), index))
            });
            let (topic, partition) = at.unwrap_or(("?", -1));
            let detail = e.detail.as_deref().map(|d| format!(" ({d})"));
            weir_core::refusals::log(format_args!(
                "produce to {topic}-{partition} refused: {e}{}",
                detail.unwrap_or_default()
            ));
        }
        results[i] = Some(r);
    }
    if acks == 0 {
        return None;
    }
    let responses = shape
        .into_iter()
        .map(|(name, parts)| {
            TopicProduceResponse::default()
                .with_name(name)
                .with_partition_responses(
                    parts
                        .into_iter()
                        .map(|(index, i)| {
                            let r = results[i].take().unwrap_or_else(|| {
                                Err(KafkaError::new(
                                    ErrorCode::UnknownServerError,
                                    "produce result lost",
                                ))
                            });
                            partition_response(index, r, version)
                        })
                        .collect(),
                )
        })
        .collect();
    Some(ProduceResponse::default().with_responses(responses))
}

fn partition_response(
    index: i32,
    r: Result<weir_core::Appended, KafkaError>,
    version: i16,
) -> PartitionProduceResponse {
    let p = PartitionProduceResponse::default().with_index(index);
    match r {
        Ok(a) => p
            .with_base_offset(a.base_offset)
            .with_log_append_time_ms(a.log_append_time)
            .with_log_start_offset(-1),
        Err(e) => {
            let (code, message) = error_parts(&e);
            let p = p
                .with_error_code(code)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            if version >= 8 {
                let p = p.with_error_message(message.clone());
                if e.code == ErrorCode::InvalidRecord {
                    return p.with_record_errors(vec![BatchIndexAndErrorMessage::default()
                        .with_batch_index(e.record_index.unwrap_or(0))
                        .with_batch_index_error_message(message)]);
                }
                p
            } else {
                p
            }
        }
    }
}
