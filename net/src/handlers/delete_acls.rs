//! DeleteAcls (key 31): removes the ACLs each filter selects, durably,
//! and answers what each removed. Needs ALTER on the cluster.

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};
use weir_core::auth::acl::{Acl, AclFilter, Operation, ResourceType, CLUSTER};
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 3;

pub async fn handle(cx: &RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let refuse = |code: ErrorCode, why: &str| {
        DeleteAclsFilterResult::default()
            .with_error_code(code.code())
            .with_error_message(Some(str(why)))
    };
    let n = req.filters.len();
    if !caller.may(shard, Operation::Alter, ResourceType::Cluster, CLUSTER) {
        let why = format!("{} may not delete ACLs", caller.principal);
        let refused = refuse(ErrorCode::ClusterAuthorizationFailed, &why);
        return DeleteAclsResponse::default().with_filter_results(vec![refused; n]);
    }
    let filters: Vec<AclFilter> = req
        .filters
        .into_iter()
        .map(|f| AclFilter {
            resource: f.resource_type_filter,
            name: f.resource_name_filter.map(|n| n.to_string()),
            pattern: f.pattern_type_filter,
            principal: f.principal_filter.map(|p| p.to_string()),
            host: f.host_filter.map(|h| h.to_string()),
            operation: f.operation,
            permission: f.permission_type,
        })
        .collect();
    let invalid: Vec<Option<String>> = filters.iter().map(AclFilter::invalid).collect();
    let valid = filters.clone();
    let check = invalid.clone();
    // Each filter's matches, taken out in one durable change.
    let removed = shard
        .change_access(move |cat| {
            let mut out: Vec<Vec<Acl>> = Vec::with_capacity(valid.len());
            for (f, bad) in valid.iter().zip(&check) {
                if bad.is_some() {
                    out.push(Vec::new());
                    continue;
                }
                out.push(cat.acls.iter().filter(|a| f.matches(a)).cloned().collect());
                cat.acls.retain(|a| !f.matches(a));
            }
            Ok(out)
        })
        .await;
    let results = match removed {
        Err(e) => vec![refuse(e.code, &e.message); n],
        Ok(removed) => removed
            .into_iter()
            .zip(invalid)
            .map(|(acls, bad)| match bad {
                Some(why) => refuse(ErrorCode::InvalidRequest, &why),
                None => DeleteAclsFilterResult::default().with_matching_acls(
                    acls.into_iter()
                        .map(|a| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(a.resource as i8)
                                .with_resource_name(str(&a.name))
                                .with_pattern_type(a.pattern as i8)
                                .with_principal(str(&a.principal))
                                .with_host(str(&a.host))
                                .with_operation(a.operation as i8)
                                .with_permission_type(a.permission as i8)
                        })
                        .collect(),
                ),
            })
            .collect(),
    };
    DeleteAclsResponse::default().with_filter_results(results)
}
