//! DescribeCluster (key 60): the cluster id and this one node.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use weir_core::Shard;

use super::str;

pub const MIN: i16 = 0;
pub const MAX: i16 = 1;

pub fn handle(
    shard: &Rc<Shard>,
    _req: DescribeClusterRequest,
    _version: i16,
) -> DescribeClusterResponse {
    let cfg = &shard.config;
    DescribeClusterResponse::default()
        .with_cluster_id(str(&shard.catalog().cluster_id))
        .with_controller_id(BrokerId(cfg.node_id))
        .with_endpoint_type(1)
        .with_cluster_authorized_operations(i32::MIN)
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(cfg.node_id))
            .with_host(str(&cfg.advertised_host))
            .with_port(cfg.advertised_port as i32)])
}
