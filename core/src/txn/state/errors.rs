//! What a refused transactional request answers: [`TxnError`] and its
//! Kafka error code, which for a fenced producer depends on the request's
//! API and version.

use crate::error::ErrorCode;

/// The transactional requests whose answer to a fenced producer depends on
/// the request's version (see [`fenced_code`]); their API keys are the
/// protocol's (`kafka_protocol::messages::ApiKey`), named here so the
/// coordinator needs no protocol crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnApi {
    /// Produce.
    Produce,
    /// InitProducerId.
    InitProducerId,
    /// AddPartitionsToTxn.
    AddPartitionsToTxn,
    /// AddOffsetsToTxn.
    AddOffsetsToTxn,
    /// EndTxn.
    EndTxn,
    /// TxnOffsetCommit.
    TxnOffsetCommit,
}

/// The code a fenced producer gets from a request of this API and version.
///
/// PRODUCER_FENCED (90) was added by KIP-588; older request versions get
/// INVALID_PRODUCER_EPOCH (47), which old clients handle the same way
/// (Kafka's `KafkaApis` maps it per request):
///
/// | API (key)               | PRODUCER_FENCED from | before          |
/// |-------------------------|----------------------|-----------------|
/// | InitProducerId (22)     | v4                   | v0-3: 47        |
/// | AddPartitionsToTxn (24) | v2                   | v0-1: 47        |
/// | AddOffsetsToTxn (25)    | v2                   | v0-1: 47        |
/// | EndTxn (26)             | v2                   | v0-1: 47        |
/// | TxnOffsetCommit (28)    | never                | all: 47         |
/// | Produce (0)             | never                | all: 47         |
///
/// TxnOffsetCommit and Produce never answer 90: Kafka rejects their stale
/// epochs in the log's producer state, as INVALID_PRODUCER_EPOCH.
pub fn fenced_code(api: TxnApi, version: i16) -> ErrorCode {
    let first_with_fenced = match api {
        TxnApi::InitProducerId => 4,
        TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
        TxnApi::Produce | TxnApi::TxnOffsetCommit => return ErrorCode::InvalidProducerEpoch,
    };
    if version >= first_with_fenced {
        ErrorCode::ProducerFenced
    } else {
        ErrorCode::InvalidProducerEpoch
    }
}

/// A request refused, as the coordinator answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnError {
    /// The id is between two states (Prepare*): the client retries.
    ConcurrentTransactions,
    /// The request's epoch (or, for InitProducerId, its expected producer)
    /// is not the current one: a newer producer took over. Answered as
    /// PRODUCER_FENCED or INVALID_PRODUCER_EPOCH by version
    /// ([`fenced_code`]).
    Fenced,
    /// The id has no metadata, or it belongs to another producer id.
    InvalidProducerIdMapping,
    /// The request makes no sense in this state (e.g. commit after abort).
    InvalidTxnState,
    /// The timeout is not in `1..=transaction.max.timeout.ms`.
    InvalidTransactionTimeout,
    /// DescribeTransactions of an id with no metadata.
    TransactionalIdNotFound,
}

impl TxnError {
    /// The Kafka error code; `fenced_code_supported` says whether the
    /// request's version knows PRODUCER_FENCED (see [`fenced_code`]).
    pub fn code(self, fenced_code_supported: bool) -> ErrorCode {
        match self {
            TxnError::ConcurrentTransactions => ErrorCode::ConcurrentTransactions,
            TxnError::Fenced if fenced_code_supported => ErrorCode::ProducerFenced,
            TxnError::Fenced => ErrorCode::InvalidProducerEpoch,
            TxnError::InvalidProducerIdMapping => ErrorCode::InvalidProducerIdMapping,
            TxnError::InvalidTxnState => ErrorCode::InvalidTxnState,
            TxnError::InvalidTransactionTimeout => ErrorCode::InvalidTransactionTimeout,
            TxnError::TransactionalIdNotFound => ErrorCode::TransactionalIdNotFound,
        }
    }

    /// The Kafka error code for a request of this API and version.
    pub fn code_for(self, api: TxnApi, version: i16) -> ErrorCode {
        match self {
            TxnError::Fenced => fenced_code(api, version),
            other => other.code(true),
        }
    }
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            TxnError::ConcurrentTransactions => "the transaction is being completed",
            TxnError::Fenced => "the producer was fenced by a newer epoch",
            TxnError::InvalidProducerIdMapping => "the transactional id has no such producer id",
            TxnError::InvalidTxnState => "the request is invalid in the transaction's state",
            TxnError::InvalidTransactionTimeout => "the transaction timeout is out of range",
            TxnError::TransactionalIdNotFound => "no such transactional id",
        };
        f.write_str(what)
    }
}

impl std::error::Error for TxnError {}
