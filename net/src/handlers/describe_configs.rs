//! DescribeConfigs (key 32): every config of a topic with its value and
//! source; a node's configs under Kafka's names (`node_configs`).

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use weir_core::catalog::topic_config::{self, Spec, TOPIC_CONFIGS};
use weir_core::catalog::{Catalog, DefaultFrom, TopicMeta, GROUPS_TOPIC, NODE_CONFIGS};
use weir_core::shard::Shard;
use weir_core::ErrorCode;

use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};

use super::{str, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 4;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Kafka's ConfigSource: set on the topic (or, on a broker resource, on
/// the node at run time), the cluster-wide run-time default, or the default.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_NODE: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT: i8 = 3;
const SOURCE_STATIC_NODE: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
/// Kafka's ConfigType.
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;

/// Every config of topic `t` as DescribeConfigs and CreateTopics report
/// it on node `node`: its spec, value and source (the topic's own if it
/// set it, even to the default value, as Kafka; else where the node's
/// default comes from, `Catalog::topic_default`; the group log's, weir's
/// or Kafka's). Internal configs appear only when set.
pub(super) fn topic_configs<'a>(
    t: &'a TopicMeta,
    catalog: &'a Catalog,
    node: &'a weir_core::NodeConfig,
) -> impl Iterator<Item = (&'static Spec, String, i8)> + 'a {
    TOPIC_CONFIGS.iter().filter_map(move |spec| {
        let (value, own) = t.config_value(spec.name)?;
        let source = match own {
            true => SOURCE_TOPIC,
            // The group log follows no node's defaults (weir's own configs).
            false if t.name == GROUPS_TOPIC => match spec.node_default {
                Some(_) => SOURCE_STATIC_NODE,
                None => SOURCE_DEFAULT,
            },
            false => catalog
                .topic_default(node, spec.name)
                .map_or(SOURCE_DEFAULT, |(_, from)| source_of(from)),
        };
        Some((spec, value, source))
    })
}

/// Kafka's ConfigSource of a topic config's default.
fn source_of(from: DefaultFrom) -> i8 {
    match from {
        DefaultFrom::Node => SOURCE_DYNAMIC_NODE,
        DefaultFrom::Cluster => SOURCE_DYNAMIC_DEFAULT,
        DefaultFrom::Static => SOURCE_STATIC_NODE,
        DefaultFrom::Kafka => SOURCE_DEFAULT,
    }
}

/// One node config as DescribeConfigs reports it.
struct NodeConfig {
    name: String,
    value: String,
    source: i8,
    kind: i8,
    read_only: bool,
}

/// A BROKER resource's configs. The cluster-wide default resource (an
/// empty name): the values set on it at run time. A node: the rates set
/// at run time (its own, else the cluster-wide ones); every topic
/// config's default under Kafka's node name for it (`log.retention.ms`,
/// …, from where `Catalog::topic_default_on` finds it: the node's own
/// run-time setting, the cluster-wide one, this node's flags, the
/// default);
/// and the node's own settings under Kafka's names where one exists
/// (read-only: its flags, environment or file set them at start).
fn node_configs(shard: &Shard, catalog: &Catalog, resource: &str) -> Vec<NodeConfig> {
    let cluster_wide = catalog.node_configs.get("");
    if resource.is_empty() {
        return cluster_wide
            .into_iter()
            .flatten()
            .map(|(n, v)| NodeConfig {
                name: n.clone(),
                value: v.clone(),
                source: SOURCE_DYNAMIC_DEFAULT,
                kind: topic_config::of_node_synonym(n)
                    .and_then(topic_config::spec)
                    .map_or(TYPE_LONG, |s| s.kind.type_code()),
                read_only: false,
            })
            .collect();
    }
    let mut out = Vec::new();
    let own = catalog.node_configs.get(resource);
    for name in NODE_CONFIGS {
        let set = own
            .and_then(|c| c.get(name).map(|v| (v, SOURCE_DYNAMIC_NODE)))
            .or_else(|| {
                cluster_wide.and_then(|c| c.get(name).map(|v| (v, SOURCE_DYNAMIC_DEFAULT)))
            });
        if let Some((value, source)) = set {
            out.push(NodeConfig {
                name: name.to_string(),
                value: value.clone(),
                source,
                kind: TYPE_LONG,
                read_only: false,
            });
        }
    }
    for &(topic, name) in topic_config::NODE_SYNONYMS {
        let spec = topic_config::spec(topic).expect("a topic config");
        let (value, from) = catalog
            .topic_default_on(resource, &shard.config.topic_defaults, topic)
            .expect("a topic config");
        out.push(NodeConfig {
            name: name.to_string(),
            value,
            source: source_of(from),
            kind: spec.kind.type_code(),
            read_only: false,
        });
    }
    let c = &shard.config;
    let ms = |d: std::time::Duration| d.as_millis().to_string();
    let statics: [(&str, String, i8); 14] = [
        ("node.id", c.node_id.to_string(), TYPE_INT),
        ("broker.id", c.node_id.to_string(), TYPE_INT),
        ("num.partitions", c.default_partitions.to_string(), TYPE_INT),
        ("default.replication.factor", "1".into(), TYPE_INT),
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            TYPE_BOOLEAN,
        ),
        ("log.dirs", c.data_dir.display().to_string(), TYPE_STRING),
        (
            "socket.request.max.bytes",
            c.max_request_bytes.to_string(),
            TYPE_INT,
        ),
        ("fetch.max.bytes", c.fetch_max_bytes.to_string(), TYPE_INT),
        ("max.connections", c.max_connections.to_string(), TYPE_INT),
        (
            "log.retention.check.interval.ms",
            ms(c.retention_check_interval),
            TYPE_LONG,
        ),
        (
            "log.cleaner.backoff.ms",
            ms(c.compaction_check_interval),
            TYPE_LONG,
        ),
        (
            "log.cleaner.dedupe.buffer.size",
            c.compaction_map_bytes.to_string(),
            TYPE_LONG,
        ),
        (
            "replica.lag.time.max.ms",
            ms(c.replica_lag_time_max),
            TYPE_LONG,
        ),
        ("producer.id.expiration.ms", ms(c.producer_expiry), TYPE_INT),
    ];
    out.extend(statics.into_iter().map(|(name, value, kind)| NodeConfig {
        name: name.to_string(),
        value,
        source: SOURCE_STATIC_NODE,
        kind,
        read_only: true,
    }));
    out
}

