//! ListPartitionReassignments (key 46): `kafka-reassign-partitions.sh
//! --verify` and `--list`, the admin clients' `listPartitionReassignments`.
//! Each partition a reassignment moves, with its replicas (targets first,
//! then those leaving), those being added and those being removed; null
//! topics: every one.

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::replication::reassign::ongoing;
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

pub async fn handle(
    cx: &RequestContext,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let shard = &cx.shard;
    if !cx
        .caller
        .may(shard, Operation::Describe, ResourceType::Cluster, CLUSTER)
    {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str(&format!(
                "{} may not list reassignments (DESCRIBE on the cluster)",
                cx.caller.principal
            ))));
    }
    let cat = shard.catalog();
    let asked = |topic: &str, p: i32| match &req.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| t.name.0.as_str() == topic && t.partition_indexes.contains(&p)),
    };
    let ids = |v: &[i32]| v.iter().map(|&n| BrokerId(n)).collect::<Vec<_>>();
    let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
    for (topic, p, r) in ongoing(&cat) {
        if !asked(&topic, p) {
            continue;
        }
        let part = OngoingPartitionReassignment::default()
            .with_partition_index(p)
            .with_replicas(ids(&r.replicas))
            .with_adding_replicas(ids(&r.adding))
            .with_removing_replicas(ids(&r.removing));
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(
                OngoingTopicReassignment::default()
                    .with_name(TopicName(str(&topic)))
                    .with_partitions(vec![part]),
            ),
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
