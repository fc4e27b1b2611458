//! One module per Kafka API. Each declares the versions it serves and turns
//! a decoded request into a response (or none, for acks=0 produce).

use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use weir_core::Chunks;
use weir_core::{KafkaError, Shard};

use crate::codec::Request;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod authorize;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod produce;
pub mod response_errors;
pub mod sync_group;
pub mod txn_offset_commit;

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
        ApiKey::AddPartitionsToTxn,
        add_partitions_to_txn::MIN,
        add_partitions_to_txn::MAX,
    ),
    (
        ApiKey::AddOffsetsToTxn,
        add_offsets_to_txn::MIN,
        add_offsets_to_txn::MAX,
    ),
    (ApiKey::EndTxn, end_txn::MIN, end_txn::MAX),
    (
        ApiKey::DescribeTransactions,
        describe_transactions::MIN,
        describe_transactions::MAX,
    ),
    (
        ApiKey::ListTransactions,
        list_transactions::MIN,
        list_transactions::MAX,
    ),
    (
        ApiKey::DescribeProducers,
        describe_producers::MIN,
        describe_producers::MAX,
    ),
    (
        ApiKey::TxnOffsetCommit,
        txn_offset_commit::MIN,
        txn_offset_commit::MAX,
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
    (ApiKey::JoinGroup, join_group::MIN, join_group::MAX),
    (ApiKey::SyncGroup, sync_group::MIN, sync_group::MAX),
    (ApiKey::Heartbeat, heartbeat::MIN, heartbeat::MAX),
    (ApiKey::LeaveGroup, leave_group::MIN, leave_group::MAX),
    (ApiKey::OffsetCommit, offset_commit::MIN, offset_commit::MAX),
    (ApiKey::OffsetFetch, offset_fetch::MIN, offset_fetch::MAX),
    (
        ApiKey::DescribeGroups,
        describe_groups::MIN,
        describe_groups::MAX,
    ),
    (ApiKey::ListGroups, list_groups::MIN, list_groups::MAX),
    (
        ApiKey::ConsumerGroupHeartbeat,
        consumer_group_heartbeat::MIN,
        consumer_group_heartbeat::MAX,
    ),
    (
        ApiKey::ConsumerGroupDescribe,
        consumer_group_describe::MIN,
        consumer_group_describe::MAX,
    ),
    (
        ApiKey::DescribeLogDirs,
        describe_log_dirs::MIN,
        describe_log_dirs::MAX,
    ),
    (ApiKey::DeleteGroups, delete_groups::MIN, delete_groups::MAX),
    (ApiKey::OffsetDelete, offset_delete::MIN, offset_delete::MAX),
    (ApiKey::DescribeAcls, describe_acls::MIN, describe_acls::MAX),
    (ApiKey::CreateAcls, create_acls::MIN, create_acls::MAX),
    (ApiKey::DeleteAcls, delete_acls::MIN, delete_acls::MAX),
    (
        ApiKey::DescribeUserScramCredentials,
        describe_user_scram_credentials::MIN,
        describe_user_scram_credentials::MAX,
    ),
    (
        ApiKey::AlterUserScramCredentials,
        alter_user_scram_credentials::MIN,
        alter_user_scram_credentials::MAX,
    ),
    (
        ApiKey::SaslHandshake,
        crate::sasl::HANDSHAKE_MIN,
        crate::sasl::HANDSHAKE_MAX,
    ),
    (
        ApiKey::SaslAuthenticate,
        crate::sasl::AUTHENTICATE_MIN,
        crate::sasl::AUTHENTICATE_MAX,
    ),
];

pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

/// A response to encode.
pub struct Reply {
    pub body: ResponseKind,
    /// Fetch: the records of each partition, in the order the response
    /// lists them (written in by the codec, shared, not copied).
    pub records: Vec<Chunks>,
    /// Fetch: the answer memory its records hold until sent.
    pub hold: Vec<weir_core::memory::Grant>,
}

/// Who sent a request: the connection's principal and address.
pub struct Caller {
    pub principal: Rc<weir_core::auth::Principal>,
    /// As Kafka shows it (`/127.0.0.1`).
    pub host: Rc<str>,
    /// The connection's produce turn, held by a produce request until its
    /// records are appended (`produce::handle` gives it back then, before
    /// they are durable; the connection, when the request is answered).
    pub produce_turn: std::cell::Cell<Option<glommio::sync::StaticPermit>>,
}

impl Caller {
    /// Whether the caller may do `operation` on `resource` named `name`.
    pub fn may(
        &self,
        shard: &Shard,
        operation: weir_core::auth::acl::Operation,
        resource: weir_core::auth::acl::ResourceType,
        name: &str,
    ) -> bool {
        shard.allows(
            &self.principal,
            self.host.trim_start_matches('/'),
            operation,
            resource,
            name,
        )
    }
}

impl Caller {
    /// Whether the caller may create `topic`: CREATE on it, or on the
    /// cluster (as Kafka).
    pub fn may_create(&self, shard: &Shard, topic: &str) -> bool {
        use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
        self.may(shard, Operation::Create, ResourceType::Topic, topic)
            || self.may(shard, Operation::Create, ResourceType::Cluster, CLUSTER)
    }
}