pub async fn handle(cx: &RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let catalog = shard.catalog();
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let out = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let (kind, name) = match r.resource_type {
                RESOURCE_TOPIC => (ResourceType::Topic, r.resource_name.as_str()),
                _ => (ResourceType::Cluster, CLUSTER),
            };
            // Null or empty keys mean every config, as Kafka.
            let keys = r.configuration_keys.clone();
            let wanted = move |n: &str| {
                keys.as_ref()
                    .is_none_or(|keys| keys.is_empty() || keys.iter().any(|k| &**k == n))
            };
            if !caller.may(shard, Operation::DescribeConfigs, kind, name) {
                let code = match kind {
                    ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
                    _ => ErrorCode::ClusterAuthorizationFailed,
                };
                let why = format!(
                    "{} may not describe the configs of {name}",
                    caller.principal
                );
                return out
                    .with_error_code(code.code())
                    .with_error_message(Some(str(&why)));
            }
            match r.resource_type {
                RESOURCE_TOPIC => match catalog.topic(&r.resource_name) {
                    Some(t) => out.with_configs(
                        topic_configs(t, &catalog, &shard.config)
                            .filter(|(spec, _, _)| wanted(spec.name))
                            .map(|(spec, value, source)| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(str(spec.name))
                                    .with_config_source(source)
                                    .with_config_type(spec.kind.type_code())
                                    .with_value(Some(str(&value)))
                                    .with_read_only(false)
                                    .with_is_sensitive(false)
                            })
                            .collect(),
                    ),
                    None => out
                        .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str(&format!(
                            "topic {:?} does not exist",
                            &*r.resource_name
                        )))),
                },
                RESOURCE_BROKER => out.with_configs(
                    node_configs(shard, &catalog, &r.resource_name)
                        .into_iter()
                        .filter(|c| wanted(&c.name))
                        .map(|c| {
                            DescribeConfigsResourceResult::default()
                                .with_name(str(&c.name))
                                .with_config_source(c.source)
                                .with_config_type(c.kind)
                                .with_value(Some(str(&c.value)))
                                .with_read_only(c.read_only)
                                .with_is_sensitive(false)
                        })
                        .collect(),
                ),
                other => out
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str(&format!(
                        "resource type {other} is not described by this node"
                    )))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
