//! DescribeUserScramCredentials (key 50): each user's SCRAM mechanisms and
//! iteration counts (never the verifiers). Needs DESCRIBE on the cluster.

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::auth::users::{ScramHash, User};
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

fn infos(u: &User) -> Vec<CredentialInfo> {
    [ScramHash::Sha256, ScramHash::Sha512]
        .into_iter()
        .filter_map(|h| {
            u.scram(h).map(|v| {
                CredentialInfo::default()
                    .with_mechanism(h.code())
                    .with_iterations(v.iterations as i32)
            })
        })
        .collect()
}

pub async fn handle(
    cx: &RequestContext,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    if !caller.may(shard, Operation::Describe, ResourceType::Cluster, CLUSTER) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str(&format!(
                "{} may not describe credentials",
                caller.principal
            ))));
    }
    let catalog = shard.catalog();
    let with_scram = |u: &&User| u.scram_sha_256.is_some() || u.scram_sha_512.is_some();
    let results = match req.users {
        // Every user that has a SCRAM credential.
        None => catalog
            .users
            .values()
            .filter(with_scram)
            .map(|u| {
                DescribeUserScramCredentialsResult::default()
                    .with_user(str(&u.name))
                    .with_credential_infos(infos(u))
            })
            .collect(),
        Some(names) => {
            let mut seen = std::collections::HashSet::new();
            let repeated: std::collections::HashSet<String> = names
                .iter()
                .filter(|n| !seen.insert(n.name.to_string()))
                .map(|n| n.name.to_string())
                .collect();
            let mut answered = std::collections::HashSet::new();
            names
                .into_iter()
                .filter(|n| answered.insert(n.name.to_string()))
                .map(|n| {
                    let r = DescribeUserScramCredentialsResult::default().with_user(n.name.clone());
                    let name = n.name.to_string();
                    if repeated.contains(&name) {
                        return r
                            .with_error_code(ErrorCode::DuplicateResource.code())
                            .with_error_message(Some(str(&format!("{name} is asked for twice"))));
                    }
                    match catalog.users.get(&name).filter(|u| with_scram(u)) {
                        Some(u) => r.with_credential_infos(infos(u)),
                        None => r
                            .with_error_code(ErrorCode::ResourceNotFound.code())
                            .with_error_message(Some(str(&format!(
                                "attempt to describe a user credential that does not exist: {name}"
                            )))),
                    }
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
