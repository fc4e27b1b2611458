//! IncrementalAlterConfigs (key 44): set or reset a topic's configs
//! (`retention.ms`, `retention.bytes`, `max.message.bytes`, `segment.bytes`,
//! `segment.ms`, …); they take effect on the partitions at once. On a
//! BROKER resource (a node id, or empty for every node): the node configs
//! changeable at run time, the reassignment throttle's rates
//! (`catalog::NODE_CONFIGS`). `alter_resources` also serves the legacy
//! AlterConfigs (`alter_configs`).

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use weir_core::shard::ConfigChange;
use weir_core::ErrorCode;

use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};

use super::{denied_topic, error_parts, only_allowed, str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_BROKER: i8 = 4;

pub async fn handle(
    cx: &RequestContext,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let resources = req
        .resources
        .into_iter()
        .map(|r| {
            let ops = r
                .configs
                .into_iter()
                .map(|c| ConfigChange {
                    name: c.name.to_string(),
                    op: c.config_operation,
                    value: c.value.map(|v| v.to_string()),
                })
                .collect();
            (r.resource_type, r.resource_name, ops)
        })
        .collect();
    let results = alter_resources(cx, resources, req.validate_only).await;
    IncrementalAlterConfigsResponse::default()
        .with_responses(resource_responses!(AlterConfigsResourceResponse, results))
}

/// `alter_resources`' results as answers of type `$response`: the two
/// config calls answer with kafka-protocol's two `AlterConfigsResourceResponse`
/// types, the same fields in each.
macro_rules! resource_responses {
    ($response:ty, $results:expr) => {
        $results
            .into_iter()
            .map(|(kind, name, code, message)| {
                <$response>::default()
                    .with_resource_type(kind)
                    .with_resource_name(name)
                    .with_error_code(code)
                    .with_error_message(message)
            })
            .collect()
    };
}
pub(super) use resource_responses;

/// Applies each resource's (type, name, changes), topics and nodes alike,
/// as the caller may; answers each one's (type, name, error code, error
/// message), in the request's order.
pub(super) async fn alter_resources(
    cx: &RequestContext,
    resources: Vec<(i8, StrBytes, Vec<ConfigChange>)>,
    validate_only: bool,
) -> Vec<(i8, StrBytes, i16, Option<StrBytes>)> {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let mut topics = Vec::new();
    let mut nodes = Vec::new();
    // (type, name, index into topics or nodes, or None)
    let mut order = Vec::new();
    for (kind, name, ops) in resources {
        match kind {
            RESOURCE_TOPIC => {
                order.push((kind, name.clone(), Some(topics.len())));
                topics.push((name.to_string(), ops));
            }
            RESOURCE_BROKER => {
                order.push((kind, name.clone(), Some(nodes.len())));
                nodes.push((name.to_string(), ops));
            }
            _ => order.push((kind, name, None)),
        }
    }
    let node_results = match nodes.is_empty() {
        true => Vec::new(),
        false => match caller.may(
            shard,
            Operation::AlterConfigs,
            ResourceType::Cluster,
            CLUSTER,
        ) {
            true => shard.alter_node_configs(nodes, validate_only).await,
            false => {
                let why = format!(
                    "{} may not alter node configs (ALTER_CONFIGS on the cluster)",
                    caller.principal
                );
                let e = weir_core::KafkaError::new(ErrorCode::ClusterAuthorizationFailed, why);
                vec![Err(e); nodes.len()]
            }
        },
    };
    type Change = (String, Vec<ConfigChange>);
    let results = only_allowed(
        topics,
        |(t, _): &Change| caller.may(shard, Operation::AlterConfigs, ResourceType::Topic, t),
        |(t, _)| Err(denied_topic(caller, "alter the configs of", t)),
        |topics| shard.alter_topic_configs(topics, validate_only),
    )
    .await;
    order
        .into_iter()
        .map(|(kind, name, i)| {
            let results = match kind {
                RESOURCE_BROKER => &node_results,
                _ => &results,
            };
            let (code, message) = match i.map(|i| &results[i]) {
                Some(Ok(())) => (0, None),
                Some(Err(e)) => error_parts(e),
                None => (
                    ErrorCode::InvalidRequest.code(),
                    Some(str(&format!(
                        "resource type {kind} has no configs to alter on this node"
                    ))),
                ),
            };
            (kind, name, code, message)
        })
        .collect()
}
