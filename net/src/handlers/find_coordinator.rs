//! FindCoordinator (key 10). Advertised because librdkafka sends lz4 batches
//! uncompressed to a broker without it. Groups and transactions are not
//! coordinated yet (issue 4), so every key gets COORDINATOR_NOT_AVAILABLE,
//! which clients treat as "retry later".

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use weir_core::Shard;

use super::str;

pub const MIN: i16 = 0;
pub const MAX: i16 = 6;

const COORDINATOR_NOT_AVAILABLE: i16 = 15;

pub fn handle(
    _shard: &Rc<Shard>,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let why = str("this node does not coordinate groups or transactions yet");
    if version >= 4 {
        FindCoordinatorResponse::default().with_coordinators(
            req.coordinator_keys
                .into_iter()
                .map(|k| {
                    Coordinator::default()
                        .with_key(k)
                        .with_node_id(BrokerId(-1))
                        .with_host(str(""))
                        .with_port(-1)
                        .with_error_code(COORDINATOR_NOT_AVAILABLE)
                        .with_error_message(Some(why.clone()))
                })
                .collect(),
        )
    } else {
        FindCoordinatorResponse::default()
            .with_error_code(COORDINATOR_NOT_AVAILABLE)
            .with_error_message(Some(why))
            .with_node_id(BrokerId(-1))
            .with_host(str(""))
            .with_port(-1)
    }
}
