//! EndTxn (key 26): commits or aborts a producer's transaction, answered
//! once every partition's marker is durable and the transaction's offsets
//! are settled. A retry of an ended transaction is answered as it ended.

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::txn::state::TxnApi;
use weir_core::ErrorCode;

use super::RequestContext;

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(cx: &RequestContext, req: EndTxnRequest) -> EndTxnResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let id = req.transactional_id.0.to_string();
    let answer = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !caller.may(shard, Operation::Write, ResourceType::TransactionalId, &id) {
        return answer.with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
    }
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    match shard.txn_end(id.clone(), pid, epoch, req.committed).await {
        Ok(()) => answer
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        Err(e) => {
            log::debug!("EndTxn {id:?}: {e}");
            answer.with_error_code(e.code(TxnApi::EndTxn, version))
        }
    }
}
