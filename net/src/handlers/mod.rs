//! One module per Kafka API. Each declares the versions it serves and turns
//! a decoded request into a response (or none, for acks=0 produce).

use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use weir_core::{KafkaError, Shard};

use crate::codec::Request;

pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod fetch;
pub mod find_coordinator;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod produce;

/// Every API served, with its version range. ApiVersions advertises exactly
/// this; an API not here is not served.
pub const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, produce::MIN, produce::MAX),
    (ApiKey::Fetch, fetch::MIN, fetch::MAX),
    (ApiKey::ListOffsets, list_offsets::MIN, list_offsets::MAX),
    (ApiKey::Metadata, metadata::MIN, metadata::MAX),
    (
        ApiKey::FindCoordinator,
        find_coordinator::MIN,
        find_coordinator::MAX,
    ),
    (ApiKey::ApiVersions, api_versions::MIN, api_versions::MAX),
    (ApiKey::CreateTopics, create_topics::MIN, create_topics::MAX),
    (ApiKey::DeleteTopics, delete_topics::MIN, delete_topics::MAX),
    (
        ApiKey::DescribeConfigs,
        describe_configs::MIN,
        describe_configs::MAX,
    ),
    (
        ApiKey::CreatePartitions,
        create_partitions::MIN,
        create_partitions::MAX,
    ),
    (
        ApiKey::DescribeCluster,
        describe_cluster::MIN,
        describe_cluster::MAX,
    ),
    (
        ApiKey::InitProducerId,
        init_producer_id::MIN,
        init_producer_id::MAX,
    ),
    (
        ApiKey::DeleteRecords,
        delete_records::MIN,
        delete_records::MAX,
    ),
    (
        ApiKey::IncrementalAlterConfigs,
        incremental_alter_configs::MIN,
        incremental_alter_configs::MAX,
    ),
];

pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

/// Handles one request. `None`: no response is sent (acks=0 produce).
pub async fn handle(shard: &Rc<Shard>, req: Request) -> Option<ResponseKind> {
    let v = req.version;
    Some(match req.body {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(r, v)),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(shard, r, v).await),
        RequestKind::Produce(r) => ResponseKind::Produce(produce::handle(shard, r, v).await?),
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::handle(shard, r, v).await),
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(shard, r, v).await)
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(create_topics::handle(shard, r, v).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(delete_topics::handle(shard, r, v).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(create_partitions::handle(shard, r, v).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(describe_configs::handle(shard, r, v))
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(describe_cluster::handle(shard, r, v))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(find_coordinator::handle(shard, r, v))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(shard, r, v).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            incremental_alter_configs::handle(shard, r, v).await,
        ),
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(init_producer_id::handle(shard, r, v).await)
        }
        other => {
            // decode_request only lets served APIs through.
            log::error!("no handler for {:?}", std::mem::discriminant(&other));
            return None;
        }
    })
}

/// An error's code and message, as responses carry them.
pub fn error_parts(e: &KafkaError) -> (i16, Option<StrBytes>) {
    (
        e.code.code(),
        Some(StrBytes::from_string(e.message.clone())),
    )
}

pub fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