/// TOPIC_AUTHORIZATION_FAILED for `caller`, who may not `what` `topic`.
pub fn denied_topic(caller: &Caller, what: &str, topic: &str) -> KafkaError {
    KafkaError::new(
        weir_core::ErrorCode::TopicAuthorizationFailed,
        format!("{} may not {what} topic {topic:?}", caller.principal),
    )
}

/// Runs `run` on the items `allowed` lets through, in order, and answers
/// the others with `refused`: one answer per item, in the items' order.
pub async fn only_allowed<T, R, Fut>(
    items: Vec<T>,
    allowed: impl Fn(&T) -> bool,
    refused: impl Fn(&T) -> R,
    run: impl FnOnce(Vec<T>) -> Fut,
) -> Vec<R>
where
    Fut: std::future::Future<Output = Vec<R>>,
{
    let mut answers = Vec::with_capacity(items.len());
    let mut ok = Vec::with_capacity(items.len());
    for item in items {
        if allowed(&item) {
            answers.push(None);
            ok.push(item);
        } else {
            answers.push(Some(refused(&item)));
        }
    }
    let mut results = run(ok).await.into_iter();
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| results.next().expect("one result per item run")))
        .collect()
}

/// Handles one request. `None`: no response is sent (acks=0 produce).
/// SaslHandshake and SaslAuthenticate are the connection's (`sasl`).
pub async fn handle(shard: &Rc<Shard>, req: Request, caller: &Caller) -> Option<Reply> {
    if let Some(body) = authorize::refusal(shard, caller, &req.body) {
        return Some(Reply {
            body,
            records: Vec::new(),
            hold: Vec::new(),
        });
    }
    let v = req.version;
    let body = match req.body {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(r, v)),
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::handle(shard, r, v, caller).await)
        }
        RequestKind::Produce(r) => {
            ResponseKind::Produce(produce::handle(shard, r, v, caller).await?)
        }
        RequestKind::Fetch(r) => {
            let (body, records, hold) = fetch::handle(shard, r, v, caller).await;
            return Some(Reply {
                body: ResponseKind::Fetch(body),
                records,
                hold,
            });
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(shard, r, v, caller).await)
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(create_topics::handle(shard, r, v, caller).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(delete_topics::handle(shard, r, v, caller).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(create_partitions::handle(shard, r, v, caller).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(describe_configs::handle(shard, r, v, caller))
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(describe_cluster::handle(shard, r, v))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(find_coordinator::handle(shard, r, v, caller))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(shard, r, v, caller).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            incremental_alter_configs::handle(shard, r, v, caller).await,
        ),
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(init_producer_id::handle(shard, r, v).await)
        }
        RequestKind::JoinGroup(r) => {
            let client_id = req
                .header
                .client_id
                .map(|c| c.to_string())
                .unwrap_or_default();
            let host = req.client_host.as_deref().unwrap_or_default().to_string();
            ResponseKind::JoinGroup(join_group::handle(shard, r, v, client_id, host).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(sync_group::handle(shard, r, v).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(heartbeat::handle(shard, r, v).await),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(leave_group::handle(shard, r, v).await)
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(offset_commit::handle(shard, r, v, caller).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(offset_fetch::handle(shard, r, v, caller).await)
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(describe_groups::handle(shard, r, v, caller).await)
        }
        RequestKind::ConsumerGroupHeartbeat(r) => {
            let client_id = req
                .header
                .client_id
                .map(|c| c.to_string())
                .unwrap_or_default();
            ResponseKind::ConsumerGroupHeartbeat(
                consumer_group_heartbeat::handle(shard, r, client_id, caller).await,
            )
        }
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            consumer_group_describe::handle(shard, r, caller).await,
        ),
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(describe_log_dirs::handle(shard, r, v, caller).await)
        }
        RequestKind::ListGroups(r) => {
            ResponseKind::ListGroups(list_groups::handle(shard, r, v, caller).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(delete_groups::handle(shard, r, v, caller).await)
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(describe_acls::handle(shard, r, v, caller))
        }
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(create_acls::handle(shard, r, v, caller).await)
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(delete_acls::handle(shard, r, v, caller).await)
        }
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            describe_user_scram_credentials::handle(shard, r, v, caller),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            alter_user_scram_credentials::handle(shard, r, v, caller).await,
        ),
        RequestKind::AddPartitionsToTxn(r) => ResponseKind::AddPartitionsToTxn(
            add_partitions_to_txn::handle(shard, r, v, caller).await,
        ),
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(add_offsets_to_txn::handle(shard, r, v, caller).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(end_txn::handle(shard, r, v, caller).await),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(txn_offset_commit::handle(shard, r, v, caller).await)
        }
        RequestKind::DescribeTransactions(r) => ResponseKind::DescribeTransactions(
            describe_transactions::handle(shard, r, v, caller).await,
        ),
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(list_transactions::handle(shard, r, v, caller).await)
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(describe_producers::handle(shard, r, v, caller).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(offset_delete::handle(shard, r, v, caller).await)
        }
        other => {
            // decode_request only lets served APIs through.
            log::error!("no handler for {:?}", std::mem::discriminant(&other));
            return None;
        }
    };
    Some(Reply {
        body,
        records: Vec::new(),
        hold: Vec::new(),
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
