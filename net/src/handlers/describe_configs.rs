//! DescribeConfigs (key 32): a topic's real config values; a broker's,
//! the node configs changed at run time (`catalog::NODE_CONFIGS`).

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use weir_core::catalog::topic_config::{Spec, TOPIC_CONFIGS};
use weir_core::catalog::TopicMeta;
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
/// Kafka's ConfigType LONG (the node configs' rates).
const TYPE_LONG: i8 = 5;

/// Every config of topic `t` as DescribeConfigs and CreateTopics report
/// it: its spec, value and source (the topic's own if it set it, even to
/// the default value, as Kafka; a default of this node's own where it
/// differs from Kafka's; else Kafka's default). Internal configs appear
/// only when set.
pub(super) fn topic_configs(
    t: &TopicMeta,
) -> impl Iterator<Item = (&'static Spec, String, i8)> + '_ {
    TOPIC_CONFIGS.iter().filter_map(move |spec| {
        let (value, own) = t.config_value(spec.name)?;
        let source = match (own || value != spec.default(), spec.node_default) {
            (true, _) => SOURCE_TOPIC,
            (false, Some(_)) => SOURCE_STATIC_NODE,
            (false, None) => SOURCE_DEFAULT,
        };
        Some((spec, value, source))
    })
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
                        topic_configs(t)
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
                RESOURCE_BROKER => {
                    // The configs changed at run time: the node's own,
                    // then the cluster-wide defaults it has not overridden.
                    let own = catalog.node_configs.get(&*r.resource_name);
                    let default = match r.resource_name.is_empty() {
                        true => None,
                        false => catalog.node_configs.get(""),
                    };
                    let own_source = match r.resource_name.is_empty() {
                        true => SOURCE_DYNAMIC_DEFAULT,
                        false => SOURCE_DYNAMIC_NODE,
                    };
                    let mut configs = Vec::new();
                    for (n, v) in own.into_iter().flatten() {
                        configs.push((n, v, own_source));
                    }
                    for (n, v) in default.into_iter().flatten() {
                        if !own.is_some_and(|o| o.contains_key(n)) {
                            configs.push((n, v, SOURCE_DYNAMIC_DEFAULT));
                        }
                    }
                    out.with_configs(
                        configs
                            .into_iter()
                            .filter(|(n, _, _)| wanted(n))
                            .map(|(n, v, source)| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(str(n))
                                    .with_config_source(source)
                                    .with_config_type(TYPE_LONG)
                                    .with_value(Some(str(v)))
                            })
                            .collect(),
                    )
                }
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
