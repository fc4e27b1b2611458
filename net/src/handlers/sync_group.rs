//! SyncGroup (key 14): the leader hands in the assignment; every member
//! gets its part once the leader has.

use std::rc::Rc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use weir_core::groups::group::SyncResult;
use weir_core::Shard;

use super::str;

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(shard: &Rc<Shard>, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    let group = req.group_id.0.to_string();
    let g = group.clone();
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.map(|s| s.to_string());
    let (ptype, pname) = (
        req.protocol_type.map(|s| s.to_string()),
        req.protocol_name.map(|s| s.to_string()),
    );
    let assignments: Vec<_> = req
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment))
        .collect();
    let generation = req.generation_id;
    let r = shard
        .on_group(&group, move |s| async move {
            s.groups
                .sync(
                    &g,
                    &member,
                    instance.as_deref(),
                    generation,
                    ptype.as_deref(),
                    pname.as_deref(),
                    assignments,
                )
                .await
        })
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
