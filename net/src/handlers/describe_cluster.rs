//! DescribeCluster (key 60): the cluster id and the brokers (this node, or
//! each shard with `--shard-ports`). v2 (KIP-1073) may ask for fenced
//! brokers too: none is ever fenced.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

pub async fn handle(cx: &RequestContext, _req: DescribeClusterRequest) -> DescribeClusterResponse {
    let shard = &cx.shard;
    let cfg = &shard.config;
    DescribeClusterResponse::default()
        .with_cluster_id(str(&shard.catalog().cluster_id))
        .with_controller_id(BrokerId(cfg.broker_of(0).id))
        .with_endpoint_type(1)
        .with_cluster_authorized_operations(i32::MIN)
        .with_brokers(
            cfg.brokers()
                .into_iter()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.id))
                        .with_host(str(&b.host))
                        .with_port(b.port as i32)
                })
                .collect(),
        )
}
