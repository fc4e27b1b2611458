//! ListTransactions (key 66): the transactional ids of every shard, with
//! their producer and state, filtered by state names, producer ids, (v1)
//! how long their transaction has run and (v2, KIP-1152) a regular
//! expression the whole id matches, as Java's `Matcher.matches` does. The
//! pattern is the `regex` crate's syntax, which agrees with Java's for
//! classes, alternation, repetition and anchors; what it lacks
//! (look-around, back-references) is answered INVALID_REGULAR_EXPRESSION,
//! as Kafka answers a pattern Java cannot compile. Only ids the caller may
//! describe are listed.

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse, ProducerId};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::error::ErrorCode;
use weir_core::txn::state::TxnState;

use super::{str, RequestContext};

pub const MIN: i16 = 0;
pub const MAX: i16 = 2;

/// The states ListTransactions filters by, by name.
const STATES: [TxnState; 7] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
    TxnState::Dead,
];

pub async fn handle(cx: &RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    let unknown: Vec<_> = req
        .state_filters
        .iter()
        .filter(|f| !STATES.iter().any(|s| s.name() == f.as_str()))
        .cloned()
        .collect();
    let pattern = match req.transactional_id_pattern.as_deref() {
        Some(p) if version >= 2 && !p.is_empty() => match id_pattern(p) {
            Ok(re) => Some(re),
            Err(e) => {
                log::debug!("ListTransactions: pattern {p:?}: {e}");
                return ListTransactionsResponse::default()
                    .with_error_code(ErrorCode::InvalidRegularExpression.code());
            }
        },
        _ => None,
    };
    let all = match shard.txn_list().await {
        Ok(all) => all,
        Err(e) => return ListTransactionsResponse::default().with_error_code(e.code.code()),
    };
    let now = weir_core::clock::now_ms();
    let listed = all
        .into_iter()
        .filter(|(_, m)| {
            req.state_filters.is_empty()
                || req
                    .state_filters
                    .iter()
                    .any(|f| f.as_str() == m.state.name())
        })
        .filter(|(_, m)| {
            req.producer_id_filters.is_empty()
                || req.producer_id_filters.contains(&ProducerId(m.producer_id))
        })
        .filter(|(_, m)| {
            // v1: transactions running longer than this many ms.
            version < 1
                || req.duration_filter < 0
                || (m.state == TxnState::Ongoing && now - m.txn_start_ms > req.duration_filter)
        })
        .filter(|(id, _)| pattern.as_ref().is_none_or(|re| re.is_match(id)))
        .filter(|(id, _)| {
            caller.may(
                shard,
                Operation::Describe,
                ResourceType::TransactionalId,
                id,
            )
        })
        .map(|(id, m)| {
            TransactionState::default()
                .with_transactional_id(kafka_protocol::messages::TransactionalId(str(&id)))
                .with_producer_id(ProducerId(m.producer_id))
                .with_transaction_state(str(m.state.name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(listed)
}

/// `pattern` matched against a whole id (Java's `matches`, not `find`).
fn id_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

#[cfg(test)]
mod tests {
    use super::id_pattern;

    #[test]
    fn a_pattern_matches_the_whole_id() {
        let re = id_pattern("orders-.*").unwrap();
        assert!(re.is_match("orders-1"));
        assert!(!re.is_match("old-orders-1"));
        let re = id_pattern("a|b").unwrap();
        assert!(re.is_match("a") && re.is_match("b") && !re.is_match("ab"));
        // Java accepts these; the regex crate does not, and says so.
        assert!(id_pattern("(?=x)x").is_err());
        assert!(id_pattern("(a)\\1").is_err());
        assert!(id_pattern("[").is_err());
    }
}
