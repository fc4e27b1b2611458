//! DeleteGroups (key 42): an empty group and its committed offsets go,
//! durably; a group with members is refused (NON_EMPTY_GROUP).

use futures::future::join_all;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::ErrorCode;

use super::RequestContext;

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

pub async fn handle(cx: &RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let asks = req.groups_names.into_iter().map(|id| {
        let g = id.0.to_string();
        let allowed = caller.may(shard, Operation::Delete, ResourceType::Group, &g);
        async move {
            if !allowed {
                return DeletableGroupResult::default()
                    .with_group_id(id)
                    .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
            }
            let code = shard
                .on_group(
                    &g.clone(),
                    move |s| async move { s.groups.delete(&g).await },
                )
                .await
                .unwrap_or_else(|e| e.code);
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(code.code())
        }
    });
    DeleteGroupsResponse::default().with_results(join_all(asks).await)
}
