//! DescribeQuorum (key 55): the cluster's metadata quorum from the Raft
//! state (asked of the controller): its leader and term, how far each
//! voter and observer holds the log, and where each node listens. A single
//! node is a quorum of one.

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, TopicName,
};
use weir_core::cluster::{QuorumView, ReplicaView};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

/// The metadata log's name, as Kafka's tools expect it.
const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(cx: &RequestContext, _req: DescribeQuorumRequest) -> DescribeQuorumResponse {
    let shard = &cx.shard;
    let view = match &shard.cluster {
        Some(control) => match control.describe_quorum().await {
            Ok(v) => v,
            Err(e) => {
                return DescribeQuorumResponse::default()
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str(&e.message)))
            }
        },
        None => {
            let me = shard.config.node_id;
            let end = shard.catalog().version as i64;
            QuorumView {
                leader: me,
                epoch: 1,
                high_watermark: end,
                voters: vec![ReplicaView {
                    id: me,
                    log_end: end,
                    caught_up: true,
                }],
                observers: vec![],
            }
        }
    };
    let now = weir_core::clock::now_ms();
    let replica = |r: &ReplicaView| {
        let seen = if r.log_end >= 0 { now } else { -1 };
        ReplicaState::default()
            .with_replica_id(BrokerId(r.id))
            .with_log_end_offset(r.log_end)
            .with_last_fetch_timestamp(seen)
            .with_last_caught_up_timestamp(if r.caught_up { now } else { -1 })
    };
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(view.leader))
        .with_leader_epoch(view.epoch)
        .with_high_watermark(view.high_watermark)
        .with_current_voters(view.voters.iter().map(replica).collect())
        .with_observers(view.observers.iter().map(replica).collect());
    let nodes = shard
        .quorum_nodes()
        .into_iter()
        .map(|b| {
            Node::default()
                .with_node_id(BrokerId(b.id))
                .with_listeners(vec![Listener::default()
                    .with_name(str("PLAINTEXT"))
                    .with_host(str(&b.host))
                    .with_port(b.port)])
        })
        .collect();
    DescribeQuorumResponse::default()
        .with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(str(METADATA_TOPIC)))
            .with_partitions(vec![partition])])
        .with_nodes(nodes)
}
