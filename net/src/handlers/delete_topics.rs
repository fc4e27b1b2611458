//! DeleteTopics (key 20): by name (v1–5) or by name or id (v6).

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use weir_core::ErrorCode;

use weir_core::auth::acl::{Operation, ResourceType};

use super::{denied_topic, error_parts, only_allowed, str, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 6;

pub async fn handle(cx: &RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let catalog = shard.catalog();
    // (name if known, id as asked)
    let asked: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| match t.name {
                Some(n) => (Some(n.0.to_string()), t.topic_id),
                None => (
                    catalog
                        .topic_by_id(t.topic_id.as_bytes())
                        .map(|m| m.name.clone()),
                    t.topic_id,
                ),
            })
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let known: Vec<String> = asked.iter().filter_map(|(n, _)| n.clone()).collect();
    let mut results = only_allowed(
        known,
        |t: &String| caller.may(shard, Operation::Delete, ResourceType::Topic, t),
        |t| Err(denied_topic(caller, "delete", t)),
        |known| shard.delete_topics(known),
    )
    .await
    .into_iter();
    let responses = asked
        .into_iter()
        .map(|(name, id)| {
            let r = DeletableTopicResult::default().with_topic_id(id);
            let Some(name) = name else {
                return r.with_error_code(ErrorCode::UnknownTopicId.code());
            };
            let r = r.with_name(Some(TopicName(str(&name))));
            match results.next() {
                Some(Ok(id)) => r.with_topic_id(uuid::Uuid::from_bytes(id)),
                Some(Err(e)) => {
                    let (code, message) = error_parts(&e);
                    r.with_error_code(code).with_error_message(message)
                }
                None => r.with_error_code(ErrorCode::UnknownServerError.code()),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}
