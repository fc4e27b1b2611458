//! What a refused transactional request answers: [`TxnError`] and its
//! Kafka error code, which for a fenced producer depends on the request's
//! API and version.

/// API keys of the requests whose fenced answer depends on the version.
pub const API_PRODUCE: i16 = 0;
/// InitProducerId.
pub const API_INIT_PRODUCER_ID: i16 = 22;
/// AddPartitionsToTxn.
pub const API_ADD_PARTITIONS_TO_TXN: i16 = 24;
/// AddOffsetsToTxn.
pub const API_ADD_OFFSETS_TO_TXN: i16 = 25;
/// EndTxn.
pub const API_END_TXN: i16 = 26;
/// TxnOffsetCommit.
pub const API_TXN_OFFSET_COMMIT: i16 = 28;

/// Kafka's error codes for the coordinator's answers.
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
/// See [`INVALID_PRODUCER_EPOCH`].
pub const INVALID_TXN_STATE: i16 = 48;
/// See [`INVALID_PRODUCER_EPOCH`].
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
/// See [`INVALID_PRODUCER_EPOCH`].
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
/// See [`INVALID_PRODUCER_EPOCH`].
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
/// See [`INVALID_PRODUCER_EPOCH`].
pub const PRODUCER_FENCED: i16 = 90;
/// See [`INVALID_PRODUCER_EPOCH`].
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

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
/// epochs in the log's producer state, as INVALID_PRODUCER_EPOCH. Any other
/// API gets 47 too.
pub fn fenced_code(api_key: i16, version: i16) -> i16 {
    let first_with_fenced = match api_key {
        API_INIT_PRODUCER_ID => 4,
        API_ADD_PARTITIONS_TO_TXN | API_ADD_OFFSETS_TO_TXN | API_END_TXN => 2,
        _ => return INVALID_PRODUCER_EPOCH,
    };
    if version >= first_with_fenced {
        PRODUCER_FENCED
    } else {
        INVALID_PRODUCER_EPOCH
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
    pub fn code(self, fenced_code_supported: bool) -> i16 {
        match self {
            TxnError::ConcurrentTransactions => CONCURRENT_TRANSACTIONS,
            TxnError::Fenced if fenced_code_supported => PRODUCER_FENCED,
            TxnError::Fenced => INVALID_PRODUCER_EPOCH,
            TxnError::InvalidProducerIdMapping => INVALID_PRODUCER_ID_MAPPING,
            TxnError::InvalidTxnState => INVALID_TXN_STATE,
            TxnError::InvalidTransactionTimeout => INVALID_TRANSACTION_TIMEOUT,
            TxnError::TransactionalIdNotFound => TRANSACTIONAL_ID_NOT_FOUND,
        }
    }

    /// The Kafka error code for a request of this API key and version.
    pub fn code_for(self, api_key: i16, version: i16) -> i16 {
        match self {
            TxnError::Fenced => fenced_code(api_key, version),
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
