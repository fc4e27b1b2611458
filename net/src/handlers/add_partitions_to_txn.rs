//! AddPartitionsToTxn (key 24): partitions join a producer's transaction
//! on the coordinator of its transactional id. v0–3 carry one transaction
//! from its producer; v4–5 (KIP-890, sent by brokers to verify a
//! transaction before a write) carry several, each maybe verify-only, and
//! need CLUSTER_ACTION. Refusals are per partition: the partitions at
//! fault get their error, the others OPERATION_NOT_ATTEMPTED, as Kafka.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::txn::state::TxnApi;
use weir_core::{ErrorCode, Shard, TopicPartition};

use super::{Caller, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 5;

pub async fn handle(
    cx: &RequestContext,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    if version <= 3 {
        let results = one(
            shard,
            caller,
            version,
            req.v3_and_below_transactional_id.0.to_string(),
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            req.v3_and_below_topics,
            false,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    if !caller.may(
        shard,
        Operation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER,
    ) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
    }
    let mut results = Vec::with_capacity(req.transactions.len());
    for t in req.transactions {
        let id = t.transactional_id.clone();
        let topic_results = one(
            shard,
            caller,
            version,
            t.transactional_id.0.to_string(),
            t.producer_id.0,
            t.producer_epoch,
            t.topics,
            t.verify_only,
        )
        .await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(id)
                .with_topic_results(topic_results),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

/// A partition asked for, with its own refusal if it has one.
type Asked = (i32, Option<ErrorCode>);

/// One transaction's partitions, each with its answer.
#[allow(clippy::too_many_arguments)]
async fn one(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    id: String,
    producer_id: i64,
    epoch: i16,
    topics: Vec<AddPartitionsToTxnTopic>,
    verify_only: bool,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let catalog = shard.catalog();
    let may_write_id = caller.may(shard, Operation::Write, ResourceType::TransactionalId, &id);
    // Each partition's own refusal, if any.
    let mut asked: Vec<(String, Vec<Asked>)> = Vec::new();
    for t in &topics {
        let name = t.name.0.to_string();
        let may_write = caller.may(shard, Operation::Write, ResourceType::Topic, &name);
        let parts = t
            .partitions
            .iter()
            .map(|&p| {
                let refusal = if !may_write_id {
                    Some(ErrorCode::TransactionalIdAuthorizationFailed)
                } else if !may_write {
                    Some(ErrorCode::TopicAuthorizationFailed)
                } else if !catalog
                    .topic(&name)
                    .is_some_and(|m| p >= 0 && p < m.partitions())
                {
                    Some(ErrorCode::UnknownTopicOrPartition)
                } else {
                    None
                };
                (p, refusal)
            })
            .collect();
        asked.push((name, parts));
    }
    let refused = asked
        .iter()
        .any(|(_, ps)| ps.iter().any(|(_, r)| r.is_some()));
    let outcome: Result<(), i16> = if refused {
        Err(ErrorCode::OperationNotAttempted.code())
    } else {
        let partitions: Vec<TopicPartition> = asked
            .iter()
            .flat_map(|(t, ps)| {
                let t: std::sync::Arc<str> = t.as_str().into();
                ps.iter()
                    .map(move |(p, _)| TopicPartition::new(t.clone(), *p))
            })
            .collect();
        if verify_only {
            let all_in = shard
                .txn_verify(id.clone(), producer_id, epoch, partitions)
                .await;
            match all_in {
                Ok(true) => Ok(()),
                Ok(false) => Err(ErrorCode::InvalidTxnState.code()),
                Err(e) => Err(e.code(TxnApi::AddPartitionsToTxn, version)),
            }
        } else {
            shard
                .txn_add_partitions(id.clone(), producer_id, epoch, partitions)
                .await
                .map_err(|e| {
                    log::debug!("AddPartitionsToTxn {id:?}: {e}");
                    e.code(TxnApi::AddPartitionsToTxn, version)
                })
        }
    };
    asked
        .into_iter()
        .map(|(name, parts)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(kafka_protocol::messages::TopicName(super::str(&name)))
                .with_results_by_partition(
                    parts
                        .into_iter()
                        .map(|(p, refusal)| {
                            let code = match (refusal, outcome) {
                                (Some(r), _) => r.code(),
                                (None, Ok(())) => 0,
                                (None, Err(code)) => code,
                            };
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}
