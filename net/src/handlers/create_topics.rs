//! CreateTopics (key 19): partitions, configs, validate-only.

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use weir_core::shard::NewTopic;

use super::describe_configs::topic_configs;
use super::{denied_topic, error_parts, only_allowed, str, RequestContext};

pub const MIN: i16 = 2;
pub const MAX: i16 = 7;

pub async fn handle(cx: &RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let names: Vec<_> = req.topics.iter().map(|t| t.name.clone()).collect();
    let new = req
        .topics
        .into_iter()
        .map(|t| NewTopic {
            name: t.name.0.to_string(),
            partitions: if t.assignments.is_empty() {
                t.num_partitions
            } else {
                t.assignments.len() as i32
            },
            replication_factor: if t.assignments.is_empty() {
                t.replication_factor
            } else {
                -1
            },
            assignments: t
                .assignments
                .iter()
                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                .collect(),
            configs: t
                .configs
                .into_iter()
                .map(|c| (c.name.to_string(), c.value.map(|v| v.to_string())))
                .collect(),
            schema: None,
        })
        .collect();
    let results = only_allowed(
        new,
        |t: &NewTopic| caller.may_create(shard, &t.name),
        |t| Err(denied_topic(caller, "create", &t.name)),
        |new| shard.create_topics(new, req.validate_only),
    )
    .await;
    let topics = names
        .into_iter()
        .zip(results)
        .map(|(name, r)| {
            let t = CreatableTopicResult::default().with_name(name);
            match r {
                Ok(meta) => {
                    let t = t
                        .with_num_partitions(meta.partitions())
                        .with_replication_factor(meta.replication_factor() as i16)
                        .with_topic_id(uuid::Uuid::from_bytes(meta.id));
                    if version >= 5 {
                        t.with_configs(Some(
                            topic_configs(&meta, &shard.catalog(), &shard.config)
                                .map(|(spec, value, source)| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str(spec.name))
                                        .with_value(Some(str(&value)))
                                        .with_config_source(source)
                                        .with_read_only(false)
                                        .with_is_sensitive(false)
                                })
                                .collect(),
                        ))
                    } else {
                        t
                    }
                }
                Err(e) => {
                    let (code, message) = error_parts(&e);
                    t.with_error_code(code)
                        .with_error_message(message)
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                }
            }
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}
