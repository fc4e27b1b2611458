//! ListGroups (key 16): every group of every shard, filtered by state (v4)
//! and type (v5: "classic", or "consumer" for KIP-848 consumer groups).

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use weir_core::auth::acl::{Operation, ResourceType};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(cx: &RequestContext, req: ListGroupsRequest) -> ListGroupsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let groups = match shard.list_groups().await {
        Ok(g) => g,
        Err(e) => return ListGroupsResponse::default().with_error_code(e.code.code()),
    };
    let wants = |filter: &[kafka_protocol::protocol::StrBytes], value: &str| {
        filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
    };
    let listed = groups
        .into_iter()
        .filter(|g| version < 4 || wants(&req.states_filter, g.state))
        .filter(|g| version < 5 || wants(&req.types_filter, g.kind))
        // Only the groups the caller may describe.
        .filter(|g| caller.may(shard, Operation::Describe, ResourceType::Group, &g.group_id))
        .map(|g| {
            let mut l = ListedGroup::default()
                .with_group_id(GroupId(str(&g.group_id)))
                .with_protocol_type(str(&g.protocol_type));
            if version >= 4 {
                l = l.with_group_state(str(g.state));
            }
            if version >= 5 {
                l = l.with_group_type(str(g.kind));
            }
            l
        })
        .collect();
    ListGroupsResponse::default().with_groups(listed)
}
