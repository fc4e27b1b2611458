//! Heartbeat (key 12): keeps a member's session alive and tells it when a
//! rebalance has started (REBALANCE_IN_PROGRESS).

use super::RequestContext;
use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

pub const MIN: i16 = 0;
pub const MAX: i16 = 4;

pub async fn handle(cx: &RequestContext, req: HeartbeatRequest) -> HeartbeatResponse {
    let shard = &cx.shard;
    let group = req.group_id.0.to_string();
    let g = group.clone();
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.map(|s| s.to_string());
    let generation = req.generation_id;
    let code = shard
        .on_group(&group, move |s| async move {
            s.groups
                .heartbeat(&g, &member, instance.as_deref(), generation)
        })
        .await
        .unwrap_or_else(|e| e.code);
    HeartbeatResponse::default().with_error_code(code.code())
}
