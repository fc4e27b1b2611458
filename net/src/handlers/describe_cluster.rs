//! DescribeCluster (key 60): the cluster id, the controller and the
//! brokers (this node, each shard with `--shard-ports`, or a cluster's
//! live nodes). v2 (KIP-1073) may ask for fenced nodes too.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

pub async fn handle(cx: &RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let shard = &cx.shard;
    let with_fenced = cx.version >= 2 && req.include_fenced_brokers;
    DescribeClusterResponse::default()
        .with_cluster_id(str(&shard.catalog().cluster_id))
        .with_controller_id(BrokerId(shard.controller_id()))
        .with_endpoint_type(1)
        .with_cluster_authorized_operations(i32::MIN)
        .with_brokers(
            shard
                .brokers_and_fenced()
                .into_iter()
                .filter(|(_, fenced)| with_fenced || !fenced)
                .map(|(b, fenced)| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.id))
                        .with_host(str(&b.host))
                        .with_port(b.port as i32)
                        .with_rack(b.rack.as_deref().map(str))
                        .with_is_fenced(fenced)
                })
                .collect(),
        )
}
