//! Checks made before a request runs, for the APIs about one group, one
//! transactional id or the cluster: the whole request is the caller's or
//! not, and a refusal is that API's own error response. Per-topic and
//! per-group checks inside a request are in its handler, so the rest of
//! the request is still served.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::{ErrorCode, Shard};

use super::Caller;

const GROUP: i16 = ErrorCode::GroupAuthorizationFailed as i16;
const CLUSTER_DENIED: i16 = ErrorCode::ClusterAuthorizationFailed as i16;
const TXN: i16 = ErrorCode::TransactionalIdAuthorizationFailed as i16;

/// The error response for a request the caller may not make, or `None`
/// to run it.
pub fn refusal(shard: &Shard, caller: &Caller, body: &RequestKind) -> Option<ResponseKind> {
    let group = |id: &GroupId, op| caller.may(shard, op, ResourceType::Group, id.0.as_str());
    let cluster = |op| caller.may(shard, op, ResourceType::Cluster, CLUSTER);
    Some(match body {
        RequestKind::JoinGroup(r) if !group(&r.group_id, Operation::Read) => {
            ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP)
                    .with_generation_id(-1)
                    .with_member_id(r.member_id.clone()),
            )
        }
        RequestKind::SyncGroup(r) if !group(&r.group_id, Operation::Read) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(GROUP))
        }
        RequestKind::Heartbeat(r) if !group(&r.group_id, Operation::Read) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(GROUP))
        }
        RequestKind::LeaveGroup(r) if !group(&r.group_id, Operation::Read) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(GROUP))
        }
        RequestKind::OffsetDelete(r) if !group(&r.group_id, Operation::Delete) => {
            ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(GROUP))
        }
        RequestKind::OffsetCommit(r) if !group(&r.group_id, Operation::Read) => {
            // Every partition answers the refusal: the response has no
            // error of its own.
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(GROUP)
                                })
                                .collect(),
                        )
                })
                .collect();
            ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics))
        }
        RequestKind::InitProducerId(r) => {
            let allowed = match &r.transactional_id {
                Some(id) => caller.may(
                    shard,
                    Operation::Write,
                    ResourceType::TransactionalId,
                    id.0.as_str(),
                ),
                None => cluster(Operation::IdempotentWrite),
            };
            if allowed {
                return None;
            }
            let code = if r.transactional_id.is_some() {
                TXN
            } else {
                CLUSTER_DENIED
            };
            ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_error_code(code)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            )
        }
        RequestKind::DescribeCluster(_) if !cluster(Operation::Describe) => {
            ResponseKind::DescribeCluster(
                DescribeClusterResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(super::str(&format!(
                        "{} may not describe the cluster",
                        caller.principal
                    )))),
            )
        }
        RequestKind::DescribeQuorum(_) if !cluster(Operation::Describe) => {
            ResponseKind::DescribeQuorum(
                DescribeQuorumResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(super::str(&format!(
                        "{} may not describe the cluster",
                        caller.principal
                    )))),
            )
        }
        _ => return None,
    })
}
