//! One module per Kafka API. Each declares the versions it serves (`MIN`,
//! `MAX`) and turns a decoded request into a response with the one handler
//! signature (`RequestContext`); `crate::apis` lists them.

use std::rc::Rc;

use kafka_protocol::messages::ResponseKind;
use kafka_protocol::protocol::StrBytes;
use weir_core::Chunks;
use weir_core::{KafkaError, Shard};

/// KIP-951's node endpoints (Produce's and Fetch's own `NodeEndpoint`
/// types, alike but distinct): the brokers among `leaders` clients may use.
macro_rules! node_endpoints {
    ($endpoint:ty, $shard:expr, $leaders:expr) => {
        $shard
            .brokers_among($leaders)
            .into_iter()
            .map(|b| {
                <$endpoint>::default()
                    .with_node_id(kafka_protocol::messages::BrokerId(b.id))
                    .with_host($crate::handlers::str(&b.host))
                    .with_port(b.port as i32)
                    .with_rack(b.rack.as_deref().map($crate::handlers::str))
            })
            .collect::<Vec<_>>()
    };
}

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_user_scram_credentials;
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
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
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
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod response_errors;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod unregister_broker;

/// A handler's answer: the response to encode (none for an acks=0
/// produce), and for a fetch the records it carries and the memory they
/// hold until sent.
pub struct Reply {
    pub body: Option<ResponseKind>,
    /// Fetch: the records of each partition, in the order the response
    /// lists them (written in by the codec, shared, not copied).
    pub records: Vec<Chunks>,
    /// Fetch: the answer memory its records hold until sent.
    pub hold: Vec<weir_core::memory::Grant>,
}

impl Reply {
    /// A response and nothing else.
    pub fn of(body: impl Into<ResponseKind>) -> Reply {
        Reply {
            body: Some(body.into()),
            records: Vec::new(),
            hold: Vec::new(),
        }
    }

    /// Nothing to send (acks=0 produce).
    pub fn none() -> Reply {
        Reply {
            body: None,
            records: Vec::new(),
            hold: Vec::new(),
        }
    }
}

/// What a handler turns into a `Reply`: a response type, or a `Reply`.
pub trait IntoReply {
    fn into_reply(self) -> Reply;
}

impl<T: Into<ResponseKind>> IntoReply for T {
    fn into_reply(self) -> Reply {
        Reply::of(self)
    }
}

impl IntoReply for Reply {
    fn into_reply(self) -> Reply {
        self
    }
}

/// What every handler is given besides its request's body: the shard that
/// serves it, who sent it, the version it was sent at and the client's id
/// (every handler has the one signature
/// `async fn handle(cx: &RequestContext, req: XRequest) -> impl IntoReply`).
pub struct RequestContext {
    pub shard: Rc<Shard>,
    pub caller: Caller,
    pub version: i16,
    /// The request header's client id, as decoded (shared, not copied:
    /// most handlers never read it).
    pub client_id: Option<StrBytes>,
}

impl RequestContext {
    /// The client id as text ("" when none).
    pub fn client_id(&self) -> String {
        self.client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default()
    }
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
