//! ConsumerGroupDescribe (key 69, KIP-848): a consumer group's epochs,
//! assignor and members with what each owns and is meant to own. A group
//! that is not a consumer group of the new protocol is GROUP_ID_NOT_FOUND,
//! as Kafka answers (the admin client then asks DescribeGroups).

use std::collections::BTreeSet;

use futures::future::join_all;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::catalog::Catalog;
use weir_core::groups::consumer::Tp;
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

use super::describe_groups::GROUP_OPERATIONS;

pub async fn handle(
    cx: &RequestContext,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let include_ops = req.include_authorized_operations;
    let asks = req.group_ids.into_iter().map(|id| {
        let g = id.0.to_string();
        let allowed = caller.may(shard, Operation::Describe, ResourceType::Group, &g);
        async move {
            if !allowed {
                let why = format!("{} may not describe group {g:?}", caller.principal);
                return (id, Err((ErrorCode::GroupAuthorizationFailed, why)));
            }
            let r = shard
                .on_group(
                    &g.clone(),
                    move |s| async move { s.groups.consumer_group(&g) },
                )
                .await;
            (id, r.map_err(|e| (e.code, e.message)))
        }
    });
    let catalog = shard.catalog();
    let groups = join_all(asks)
        .await
        .into_iter()
        .map(|(id, r)| {
            let c = match r {
                Ok(Some(c)) => c,
                Ok(None) => {
                    let message = format!("Group {} is not a consumer group.", id.0);
                    return DescribedGroup::default()
                        .with_group_id(id)
                        .with_error_code(ErrorCode::GroupIdNotFound.code())
                        .with_error_message(Some(str(&message)))
                        .with_group_state(str("Dead"));
                }
                Err((code, message)) => {
                    return DescribedGroup::default()
                        .with_group_id(id)
                        .with_error_code(code.code())
                        .with_error_message(Some(str(&message)))
                        .with_group_state(str("Dead"))
                }
            };
            let members = c
                .members
                .values()
                .map(|m| {
                    Member::default()
                        .with_member_id(str(&m.id))
                        .with_instance_id(m.instance_id.as_deref().map(str))
                        .with_rack_id(m.rack_id.as_deref().map(str))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str(&m.client_id))
                        .with_client_host(str(&m.client_host))
                        .with_subscribed_topic_regex(m.regex.as_ref().map(|(r, _)| str(r)))
                        .with_subscribed_topic_names(
                            m.subscribed.iter().map(|t| TopicName(str(t))).collect(),
                        )
                        .with_assignment(assignment(&catalog, &m.assigned))
                        .with_target_assignment(assignment(
                            &catalog,
                            &c.target.get(&m.id).cloned().unwrap_or_default(),
                        ))
                        .with_member_type(1)
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_group_state(str(c.state()))
                .with_group_epoch(c.epoch)
                .with_assignment_epoch(c.target_epoch)
                .with_assignor_name(str(c.assignor()))
                .with_members(members)
                .with_authorized_operations(if include_ops {
                    GROUP_OPERATIONS
                } else {
                    i32::MIN
                })
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

fn assignment(catalog: &Catalog, tps: &BTreeSet<Tp>) -> Assignment {
    let mut topics: Vec<TopicPartitions> = Vec::new();
    for tp in tps {
        let (topic, p) = (tp.topic(), &tp.partition);
        let Some(meta) = catalog.topic(topic) else {
            continue;
        };
        match topics.last_mut() {
            Some(t) if t.topic_name.0.as_str() == topic => t.partitions.push(*p),
            _ => topics.push(
                TopicPartitions::default()
                    .with_topic_id(uuid::Uuid::from_bytes(meta.id))
                    .with_topic_name(TopicName(str(topic)))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    Assignment::default().with_topic_partitions(topics)
}
