//! AddOffsetsToTxn (key 25): a group's offsets join a producer's
//! transaction (TxnOffsetCommit then sends them to the group's
//! coordinator). Needs WRITE on the transactional id and READ on the group.

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::txn::state::TxnApi;
use weir_core::ErrorCode;

use super::RequestContext;

pub const MIN: i16 = 0;
pub const MAX: i16 = 4;

pub async fn handle(cx: &RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let id = req.transactional_id.0.to_string();
    let group = req.group_id.0.to_string();
    let code = if !caller.may(shard, Operation::Write, ResourceType::TransactionalId, &id) {
        ErrorCode::TransactionalIdAuthorizationFailed.code()
    } else if !caller.may(shard, Operation::Read, ResourceType::Group, &group) {
        ErrorCode::GroupAuthorizationFailed.code()
    } else {
        match shard
            .txn_add_offsets(id.clone(), req.producer_id.0, req.producer_epoch, group)
            .await
        {
            Ok(()) => 0,
            Err(e) => {
                log::debug!("AddOffsetsToTxn {id:?}: {e}");
                e.code(TxnApi::AddOffsetsToTxn, version)
            }
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(code)
}
