//! Metadata (key 3): the brokers, and every topic asked for with its
//! partitions and id. A single node is one broker leading every partition,
//! or (with `--shard-ports`) each shard is a broker leading what it owns;
//! in a cluster each live node is a broker leading the partitions placed
//! on it.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use weir_core::catalog::TopicMeta;
use weir_core::shard::NewTopic;
use weir_core::ErrorCode;

use weir_core::auth::acl::{Operation, ResourceType};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 13;

pub async fn handle(cx: &RequestContext, req: MetadataRequest) -> MetadataResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let cfg = &shard.config;
    let may = |op, name: &str| caller.may(shard, op, ResourceType::Topic, name);
    // v0: an empty list means every topic; v1+: null means every topic.
    let wanted = match req.topics {
        Some(t) if !(version == 0 && t.is_empty()) => Some(t),
        _ => None,
    };
    let mut topics = Vec::new();
    match wanted {
        None => {
            // Every topic the caller may describe.
            for t in shard.catalog().topics.values() {
                if may(Operation::Describe, &t.name) {
                    topics.push(topic_entry(shard, t));
                }
            }
        }
        Some(list) => {
            let auto = cfg.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
            let mut missing = Vec::new();
            for t in &list {
                let catalog = shard.catalog();
                // By id when no name is given: null, or "" as the Java
                // client sends it (its default) when it asks by id.
                let found = match &t.name {
                    Some(n) if !n.is_empty() || t.topic_id.is_nil() => catalog.topic(n),
                    _ => catalog.topic_by_id(t.topic_id.as_bytes()),
                };
                match (found, &t.name) {
                    (Some(m), _) if !may(Operation::Describe, &m.name) => topics.push(
                        MetadataResponseTopic::default()
                            .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id),
                    ),
                    (Some(m), _) => topics.push(topic_entry(shard, m)),
                    (None, Some(n)) if auto && !n.is_empty() && caller.may_create(shard, n) => {
                        missing.push(n.0.to_string())
                    }
                    (None, name) => topics.push(
                        MetadataResponseTopic::default()
                            .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                            .with_name(name.clone())
                            .with_topic_id(t.topic_id),
                    ),
                }
            }
            if !missing.is_empty() {
                let new = missing
                    .iter()
                    .map(|n| NewTopic {
                        name: n.clone(),
                        partitions: -1,
                        replication_factor: -1,
                        assignments: Vec::new(),
                        configs: vec![],
                        schema: None,
                    })
                    .collect();
                let results = shard.create_topics(new, false).await;
                for (name, r) in missing.into_iter().zip(results) {
                    match r {
                        Ok(m) => topics.push(topic_entry(shard, &m)),
                        Err(e) if e.code == ErrorCode::TopicAlreadyExists => {
                            if let Some(m) = shard.catalog().topic(&name) {
                                topics.push(topic_entry(shard, m));
                            }
                        }
                        Err(e) => topics.push(
                            MetadataResponseTopic::default()
                                .with_error_code(e.code.code())
                                .with_name(Some(TopicName(str(&name)))),
                        ),
                    }
                }
            }
        }
    }
    MetadataResponse::default()
        .with_brokers(
            shard
                .brokers()
                .into_iter()
                .map(|b| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.id))
                        .with_host(str(&b.host))
                        .with_port(b.port as i32)
                        .with_rack(b.rack.as_deref().map(str))
                })
                .collect(),
        )
        .with_cluster_id(Some(str(&shard.catalog().cluster_id)))
        .with_controller_id(BrokerId(shard.controller_id()))
        .with_topics(topics)
}

/// A topic's partitions: each one's leader and leader epoch, replicas,
/// in-sync replicas and replicas on fenced nodes; one with no live leader
/// has LEADER_NOT_AVAILABLE until one is back.
fn topic_entry(shard: &weir_core::shard::Shard, t: &TopicMeta) -> MetadataResponseTopic {
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str(&t.name))))
        .with_topic_id(uuid::Uuid::from_bytes(t.id))
        .with_partitions(
            (0..t.partitions())
                .map(|p| {
                    let v = shard.partition_view(t, p);
                    let out = MetadataResponsePartition::default()
                        .with_partition_index(p)
                        .with_leader_epoch(v.leader_epoch)
                        .with_leader_id(BrokerId(v.leader.unwrap_or(-1)))
                        .with_replica_nodes(ids(v.replicas))
                        .with_isr_nodes(ids(v.isr))
                        .with_offline_replicas(ids(v.offline));
                    match v.leader {
                        Some(_) => out,
                        None => out.with_error_code(ErrorCode::LeaderNotAvailable.code()),
                    }
                })
                .collect(),
        )
}
