//! LeaveGroup (key 13): one member (v0–2) or several at once (v3+, static
//! members by instance id).

use super::RequestContext;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(cx: &RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let group = req.group_id.0.to_string();
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let (g, asked) = (group.clone(), members.clone());
    let codes = shard
        .on_group(&group, move |s| async move { s.groups.leave(&g, &asked) })
        .await
        .unwrap_or_else(|e| vec![e.code; members.len()]);
    if version < 3 {
        return LeaveGroupResponse::default().with_error_code(codes[0].code());
    }
    LeaveGroupResponse::default().with_members(
        req.members
            .into_iter()
            .zip(codes)
            .map(|(m, code)| {
                MemberResponse::default()
                    .with_member_id(m.member_id)
                    .with_group_instance_id(m.group_instance_id)
                    .with_error_code(code.code())
            })
            .collect(),
    )
}
