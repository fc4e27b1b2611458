//! SyncGroup (key 14): the leader hands in the assignment; every member
//! gets its part once the leader has.

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use weir_core::groups::group::{SyncRequest, SyncResult};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(cx: &RequestContext, req: SyncGroupRequest) -> SyncGroupResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let group = req.group_id.0.to_string();
    let sync = SyncRequest {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.map(|s| s.to_string()),
        generation: req.generation_id,
        protocol_type: req.protocol_type.map(|s| s.to_string()),
        protocol_name: req.protocol_name.map(|s| s.to_string()),
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let g = group.clone();
    let r = shard
        .on_group(
            &group,
            move |s| async move { s.groups.sync(&g, sync).await },
        )
        .await
        .unwrap_or_else(|e| SyncResult::error(e.code));
    let mut resp = SyncGroupResponse::default()
        .with_error_code(r.error.code())
        .with_assignment(r.assignment);
    if version >= 5 {
        resp = resp
            .with_protocol_type(r.protocol_type.map(|t| str(&t)))
            .with_protocol_name(r.protocol_name.map(|n| str(&n)));
    }
    resp
}
