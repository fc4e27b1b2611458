//! DescribeTransactions (key 65): each transactional id's state, producer,
//! timeout, start and partitions, from the shard coordinating it. Needs
//! DESCRIBE on the id.

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::txn::state::TxnState;
use weir_core::ErrorCode;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 0;

pub async fn handle(
    cx: &RequestContext,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let shard = &cx.shard;
    let caller = &cx.caller;
    let mut states = Vec::with_capacity(req.transactional_ids.len());
    for id in req.transactional_ids {
        let name = id.0.to_string();
        let base = TransactionState::default()
            .with_transactional_id(id)
            .with_transaction_state(str(""))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_start_time_ms(-1);
        if !caller.may(
            shard,
            Operation::Describe,
            ResourceType::TransactionalId,
            &name,
        ) {
            states.push(base.with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code()));
            continue;
        }
        let state = match shard.txn_describe(name).await {
            Err(e) => base.with_error_code(e.code.code()),
            Ok(None) => base.with_error_code(ErrorCode::TransactionalIdNotFound.code()),
            Ok(Some(m)) if m.state == TxnState::Dead => {
                base.with_error_code(ErrorCode::TransactionalIdNotFound.code())
            }
            Ok(Some(m)) => {
                let mut topics: Vec<TopicData> = Vec::new();
                for tp in &m.partitions {
                    let (topic, partition) = (tp.topic(), &tp.partition);
                    match topics.last_mut() {
                        Some(t) if t.topic.0.as_str() == topic => t.partitions.push(*partition),
                        _ => topics.push(
                            TopicData::default()
                                .with_topic(TopicName(str(topic)))
                                .with_partitions(vec![*partition]),
                        ),
                    }
                }
                base.with_transaction_state(str(m.state.name()))
                    .with_transaction_timeout_ms(m.timeout_ms)
                    .with_transaction_start_time_ms(m.txn_start_ms)
                    .with_producer_id(ProducerId(m.producer_id))
                    .with_producer_epoch(m.producer_epoch)
                    .with_topics(topics)
            }
        };
        states.push(state);
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
