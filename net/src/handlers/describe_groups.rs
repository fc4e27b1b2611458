//! DescribeGroups (key 15): state, protocol and members of each group. A
//! group the node does not know is "Dead", and from v6 (KIP-1043) also
//! GROUP_ID_NOT_FOUND with a message, as Kafka answers.

use futures::future::join_all;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::{ErrorCode, KafkaError};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 6;

/// READ, DELETE and DESCRIBE on a group (Kafka's AclOperation bits): what
/// every client may do on an unsecured node.
pub(crate) const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

pub async fn handle(cx: &RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let include_ops = req.include_authorized_operations;
    let asks = req.groups.into_iter().map(|id| {
        let g = id.0.to_string();
        let allowed = caller.may(shard, Operation::Describe, ResourceType::Group, &g);
        async move {
            if !allowed {
                let why = format!("{} may not describe group {g:?}", caller.principal);
                let denied = KafkaError::new(ErrorCode::GroupAuthorizationFailed, why);
                return (id, Err(denied));
            }
            let r = shard
                .on_group(&g.clone(), move |s| async move { s.groups.describe(&g) })
                .await;
            (id, r)
        }
    });
    let groups = join_all(asks)
        .await
        .into_iter()
        .map(|(id, r)| {
            let d = match r {
                Ok(d) if version >= 6 && d.state == "Dead" => Err(KafkaError::new(
                    ErrorCode::GroupIdNotFound,
                    format!("Group {} not found.", id.0),
                )),
                r => r,
            };
            let d = match d {
                Ok(d) => d,
                Err(e) => {
                    let g = DescribedGroup::default()
                        .with_group_id(id)
                        .with_error_code(e.code.code())
                        .with_group_state(str("Dead"));
                    return if version >= 6 {
                        g.with_error_message(Some(str(&e.message)))
                    } else {
                        g
                    };
                }
            };
            let g = DescribedGroup::default()
                .with_group_id(id)
                .with_group_state(str(d.state))
                .with_protocol_type(str(&d.protocol_type))
                .with_protocol_data(str(&d.protocol))
                .with_members(
                    d.members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(str(&m.member_id))
                                .with_group_instance_id(if version >= 4 {
                                    m.instance_id.map(|i| str(&i))
                                } else {
                                    None
                                })
                                .with_client_id(str(&m.client_id))
                                .with_client_host(str(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect(),
                );
            if version >= 3 {
                g.with_authorized_operations(if include_ops {
                    GROUP_OPERATIONS
                } else {
                    i32::MIN
                })
            } else {
                g
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
