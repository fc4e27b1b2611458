//! JoinGroup (key 11): carried to the shard coordinating the group, which
//! answers when the rebalance completes.

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use weir_core::groups::group::{JoinRequest, JoinResult};
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 9;

pub async fn handle(cx: &RequestContext, req: JoinGroupRequest) -> JoinGroupResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let client_id = cx.client_id();
    let client_host = cx.caller.host.to_string();
    let group = req.group_id.0.to_string();
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.map(|s| s.to_string()),
        client_id,
        client_host,
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let member = join.member_id.clone();
    let g = group.clone();
    let result = shard
        .on_group(
            &group,
            move |s| async move { s.groups.join(&g, join).await },
        )
        .await
        .unwrap_or_else(|e| JoinResult::error(e.code, &member));
    response(result, version)
}

fn response(r: JoinResult, version: i16) -> JoinGroupResponse {
    // The protocol name is nullable from v7 only.
    let protocol_name = match r.protocol_name {
        Some(n) => Some(str(&n)),
        None if version < 7 => Some(str("")),
        None => None,
    };
    let mut resp = JoinGroupResponse::default()
        .with_error_code(r.error.code())
        .with_generation_id(r.generation_id)
        .with_protocol_name(protocol_name)
        .with_leader(str(&r.leader))
        .with_member_id(str(&r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str(&m.member_id))
                        .with_group_instance_id(if version >= 5 {
                            m.instance_id.map(|i| str(&i))
                        } else {
                            None
                        })
                        .with_metadata(m.metadata)
                })
                .collect(),
        );
    if version >= 7 {
        resp = resp.with_protocol_type(r.protocol_type.map(|t| str(&t)));
    }
    if version >= 9 {
        resp = resp.with_skip_assignment(r.skip_assignment);
    }
    if r.error != ErrorCode::None {
        resp.members.clear();
    }
    resp
}
