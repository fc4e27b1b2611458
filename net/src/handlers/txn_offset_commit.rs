//! TxnOffsetCommit (key 28): a transaction's consumed offsets, sent to the
//! group's coordinator, which keeps them pending until the transaction
//! ends (committed, they become the group's offsets; aborted, they go).
//! Needs WRITE on the transactional id, READ on the group and on each topic.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::groups::OffsetToCommit;
use weir_core::ErrorCode;

use super::RequestContext;

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(cx: &RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let id = req.transactional_id.0.to_string();
    let group = req.group_id.0.to_string();
    let whole = if !caller.may(shard, Operation::Write, ResourceType::TransactionalId, &id) {
        Some(ErrorCode::TransactionalIdAuthorizationFailed)
    } else if !caller.may(shard, Operation::Read, ResourceType::Group, &group) {
        Some(ErrorCode::GroupAuthorizationFailed)
    } else {
        None
    };
    // Each partition's place, or its refusal.
    let mut shape = Vec::new();
    let mut offsets = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let may_read = caller.may(shard, Operation::Read, ResourceType::Topic, &name);
        let parts: Vec<(i32, Result<usize, ErrorCode>)> = t
            .partitions
            .iter()
            .map(|p| {
                let refusal = whole.or((!may_read).then_some(ErrorCode::TopicAuthorizationFailed));
                match refusal {
                    Some(code) => (p.partition_index, Err(code)),
                    None => {
                        offsets.push(OffsetToCommit {
                            topic: name.clone(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        });
                        (p.partition_index, Ok(offsets.len() - 1))
                    }
                }
            })
            .collect();
        shape.push((t.name.clone(), parts));
    }
    let count = offsets.len();
    // A member and generation (KIP-447) are checked when the client sends
    // them; -1 is a producer that does not know its consumer's group.
    let member = (req.generation_id >= 0).then(|| {
        (
            req.member_id.to_string(),
            req.group_instance_id.as_ref().map(|i| i.to_string()),
            req.generation_id,
        )
    });
    let codes = if count == 0 {
        Vec::new()
    } else {
        match shard
            .txn_offset_commit(group.clone(), req.producer_id.0, member, offsets)
            .await
        {
            Ok(codes) => codes,
            Err(e) => vec![e.code; count],
        }
    };
    let topics = shape
        .into_iter()
        .map(|(name, parts)| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(p, at)| {
                            let code = match at {
                                Ok(i) => codes
                                    .get(i)
                                    .copied()
                                    .unwrap_or(ErrorCode::UnknownServerError),
                                Err(code) => code,
                            };
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(code.code())
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}
