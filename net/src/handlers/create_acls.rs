//! CreateAcls (key 30): adds ACLs, durably (the catalog), before the
//! answer. Needs ALTER on the cluster.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};
use weir_core::auth::acl::{Acl, Operation, PatternType, Permission, ResourceType, CLUSTER};
use weir_core::{ErrorCode, KafkaError};

use super::{str, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 3;

/// An ACL as asked for, or why it cannot be one.
fn acl(c: &kafka_protocol::messages::create_acls_request::AclCreation) -> Result<Acl, String> {
    let resource = ResourceType::from_code(c.resource_type)
        .ok_or_else(|| format!("resource type {} is not one an ACL names", c.resource_type))?;
    let pattern = PatternType::from_code(c.resource_pattern_type).ok_or_else(|| {
        format!(
            "pattern type {} is not LITERAL (3) or PREFIXED (4)",
            c.resource_pattern_type
        )
    })?;
    let operation = Operation::from_code(c.operation)
        .ok_or_else(|| format!("operation {} is not one an ACL grants", c.operation))?;
    let permission = Permission::from_code(c.permission_type).ok_or_else(|| {
        format!(
            "permission {} is not DENY (2) or ALLOW (3)",
            c.permission_type
        )
    })?;
    if !c.principal.starts_with("User:") {
        return Err(format!(
            "principal {:?} is not User:name",
            c.principal.as_str()
        ));
    }
    if resource == ResourceType::Cluster && c.resource_name.as_str() != CLUSTER {
        return Err(format!("the cluster resource is named {CLUSTER}"));
    }
    Ok(Acl {
        resource,
        pattern,
        name: c.resource_name.to_string(),
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation,
        permission,
    })
}

pub async fn handle(cx: &RequestContext, req: CreateAclsRequest) -> CreateAclsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let n = req.creations.len();
    if !caller.may(shard, Operation::Alter, ResourceType::Cluster, CLUSTER) {
        let why = format!("{} may not create ACLs", caller.principal);
        let refused = AclCreationResult::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str(&why)));
        return CreateAclsResponse::default().with_results(vec![refused; n]);
    }
    let asked: Vec<Result<Acl, String>> = req.creations.iter().map(acl).collect();
    let valid: Vec<Acl> = asked.iter().filter_map(|a| a.clone().ok()).collect();
    let saved = shard
        .change_access(move |cat| {
            for a in valid {
                if !cat.acls.contains(&a) {
                    cat.acls.push(a);
                }
            }
            Ok::<_, KafkaError>(())
        })
        .await;
    let results = asked
        .into_iter()
        .map(|a| match (a, &saved) {
            (Err(why), _) => AclCreationResult::default()
                .with_error_code(ErrorCode::InvalidRequest.code())
                .with_error_message(Some(str(&why))),
            (Ok(_), Err(e)) => AclCreationResult::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str(&e.message))),
            (Ok(_), Ok(())) => AclCreationResult::default(),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}
