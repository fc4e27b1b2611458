//! Fetch (key 1): read from each partition's owner, waiting (long poll)
//! until data arrives or `max_wait_ms` passes. Topic ids from v13.
//! read_committed (isolation level 1) reads up to the last stable offset
//! and lists the aborted transactions in what it read. A fetch naming a
//! replica (`replica_id`, or v15's `replica_state`) is a follower's: it
//! needs CLUSTER_ACTION, reads up to the leader's durable end and tells
//! the leader how far the follower holds the log (`weir_core::replication`).

use std::time::Duration;

use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::partition::PartitionRead;
use weir_core::shard::FetchPartition;
use weir_core::{Chunks, ErrorCode, KafkaError};

use super::{Reply, RequestContext};

pub const MIN: i16 = 4;
pub const MAX: i16 = 18;

/// The longest a fetch may wait, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

/// The response, the records of each of its partitions in the order they
/// appear in it (the codec writes them in, shared, not copied; the
/// response's own `records` fields are left empty), and the answer memory
/// they hold until sent (`weir_core::memory`), in one `Reply`.
pub async fn handle(cx: &RequestContext, req: FetchRequest) -> Reply {
    let replica = match cx.version >= 15 {
        true => req.replica_state.replica_id.0,
        false => req.replica_id.0,
    };
    let replica = (replica >= 0).then_some(replica);
    let committed = req.isolation_level == 1 && replica.is_none();
    // KIP-392: a consumer's Fetch v11+ may be read from a follower, and
    // names its rack for the leader to choose one.
    let rack: Option<std::sync::Arc<str>> =
        (cx.version >= 11 && replica.is_none()).then(|| req.rack_id.as_str().into());
    let (shape, parts) = plan(cx, req.topics, committed, replica, rack);
    let max_wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let mut max_bytes = if req.max_bytes > 0 {
        req.max_bytes
    } else {
        i32::MAX
    };
    // A consumer under a byte-rate quota reads at most what the quota lets
    // it read in its window, as Kafka caps it (a larger answer would be
    // throttled however long it waited).
    if replica.is_none() {
        if let Some(cap) = crate::throttle::Who::of(cx).and_then(|w| w.max_fetch_bytes()) {
            max_bytes = max_bytes.min(cap.max(1));
        }
    }
    let (results, hold) = cx
        .shard
        .fetch(
            parts,
            req.min_bytes.min(max_bytes),
            max_bytes,
            max_wait,
            replica,
        )
        .await;
    // KIP-951: where the partitions another node leads are.
    let leaders: std::collections::BTreeSet<i32> = results
        .iter()
        .filter_map(|r| r.as_ref().err().and_then(|e| e.leader))
        .collect();
    let mut results: Vec<_> = results.into_iter().map(Some).collect();
    let mut records = Vec::with_capacity(results.len());
    let responses = shape
        .into_iter()
        .map(|(topic, topic_id, idx)| {
            let partitions = idx
                .into_iter()
                .map(|(partition, i)| {
                    let read = i.map(|i| results[i].take().expect("one result per partition"));
                    let (data, chunks) = partition_answer(partition, read, cx.version);
                    records.push(chunks);
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(if cx.version >= 13 {
                    TopicName::default()
                } else {
                    topic
                })
                .with_topic_id(topic_id)
                .with_partitions(partitions)
        })
        .collect();
    let endpoints = match cx.version >= 16 && !leaders.is_empty() {
        true => node_endpoints!(NodeEndpoint, cx.shard, &leaders),
        false => Vec::new(),
    };
    let response = FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses)
        .with_node_endpoints(endpoints);
    Reply {
        body: Some(response.into()),
        records,
        hold,
    }
}

/// Each topic of the request as the response will carry it (name, topic
/// id, and each partition's place among the reads or why it has none), and
/// the reads: the partitions the caller may read of topics that exist.
type Shape = Vec<(TopicName, uuid::Uuid, Vec<(i32, Result<usize, ErrorCode>)>)>;

fn plan(
    cx: &RequestContext,
    topics: Vec<FetchTopic>,
    committed: bool,
    replica: Option<i32>,
    rack: Option<std::sync::Arc<str>>,
) -> (Shape, Vec<FetchPartition>) {
    let catalog = cx.shard.catalog();
    // A follower may read every topic it replicates: Kafka asks
    // CLUSTER_ACTION on the cluster of it instead of READ on each topic.
    let replica_rights = replica.is_none()
        || cx.caller.may(
            &cx.shard,
            Operation::ClusterAction,
            ResourceType::Cluster,
            weir_core::auth::acl::CLUSTER,
        );
    let mut shape = Vec::new();
    let mut parts = Vec::new();
    for t in topics {
        let name = if cx.version >= 13 {
            catalog
                .topic_by_id(t.topic_id.as_bytes())
                .map(|m| m.name.clone())
        } else {
            Some(t.topic.0.to_string())
        };
        let refused = match &name {
            None => Some(ErrorCode::UnknownTopicId),
            Some(_) if !replica_rights => Some(ErrorCode::TopicAuthorizationFailed),
            Some(n)
                if replica.is_none()
                    && !cx
                        .caller
                        .may(&cx.shard, Operation::Read, ResourceType::Topic, n) =>
            {
                Some(ErrorCode::TopicAuthorizationFailed)
            }
            Some(_) => None,
        };
        let mut idx = Vec::new();
        for p in &t.partitions {
            match (&name, refused) {
                (Some(n), None) => {
                    idx.push((p.partition, Ok(parts.len())));
                    parts.push(FetchPartition {
                        topic: n.clone(),
                        partition: p.partition,
                        offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        committed,
                        current_leader_epoch: p.current_leader_epoch,
                        client_rack: rack.clone(),
                        redirect: None,
                    });
                }
                (_, why) => idx.push((p.partition, Err(why.unwrap_or(ErrorCode::UnknownTopicId)))),
            }
        }
        shape.push((t.topic, t.topic_id, idx));
    }
    (shape, parts)
}

/// One partition's part of the response and the records it carries: what
/// its read found, or why there was none.
fn partition_answer(
    partition: i32,
    read: Result<Result<PartitionRead, KafkaError>, ErrorCode>,
    version: i16,
) -> (PartitionData, Chunks) {
    let base = PartitionData::default()
        .with_partition_index(partition)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(Default::default()));
    let failed = |code: ErrorCode| {
        base.clone()
            .with_error_code(code.code())
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1)
    };
    match read {
        Err(code) => (failed(code), Chunks::default()),
        Ok(Err(e)) => {
            if e.code != ErrorCode::OffsetOutOfRange {
                log::debug!("fetch {partition}: {e}");
            }
            let data = match (version >= 12, e.leader) {
                (true, Some(leader)) => failed(e.code).with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(leader))
                        .with_leader_epoch(e.leader_epoch),
                ),
                _ => failed(e.code),
            };
            (data, Chunks::default())
        }
        Ok(Ok(r)) => {
            let aborted = r.aborted.map(|list| {
                list.into_iter()
                    .map(|t| {
                        AbortedTransaction::default()
                            .with_producer_id(ProducerId(t.producer_id))
                            .with_first_offset(t.first_offset)
                    })
                    .collect()
            });
            let data = base
                .with_high_watermark(r.high_watermark)
                .with_last_stable_offset(r.last_stable_offset)
                .with_log_start_offset(r.log_start)
                .with_aborted_transactions(aborted)
                .with_preferred_read_replica(BrokerId(r.preferred_read_replica.unwrap_or(-1)));
            (data, r.records)
        }
    }
}
