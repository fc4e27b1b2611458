//! AlterPartitionReassignments (key 45): `kafka-reassign-partitions.sh
//! --execute` and the admin clients' `alterPartitionReassignments`. Each
//! partition named moves to its target replicas (KIP-455): the new ones
//! catch up from the leader, and the old ones leave only once every
//! target replica is in sync (`replication::reassign`); null replicas
//! cancel the move under way. The quorum decides; the answer comes once
//! this node installed the outcome, as Kafka's answers once the moves
//! have started.

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::replication::reassign::Reassignment;
use weir_core::ErrorCode;

use super::{error_parts, str, RequestContext};

/// A partition as asked: the index of its move, or its refusal (code,
/// message).
type Asked = Result<usize, (i16, String)>;

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

pub async fn handle(
    cx: &RequestContext,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let shard = &cx.shard;
    let answer = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(req.allow_replication_factor_change);
    if !cx
        .caller
        .may(shard, Operation::Alter, ResourceType::Cluster, CLUSTER)
    {
        return answer
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str(&format!(
                "{} may not move replicas (ALTER on the cluster)",
                cx.caller.principal
            ))));
    }
    // Each partition's own answer, in the order asked: refused here, or
    // the index of its move.
    let cat = shard.catalog();
    let mut moves = Vec::new();
    let mut order: Vec<(String, Vec<(i32, Asked)>)> = Vec::new();
    for t in req.topics {
        let topic = t.name.0.to_string();
        let mut parts = Vec::new();
        for p in t.partitions {
            let target: Option<Vec<i32>> = p
                .replicas
                .map(|r| r.into_iter().map(|b| node_of(b.0)).collect());
            let now = cat.topic(&topic).map(|m| {
                m.replicas_of(p.partition_index)
                    .map_or(1, |r| r.target().len())
            });
            let changes_factor = match (&target, now) {
                (Some(target), Some(now)) => target.len() != now,
                _ => false,
            };
            if changes_factor && !req.allow_replication_factor_change {
                parts.push((
                    p.partition_index,
                    Err((
                        ErrorCode::InvalidReplicationFactor.code(),
                        format!(
                            "{} replicas where the partition has {}, and the request does not allow the replication factor to change",
                            target.as_ref().map_or(0, Vec::len),
                            now.unwrap_or(0)
                        ),
                    )),
                ));
                continue;
            }
            parts.push((p.partition_index, Ok(moves.len())));
            moves.push((topic.clone(), p.partition_index, target));
        }
        order.push((topic, parts));
    }
    let results = match moves.is_empty() {
        true => Ok(Vec::new()),
        false => shard.reassign_partitions(moves).await,
    };
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            let (code, message) = error_parts(&e);
            return answer.with_error_code(code).with_error_message(message);
        }
    };
    let responses = order
        .into_iter()
        .map(|(topic, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, r)| {
                    let (code, message) = match r {
                        Err((code, why)) => (code, Some(why)),
                        Ok(i) => outcome(&results[i].2),
                    };
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                        .with_error_message(message.map(|m| str(&m)))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(kafka_protocol::messages::TopicName(str(&topic)))
                .with_partitions(partitions)
        })
        .collect();
    answer.with_responses(responses)
}

/// With `--shard-ports` a broker is a node's shard: its node.
fn node_of(broker: i32) -> i32 {
    match broker >= weir_core::catalog::SHARD_BROKERS {
        true => broker / weir_core::catalog::SHARD_BROKERS,
        false => broker,
    }
}

fn outcome(r: &Reassignment) -> (i16, Option<String>) {
    match r {
        Reassignment::Accepted => (0, None),
        Reassignment::NoneInProgress => (
            ErrorCode::NoReassignmentInProgress.code(),
            Some("no reassignment is moving this partition".into()),
        ),
        Reassignment::Invalid(why) => (
            ErrorCode::InvalidReplicaAssignment.code(),
            Some(why.clone()),
        ),
        Reassignment::Unknown => (
            ErrorCode::UnknownTopicOrPartition.code(),
            Some("no such partition".into()),
        ),
    }
}
