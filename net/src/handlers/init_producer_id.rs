//! InitProducerId (key 22): producer ids for idempotent producers, unique
//! across restarts. From v3 a producer that sends its id and epoch gets the
//! epoch bumped (a new id when the epoch would overflow). Transactional ids
//! are coordinated with transactions (not served yet).

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use weir_core::{ErrorCode, Shard};

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

const COORDINATOR_NOT_AVAILABLE: i16 = 15;

pub async fn handle(
    shard: &Rc<Shard>,
    req: InitProducerIdRequest,
    _version: i16,
) -> InitProducerIdResponse {
    let fail = |code: i16| {
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if req.transactional_id.is_some() {
        return fail(COORDINATOR_NOT_AVAILABLE);
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        return InitProducerIdResponse::default()
            .with_producer_id(req.producer_id)
            .with_producer_epoch(req.producer_epoch + 1);
    }
    match shard.allocate_producer_id().await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            log::error!("allocating a producer id: {e}");
            fail(ErrorCode::KafkaStorageError.code())
        }
    }
}
