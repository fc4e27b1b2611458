//! InitProducerId (key 22): producer ids, unique across restarts. Without
//! a transactional id: an idempotent producer's id (from v3 a producer that
//! sends its id and epoch gets the epoch bumped, a new id when the epoch
//! would overflow). With one: the coordinator of that id answers with the
//! id's producer id and an epoch that fences every earlier producer of it,
//! aborting a transaction it left open.

use super::RequestContext;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use weir_core::txn::state::TxnApi;
use weir_core::ErrorCode;

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(cx: &RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let fail = |code: i16| {
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let ok = |pid: i64, epoch: i16| {
        InitProducerIdResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
    };
    if let Some(id) = &req.transactional_id {
        let expected = (req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
        let id = id.0.to_string();
        return match shard
            .txn_init_producer_id(id.clone(), req.transaction_timeout_ms, expected)
            .await
        {
            Ok((pid, epoch)) => ok(pid, epoch),
            Err(e) => {
                log::debug!("InitProducerId {id:?}: {e}");
                fail(e.code(TxnApi::InitProducerId, version))
            }
        };
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        return ok(req.producer_id.0, req.producer_epoch + 1);
    }
    match shard.allocate_producer_id().await {
        Ok(id) => ok(id, 0),
        Err(e) => {
            log::error!("allocating a producer id: {e}");
            fail(ErrorCode::KafkaStorageError.code())
        }
    }
}
