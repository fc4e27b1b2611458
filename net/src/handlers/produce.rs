//! Produce (key 0): validate and append each partition's batches on the
//! shard that owns it; answer after the fsync (acks 1/-1) or not at all
//! (acks 0). v13 names topics by id (KIP-516). v12 is v11's wire for
//! clients with transactions v2 (KIP-890), which weir does not advertise:
//! a transactional Java client stays at v11.

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use weir_core::{ByPartition, ErrorCode, KafkaError};

use weir_core::auth::acl::{Operation, ResourceType};

use super::{denied_topic, error_parts, Reply, RequestContext};

pub const MIN: i16 = 3;
pub const MAX: i16 = 13;

pub async fn handle(cx: &RequestContext, req: ProduceRequest) -> Reply {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let acks = req.acks;
    // A transactional producer's request needs WRITE on its id, as Kafka.
    let txn_refused = req.transactional_id.as_ref().and_then(|id| {
        let id = id.0.as_str();
        (!caller.may(shard, Operation::Write, ResourceType::TransactionalId, id)).then(|| {
            KafkaError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                format!(
                    "{} may not write as transactional id {id:?}",
                    caller.principal
                ),
            )
        })
    });
    // Only v13 names topics by id (the catalog is not needed otherwise).
    let catalog = (version >= 13).then(|| shard.catalog());
    let mut by = ByPartition::new();
    for t in req.topic_data {
        let name = match &catalog {
            Some(c) => c.topic_by_id(t.topic_id.as_bytes()).map(|m| m.name.clone()),
            None => Some(t.name.0.to_string()),
        };
        let allowed = name
            .as_ref()
            .is_some_and(|n| caller.may(shard, Operation::Write, ResourceType::Topic, n));
        by.topic((t.name, t.topic_id), name.clone().unwrap_or_default());
        for p in t.partition_data {
            let arg = match (acks, p.records) {
                _ if name.is_none() => Err(KafkaError::new(
                    ErrorCode::UnknownTopicId,
                    format!("no topic has id {}", t.topic_id),
                )),
                _ if txn_refused.is_some() => Err(txn_refused.clone().expect("a refusal")),
                _ if !allowed => Err(denied_topic(
                    caller,
                    "write to",
                    name.as_deref().unwrap_or_default(),
                )),
                (-1..=1, Some(records)) => Ok(records),
                (-1..=1, None) => Err(KafkaError::new(
                    ErrorCode::CorruptMessage,
                    "produce data has null records",
                )),
                (a, _) => Err(KafkaError::new(
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks={a}: only 0, 1 and -1 are valid"),
                )),
            };
            by.partition(p.index, arg);
        }
    }
    // The connection's next produce may append once these records have
    // their offsets: its order is kept, and it shares their flush.
    let turn = caller.produce_turn.take();
    let appended = turn.map(|t| Box::new(move || drop(t)) as Box<dyn FnOnce()>);
    // acks=all waits for the in-sync replicas at most the request's
    // timeout_ms (Kafka's DelayedProduce), then REQUEST_TIMED_OUT.
    let timeout = std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let results =
        weir_core::table::ingest::produce_then(shard, by.work(), acks, timeout, appended).await;
    let answers = by.answers(results);
    for ((name, id), parts) in &answers {
        for (partition, r) in parts {
            if let Err(e) = r {
                let detail = e.detail.as_deref().map(|d| format!(" ({d})"));
                let topic = if version >= 13 {
                    id.to_string()
                } else {
                    name.0.to_string()
                };
                weir_core::refusals::log(format_args!(
                    "produce to {topic}-{partition} refused: {e}{}",
                    detail.unwrap_or_default()
                ));
            }
        }
    }
    if acks == 0 {
        return Reply::none();
    }
    // KIP-951: where the partitions another node leads are.
    let leaders: std::collections::BTreeSet<i32> = answers
        .iter()
        .flat_map(|(_, parts)| parts.iter())
        .filter_map(|(_, r)| r.as_ref().err().and_then(|e| e.leader))
        .collect();
    let endpoints = match version >= 10 && !leaders.is_empty() {
        true => node_endpoints!(NodeEndpoint, shard, &leaders),
        false => Vec::new(),
    };
    let responses = answers
        .into_iter()
        .map(|((name, id), parts)| {
            TopicProduceResponse::default()
                .with_name(name)
                .with_topic_id(id)
                .with_partition_responses(
                    parts
                        .into_iter()
                        .map(|(index, r)| partition_response(index, r, version))
                        .collect(),
                )
        })
        .collect();
    Reply::of(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(endpoints),
    )
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
            let p = match (version >= 10, e.leader) {
                (true, Some(leader)) => p.with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(leader))
                        .with_leader_epoch(e.leader_epoch),
                ),
                _ => p,
            };
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
