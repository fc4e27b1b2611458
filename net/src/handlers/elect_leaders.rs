//! ElectLeaders (key 43): `kafka-leader-election.sh` and the admin
//! clients' `electLeaders`. A preferred election (type 0) moves each
//! partition's leadership to its first replica if that one is live and in
//! sync; an unclean one (type 1) gives a partition with no live leader any
//! live replica. The quorum decides (`replication::elect`); the answer
//! comes once this node installed the outcome. No partitions named
//! (null): every replicated partition, answering only those an election
//! changed or could not.

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::replication::Election;
use weir_core::ErrorCode;

use super::{error_parts, str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

pub async fn handle(cx: &RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse {
    let shard = &cx.shard;
    if !cx
        .caller
        .may(shard, Operation::Alter, ResourceType::Cluster, CLUSTER)
    {
        let why = format!(
            "{} may not elect leaders (ALTER on the cluster)",
            cx.caller.principal
        );
        return answer_all(
            &req,
            cx.version,
            ErrorCode::ClusterAuthorizationFailed.code(),
            &why,
        );
    }
    // Version 0 has no type: a preferred election.
    let unclean = match req.election_type {
        PREFERRED => false,
        UNCLEAN => true,
        other => {
            return answer_all(
                &req,
                cx.version,
                ErrorCode::InvalidRequest.code(),
                &format!("election type {other} is neither preferred (0) nor unclean (1)"),
            )
        }
    };
    let asked = req.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p)))
            .collect::<Vec<_>>()
    });
    match shard.elect_leaders(asked, unclean).await {
        Ok(results) => {
            let mut by_topic: Vec<ReplicaElectionResult> = Vec::new();
            for (topic, p, election) in results {
                let (code, message) = outcome(&election, unclean);
                let r = PartitionResult::default()
                    .with_partition_id(p)
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str(&m)));
                match by_topic.iter_mut().find(|t| t.topic.0.as_str() == topic) {
                    Some(t) => t.partition_result.push(r),
                    None => by_topic.push(
                        ReplicaElectionResult::default()
                            .with_topic(TopicName(str(&topic)))
                            .with_partition_result(vec![r]),
                    ),
                }
            }
            ElectLeadersResponse::default().with_replica_election_results(by_topic)
        }
        Err(e) => {
            let (code, message) = error_parts(&e);
            let message = message.map(|m| m.to_string()).unwrap_or_default();
            answer_all(&req, cx.version, code, &message)
        }
    }
}

/// A partition's error code and message for what its election did.
fn outcome(e: &Election, unclean: bool) -> (i16, Option<String>) {
    match e {
        Election::Elected => (0, None),
        Election::NotNeeded => (
            ErrorCode::ElectionNotNeeded.code(),
            Some("the leader asked for leads already".into()),
        ),
        Election::NotAvailable(why) => (
            match unclean {
                true => ErrorCode::EligibleLeadersNotAvailable.code(),
                false => ErrorCode::PreferredLeaderNotAvailable.code(),
            },
            Some(why.clone()),
        ),
        Election::Unknown => (
            ErrorCode::UnknownTopicOrPartition.code(),
            Some("no such partition".into()),
        ),
    }
}

/// The answer to a request refused whole: `code` as every partition's
/// error, and the request's (which v0 has not).
fn answer_all(
    req: &ElectLeadersRequest,
    version: i16,
    code: i16,
    message: &str,
) -> ElectLeadersResponse {
    let results = req
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            PartitionResult::default()
                                .with_partition_id(p)
                                .with_error_code(code)
                                .with_error_message(Some(str(message)))
                        })
                        .collect(),
                )
        })
        .collect();
    let top = if version >= 1 { code } else { 0 };
    ElectLeadersResponse::default()
        .with_error_code(top)
        .with_replica_election_results(results)
}
