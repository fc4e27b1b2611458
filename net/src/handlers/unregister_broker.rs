//! UnregisterBroker (key 64): `kafka-cluster.sh unregister --id N` and the
//! admin clients' `unregisterBroker`. The node's partitions are drained
//! to other nodes first (moved as reassignments do: new copies in sync
//! before the node's go), refused if that would leave a partition under
//! its `min.insync.replicas`; then the node leaves the cluster's nodes
//! (`Shard::unregister_node`). Stop it afterwards: it keeps no partition
//! and clients are no longer told of it.

use kafka_protocol::messages::{UnregisterBrokerRequest, UnregisterBrokerResponse};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::ErrorCode;

use super::{error_parts, str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

pub async fn handle(cx: &RequestContext, req: UnregisterBrokerRequest) -> UnregisterBrokerResponse {
    let shard = &cx.shard;
    if !cx
        .caller
        .may(shard, Operation::Alter, ResourceType::Cluster, CLUSTER)
    {
        return UnregisterBrokerResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str(&format!(
                "{} may not unregister nodes (ALTER on the cluster)",
                cx.caller.principal
            ))));
    }
    match shard.unregister_node(req.broker_id.0).await {
        Ok(()) => UnregisterBrokerResponse::default(),
        Err(e) => {
            let (code, message) = error_parts(&e);
            UnregisterBrokerResponse::default()
                .with_error_code(code)
                .with_error_message(message)
        }
    }
}
