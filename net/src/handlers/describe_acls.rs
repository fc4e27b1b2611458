//! DescribeAcls (key 29): the ACLs a filter selects, grouped by resource
//! (SQL grants among them). Needs DESCRIBE on the cluster.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};
use weir_core::auth::acl::{AclFilter, Operation, ResourceType, CLUSTER};
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 3;

pub async fn handle(cx: &RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    if !caller.may(shard, Operation::Describe, ResourceType::Cluster, CLUSTER) {
        return DescribeAclsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str(&format!(
                "{} may not describe ACLs",
                caller.principal
            ))));
    }
    let filter = AclFilter {
        resource: req.resource_type_filter,
        name: req.resource_name_filter.map(|n| n.to_string()),
        pattern: req.pattern_type_filter,
        principal: req.principal_filter.map(|p| p.to_string()),
        host: req.host_filter.map(|h| h.to_string()),
        operation: req.operation,
        permission: req.permission_type,
    };
    if let Some(why) = filter.invalid() {
        return DescribeAclsResponse::default()
            .with_error_code(ErrorCode::InvalidRequest.code())
            .with_error_message(Some(str(&why)));
    }
    let catalog = shard.catalog();
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for a in catalog.acls.iter().filter(|a| filter.matches(a)) {
        by_resource
            .entry((a.resource as i8, a.name.clone(), a.pattern as i8))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str(&a.principal))
                    .with_host(str(&a.host))
                    .with_operation(a.operation as i8)
                    .with_permission_type(a.permission as i8),
            );
    }
    DescribeAclsResponse::default().with_resources(
        by_resource
            .into_iter()
            .map(|((kind, name, pattern), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(kind)
                    .with_resource_name(str(&name))
                    .with_pattern_type(pattern)
                    .with_acls(acls)
            })
            .collect(),
    )
}
