//! AlterConfigs (key 33), the legacy call that kafka-python, Sarama and
//! many operators still send: each resource's configs are replaced whole.
//! What the request names is set; every other config of the resource goes
//! back to its default (Kafka's `ConfigAdminManager.alterConfigs` replaces
//! the resource's properties). Served by `incremental_alter_configs`'s
//! `alter_resources`, as the same deletes and sets.

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};
use weir_core::catalog::topic_config::{NODE_SYNONYMS, TOPIC_CONFIGS};
use weir_core::catalog::NODE_CONFIGS;
use weir_core::shard::ConfigChange;

use super::incremental_alter_configs::{
    alter_resources, resource_responses, RESOURCE_BROKER, RESOURCE_TOPIC,
};
use super::RequestContext;

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

/// IncrementalAlterConfigs' operations.
const SET: i8 = 0;
const DELETE: i8 = 1;

pub async fn handle(cx: &RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let resources = req
        .resources
        .into_iter()
        .map(|r| {
            let named: Vec<String> = r.configs.iter().map(|c| c.name.to_string()).collect();
            let all: &[&str] = match r.resource_type {
                RESOURCE_TOPIC => &TOPIC_CONFIGS.iter().map(|s| s.name).collect::<Vec<_>>(),
                RESOURCE_BROKER => &NODE_CONFIGS
                    .iter()
                    .copied()
                    .chain(NODE_SYNONYMS.iter().map(|(_, n)| *n))
                    .collect::<Vec<_>>(),
                _ => &[],
            };
            // The defaults first, then what is named (a null value is a
            // default too).
            let mut ops: Vec<ConfigChange> = all
                .iter()
                .filter(|n| !named.iter().any(|m| m == *n))
                .map(|n| ConfigChange {
                    name: n.to_string(),
                    op: DELETE,
                    value: None,
                })
                .collect();
            ops.extend(r.configs.into_iter().map(|c| ConfigChange {
                name: c.name.to_string(),
                op: if c.value.is_some() { SET } else { DELETE },
                value: c.value.map(|v| v.to_string()),
            }));
            (r.resource_type, r.resource_name, ops)
        })
        .collect();
    let results = alter_resources(cx, resources, req.validate_only).await;
    AlterConfigsResponse::default()
        .with_responses(resource_responses!(AlterConfigsResourceResponse, results))
}
