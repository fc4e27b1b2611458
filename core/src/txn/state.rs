//! The transaction coordinator's state per transactional id, as Kafka's
//! `TransactionCoordinator` / `TransactionMetadata` keep it (transactions v1:
//! the epoch is bumped by InitProducerId and by fencing, not per transaction,
//! i.e. without KIP-890 part 2).
//!
//! Pure and I/O-free: every operation validates a request against the
//! current metadata (`None` when the id has none yet) and returns either a
//! Kafka error or the NEW metadata. The caller persists that value durably,
//! then installs it; nothing here changes a value in place, so a failed write
//! leaves the installed state as it was (which is why Kafka's
//! `hasFailedEpochFence` flag has no counterpart here: a fence that was not
//! persisted is simply computed again from the old epoch).
//!
//! Kafka's pending-transition guard (`pendingTransitionInProgress`, answered
//! with CONCURRENT_TRANSACTIONS) is the caller's: while a returned value is
//! being persisted, requests for the same id must wait or get
//! [`TxnError::ConcurrentTransactions`].
//!
//! Time is passed in as milliseconds (`now_ms`), so tests use fake time.
//!
//! The transactional id itself is not part of the metadata: the caller keys
//! its durable records by it.

use std::collections::BTreeSet;

/// The producer id and epoch of "none" in Kafka's records.
pub const NO_PRODUCER_ID: i64 = -1;
/// See [`NO_PRODUCER_ID`].
pub const NO_PRODUCER_EPOCH: i16 = -1;

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

/// Where a transactional id's transaction is. Ids are Kafka's (the durable
/// encoding and `TransactionState.fromId` agree); names are what
/// DescribeTransactions and ListTransactions show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction: after InitProducerId.
    Empty,
    /// Partitions or offsets have been added; not yet ended.
    Ongoing,
    /// EndTxn(commit) persisted; markers being written.
    PrepareCommit,
    /// EndTxn(abort), a fence or a timeout persisted; markers being written.
    PrepareAbort,
    /// Commit markers written.
    CompleteCommit,
    /// Abort markers written.
    CompleteAbort,
    /// Expired; about to be removed. Every operation treats it as absent.
    Dead,
}

impl TxnState {
    /// Kafka's id of the state (its transaction log value).
    pub fn id(self) -> u8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
        }
    }

    /// The state of [`TxnState::id`]; `None` for anything else (Kafka's
    /// PrepareEpochFence, 7, is never persisted, and is not a state here).
    pub fn from_id(id: u8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            _ => return None,
        })
    }

    /// The name Kafka shows (DescribeTransactions, ListTransactions filters).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    /// No transaction in flight: a new one may start, and the id may expire.
    fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// One transactional id's state, as persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    /// The producer id before the last transition (Kafka's
    /// `previousProducerId`): after a rotation to a new id, a retried
    /// InitProducerId naming the old id with its exhausted epoch is still
    /// recognized. -1 if none.
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump (-1 if none), so a retried
    /// InitProducerId from the previous epoch is answered rather than fenced,
    /// as Kafka does (KIP-360).
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Topic-partitions in the transaction: each gets a marker at its end.
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups whose offsets are in the transaction (AddOffsetsToTxn): their
    /// pending offsets are committed or dropped at its end. (Kafka keeps the
    /// group's `__consumer_offsets` partition among the partitions instead.)
    pub groups: BTreeSet<String>,
    /// When the current (or last) transaction started; -1 before any and
    /// after InitProducerId. Kept through Prepare*/Complete*, as Kafka does,
    /// so Describe shows it.
    pub txn_start_ms: i64,
    pub last_update_ms: i64,
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

/// What InitProducerId leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// Persist, then answer with its producer id and epoch.
    Ready(TxnMetadata),
    /// A transaction is ongoing: this is it in PrepareAbort with the epoch
    /// bumped, fencing its producer. Persist it, write abort markers, settle
    /// the groups, persist [`complete`] of it, and answer
    /// CONCURRENT_TRANSACTIONS: the client retries and then gets
    /// [`InitOutcome::Ready`] (with the epoch bumped once more), as in Kafka.
    AbortFirst(TxnMetadata),
}

/// What EndTxn leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Persist it (PrepareCommit/PrepareAbort), answer success, write the
    /// markers to every partition and settle the groups' offsets, then
    /// persist [`complete`] of it. With no partitions and no groups there is
    /// nothing to write: the caller may persist [`complete`] of it directly
    /// (Kafka writes both states; either way a crash leaves a consistent id).
    Prepare(TxnMetadata),
    /// A retry of an EndTxn that already completed the same way: answer
    /// success; nothing to persist.
    AlreadyDone,
}

/// Kafka's `isEpochExhausted`: the coordinator never hands out i16::MAX, so
/// it can always fence a producer by one more bump.
fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// An id with metadata that counts (Dead is being removed: as absent).
fn live(current: Option<&TxnMetadata>) -> Option<&TxnMetadata> {
    current.filter(|m| m.state != TxnState::Dead)
}

/// InitProducerId for a transactional id.
///
/// `expected` is the producer id and epoch the client already has
/// (InitProducerId v3+, KIP-360: resuming after an error); `new_pid` hands
/// out a fresh producer id, called only when one is needed.
///
/// - timeout not in `1..=max_timeout_ms`: INVALID_TRANSACTION_TIMEOUT;
/// - no metadata (or Dead): a new producer id at epoch 0;
/// - `expected` names neither the current producer id, nor the previous one
///   with an exhausted epoch (a retry after a rotation): fenced;
/// - PrepareCommit/PrepareAbort: CONCURRENT_TRANSACTIONS;
/// - Ongoing: [`InitOutcome::AbortFirst`];
/// - Empty/Complete*: the epoch is bumped (last epoch: -1, or the current
///   one when `expected` was given), or, when the epoch is exhausted, a new
///   producer id at epoch 0; with `expected` equal to the last epoch it is a
///   retry of a call that succeeded: the current epoch again; any other
///   expected epoch is fenced.
pub fn init_producer_id(
    current: Option<&TxnMetadata>,
    timeout_ms: i32,
    max_timeout_ms: i32,
    expected: Option<(i64, i16)>,
    now_ms: i64,
    new_pid: &mut dyn FnMut() -> i64,
) -> Result<InitOutcome, TxnError> {
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(TxnError::InvalidTransactionTimeout);
    }
    let Some(cur) = live(current) else {
        // Kafka creates the metadata at epoch -1 and bumps it; whatever the
        // client expected, a new id is safe to hand out (it recovers from an
        // expired id this way).
        return Ok(InitOutcome::Ready(TxnMetadata {
            producer_id: new_pid(),
            previous_producer_id: NO_PRODUCER_ID,
            producer_epoch: 0,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            txn_start_ms: -1,
            last_update_ms: now_ms,
        }));
    };
    if let Some((pid, epoch)) = expected {
        let valid = cur.producer_epoch == NO_PRODUCER_EPOCH
            || pid == cur.producer_id
            || (pid == cur.previous_producer_id && epoch_exhausted(epoch));
        if !valid {
            return Err(TxnError::Fenced);
        }
    }
    match cur.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(TxnError::ConcurrentTransactions),
        // The new epoch is never answered: the client retries after the
        // abort and then bumps again (rotating if this fence exhausted it).
        TxnState::Ongoing => Ok(InitOutcome::AbortFirst(fence_and_abort(cur, now_ms))),
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let idle = |producer_id, producer_epoch, last_producer_epoch| TxnMetadata {
                producer_id,
                previous_producer_id: cur.producer_id,
                producer_epoch,
                last_producer_epoch,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                txn_start_ms: -1,
                last_update_ms: now_ms,
            };
            let exhausted = epoch_exhausted(cur.producer_epoch);
            let expected_epoch = expected.map(|(_, e)| e);
            if exhausted && expected_epoch.is_none_or(|e| e == cur.producer_epoch) {
                let last = if expected.is_some() {
                    cur.producer_epoch
                } else {
                    NO_PRODUCER_EPOCH
                };
                return Ok(InitOutcome::Ready(idle(new_pid(), 0, last)));
            }
            let (epoch, last) = match expected_epoch {
                // Not exhausted here: that case rotated above.
                None => (cur.producer_epoch + 1, NO_PRODUCER_EPOCH),
                Some(e) if cur.producer_epoch == NO_PRODUCER_EPOCH || e == cur.producer_epoch => {
                    (cur.producer_epoch + 1, cur.producer_epoch)
                }
                // A retry of a call that succeeded: no new producer came in
                // between (its InitProducerId would have reset the last
                // epoch to -1). Kafka throws here if the current epoch is
                // exhausted; the retry is answered the same either way.
                Some(e) if e == cur.last_producer_epoch => {
                    (cur.producer_epoch, cur.last_producer_epoch)
                }
                Some(_) => return Err(TxnError::Fenced),
            };
            Ok(InitOutcome::Ready(idle(cur.producer_id, epoch, last)))
        }
        TxnState::Dead => unreachable!("live() filters Dead"),
    }
}

/// Kafka's `prepareFenceProducerEpoch` followed by the abort: PrepareAbort
/// with the epoch bumped, so the producer's requests are fenced from now on.
/// At i16::MAX (only reachable through a bug: clients are never given more
/// than MAX - 1) the epoch stays, as Kafka 4.x does, rather than overflow;
/// the next InitProducerId then rotates the producer id, which fences anyway.
fn fence_and_abort(cur: &TxnMetadata, now_ms: i64) -> TxnMetadata {
    TxnMetadata {
        producer_id: cur.producer_id,
        previous_producer_id: cur.producer_id,
        producer_epoch: cur.producer_epoch.saturating_add(1),
        last_producer_epoch: NO_PRODUCER_EPOCH,
        timeout_ms: cur.timeout_ms,
        state: TxnState::PrepareAbort,
        partitions: cur.partitions.clone(),
        groups: cur.groups.clone(),
        txn_start_ms: cur.txn_start_ms,
        last_update_ms: now_ms,
    }
}

/// The checks AddPartitionsToTxn and AddOffsetsToTxn share, in Kafka's
/// order; gives the metadata to extend.
fn check_add(
    current: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
) -> Result<&TxnMetadata, TxnError> {
    let cur = live(current).ok_or(TxnError::InvalidProducerIdMapping)?;
    if cur.producer_id != pid {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    // Any other epoch, newer included, as Kafka: only the coordinator bumps.
    if cur.producer_epoch != epoch {
        return Err(TxnError::Fenced);
    }
    match cur.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(TxnError::ConcurrentTransactions),
        _ => Ok(cur),
    }
}

/// The metadata with a transaction open: Ongoing as it is, or a new one
/// (Empty/Complete*) starting now with nothing in it.
fn open(cur: &TxnMetadata, now_ms: i64) -> TxnMetadata {
    let mut next = cur.clone();
    if cur.state != TxnState::Ongoing {
        next.partitions.clear();
        next.groups.clear();
        next.txn_start_ms = now_ms;
    }
    next.state = TxnState::Ongoing;
    next.previous_producer_id = cur.producer_id;
    next.last_update_ms = now_ms;
    next
}

/// AddPartitionsToTxn: opens a transaction (Empty/Complete*) or extends the
/// ongoing one. When every partition is already in the ongoing transaction
/// the current metadata comes back unchanged (equal to it): nothing to
/// persist, answer success (Kafka's short cut).
pub fn add_partitions(
    current: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    partitions: &[(String, i32)],
    now_ms: i64,
) -> Result<TxnMetadata, TxnError> {
    let cur = check_add(current, pid, epoch)?;
    if cur.state == TxnState::Ongoing && partitions.iter().all(|p| cur.partitions.contains(p)) {
        return Ok(cur.clone());
    }
    let mut next = open(cur, now_ms);
    next.partitions.extend(partitions.iter().cloned());
    Ok(next)
}

/// AddOffsetsToTxn: as [`add_partitions`], for a group's offsets.
pub fn add_offsets(
    current: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    group: &str,
    now_ms: i64,
) -> Result<TxnMetadata, TxnError> {
    let cur = check_add(current, pid, epoch)?;
    if cur.state == TxnState::Ongoing && cur.groups.contains(group) {
        return Ok(cur.clone());
    }
    let mut next = open(cur, now_ms);
    next.groups.insert(group.to_owned());
    Ok(next)
}

/// Whether a transactional produce to this partition belongs to the ongoing
/// transaction of this producer id and epoch (the partition was added).
pub fn in_transaction(
    current: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    topic: &str,
    partition: i32,
) -> bool {
    live(current).is_some_and(|m| {
        m.producer_id == pid
            && m.producer_epoch == epoch
            && m.state == TxnState::Ongoing
            && m.partitions.contains(&(topic.to_owned(), partition))
    })
}

/// Whether a TxnOffsetCommit for this group belongs to the ongoing
/// transaction of this producer id and epoch (AddOffsetsToTxn came first).
pub fn group_in_transaction(
    current: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    group: &str,
) -> bool {
    live(current).is_some_and(|m| {
        m.producer_id == pid
            && m.producer_epoch == epoch
            && m.state == TxnState::Ongoing
            && m.groups.contains(group)
    })
}

/// EndTxn, from the client (v1: the epoch must be the current one exactly).
///
/// - Ongoing: [`EndOutcome::Prepare`] (also with nothing in the
///   transaction, as Kafka);
/// - CompleteCommit + commit, CompleteAbort + abort: a retry,
///   [`EndOutcome::AlreadyDone`]; the other way round: INVALID_TXN_STATE;
/// - PrepareCommit + commit, PrepareAbort + abort: CONCURRENT_TRANSACTIONS;
///   the other way round: INVALID_TXN_STATE;
/// - Empty: INVALID_TXN_STATE.
pub fn end_txn(
    current: Option<&TxnMetadata>,
    pid: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<EndOutcome, TxnError> {
    let cur = live(current).ok_or(TxnError::InvalidProducerIdMapping)?;
    if cur.producer_id != pid {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if cur.producer_epoch != epoch {
        return Err(TxnError::Fenced);
    }
    match (cur.state, commit) {
        (TxnState::Ongoing, _) => {
            let mut next = cur.clone();
            next.state = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
            next.previous_producer_id = cur.producer_id;
            next.last_update_ms = now_ms;
            Ok(EndOutcome::Prepare(next))
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
            Ok(EndOutcome::AlreadyDone)
        }
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            Err(TxnError::ConcurrentTransactions)
        }
        _ => Err(TxnError::InvalidTxnState),
    }
}

/// The transaction's end once its markers are written: CompleteCommit or
/// CompleteAbort, nothing left in it; the last epoch becomes the current one
/// (Kafka's `prepareComplete`). A state other than Prepare* has nothing to
/// complete and comes back unchanged.
pub fn complete(meta: &TxnMetadata, now_ms: i64) -> TxnMetadata {
    let state = match meta.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return meta.clone(),
    };
    TxnMetadata {
        producer_id: meta.producer_id,
        previous_producer_id: meta.producer_id,
        producer_epoch: meta.producer_epoch,
        last_producer_epoch: meta.producer_epoch,
        timeout_ms: meta.timeout_ms,
        state,
        partitions: BTreeSet::new(),
        groups: BTreeSet::new(),
        txn_start_ms: meta.txn_start_ms,
        last_update_ms: now_ms,
    }
}

/// An Ongoing transaction older than its timeout (started before
/// `now_ms - timeout_ms`, strictly, as Kafka): its abort, PrepareAbort with
/// the epoch bumped so the producer is fenced (Kafka's
/// `abortTimedOutTransactions`). The caller persists it and goes on as for
/// [`EndOutcome::Prepare`]. At i16::MAX the epoch is not bumped (see
/// `fence_and_abort`: Kafka 4.x aborts without the bump; 3.x threw and left
/// the transaction hanging).
pub fn timed_out(meta: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    let deadline = meta.txn_start_ms.saturating_add(i64::from(meta.timeout_ms));
    (meta.state == TxnState::Ongoing && deadline < now_ms).then(|| fence_and_abort(meta, now_ms))
}

/// Whether an idle id (Empty/Complete*) has not been used for
/// `transactional.id.expiration.ms` and may be removed (Kafka's
/// `shouldExpire`).
pub fn expired(meta: &TxnMetadata, now_ms: i64, id_expiration_ms: i64) -> bool {
    meta.state.is_idle() && meta.last_update_ms <= now_ms.saturating_sub(id_expiration_ms)
}

/// DescribeTransactions: the metadata, or TRANSACTIONAL_ID_NOT_FOUND for an
/// id with none (or being removed).
pub fn describe(current: Option<&TxnMetadata>) -> Result<&TxnMetadata, TxnError> {
    live(current).ok_or(TxnError::TransactionalIdNotFound)
}

/// The first byte of every encoding: its format.
const FORMAT: u8 = 0;

impl TxnMetadata {
    /// The durable form: format byte 0, then big-endian producer id,
    /// previous producer id (i64), epoch, last epoch (i16), timeout (i32),
    /// state id (u8), start and last update (i64), the partitions (u32
    /// count, each a u32-length-prefixed UTF-8 topic and an i32 partition)
    /// and the groups (u32 count, each u32-length-prefixed UTF-8).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(FORMAT);
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.previous_producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.last_producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.timeout_ms.to_be_bytes());
        out.push(self.state.id());
        out.extend_from_slice(&self.txn_start_ms.to_be_bytes());
        out.extend_from_slice(&self.last_update_ms.to_be_bytes());
        out.extend_from_slice(&count(self.partitions.len()).to_be_bytes());
        for (topic, partition) in &self.partitions {
            put_str(&mut out, topic);
            out.extend_from_slice(&partition.to_be_bytes());
        }
        out.extend_from_slice(&count(self.groups.len()).to_be_bytes());
        for group in &self.groups {
            put_str(&mut out, group);
        }
        out
    }

    /// The metadata of [`TxnMetadata::encode`]; `None` for anything else:
    /// another format, an unknown state, truncation, trailing bytes, bad
    /// UTF-8, or a partition or group listed twice. Never panics; allocates
    /// no more than the input holds.
    pub fn decode(bytes: &[u8]) -> Option<TxnMetadata> {
        let mut r = Reader(bytes);
        if r.take(1)? != [FORMAT] {
            return None;
        }
        let producer_id = i64::from_be_bytes(r.array()?);
        let previous_producer_id = i64::from_be_bytes(r.array()?);
        let producer_epoch = i16::from_be_bytes(r.array()?);
        let last_producer_epoch = i16::from_be_bytes(r.array()?);
        let timeout_ms = i32::from_be_bytes(r.array()?);
        let state = TxnState::from_id(r.take(1)?[0])?;
        let txn_start_ms = i64::from_be_bytes(r.array()?);
        let last_update_ms = i64::from_be_bytes(r.array()?);
        let mut partitions = BTreeSet::new();
        for _ in 0..u32::from_be_bytes(r.array()?) {
            let topic = r.string()?;
            let partition = i32::from_be_bytes(r.array()?);
            if !partitions.insert((topic, partition)) {
                return None;
            }
        }
        let mut groups = BTreeSet::new();
        for _ in 0..u32::from_be_bytes(r.array()?) {
            if !groups.insert(r.string()?) {
                return None;
            }
        }
        if !r.0.is_empty() {
            return None;
        }
        Some(TxnMetadata {
            producer_id,
            previous_producer_id,
            producer_epoch,
            last_producer_epoch,
            timeout_ms,
            state,
            partitions,
            groups,
            txn_start_ms,
            last_update_ms,
        })
    }
}

/// A length as the encoding counts it. Topic names, group ids and the
/// partitions of one transaction are far below 4 GiB; saturating keeps a
/// (never seen) larger one from wrapping into a plausible encoding — it
/// fails to decode instead.
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&count(s.len()).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The unread rest of an encoding.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(u32::from_be_bytes(self.array()?)).ok()?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TIMEOUT: i32 = 900_000;

    fn pids(start: i64) -> impl FnMut() -> i64 {
        let mut next = start;
        move || {
            next += 1;
            next - 1
        }
    }

    fn no_pid() -> i64 {
        panic!("no new producer id expected")
    }

    fn ready(outcome: Result<InitOutcome, TxnError>) -> TxnMetadata {
        match outcome {
            Ok(InitOutcome::Ready(m)) => m,
            other => panic!("expected Ready, got {other:?}"),
        }
    }

    fn prepared(outcome: Result<EndOutcome, TxnError>) -> TxnMetadata {
        match outcome {
            Ok(EndOutcome::Prepare(m)) => m,
            other => panic!("expected Prepare, got {other:?}"),
        }
    }

    fn tp(topic: &str, partition: i32) -> (String, i32) {
        (topic.to_owned(), partition)
    }

    /// A fresh id: pid 7, epoch 0, Empty, at t=1000.
    fn fresh() -> TxnMetadata {
        ready(init_producer_id(
            None,
            60_000,
            MAX_TIMEOUT,
            None,
            1000,
            &mut pids(7),
        ))
    }

    /// A fresh id with one partition added at t=2000.
    fn ongoing() -> TxnMetadata {
        add_partitions(Some(&fresh()), 7, 0, &[tp("t", 0)], 2000).unwrap()
    }

    /// An idle id at this epoch.
    fn idle_at(epoch: i16) -> TxnMetadata {
        TxnMetadata {
            producer_epoch: epoch,
            ..fresh()
        }
    }

    #[test]
    fn new_id_gets_new_pid_at_epoch_zero() {
        let m = fresh();
        assert_eq!(m.producer_id, 7);
        assert_eq!(m.producer_epoch, 0);
        assert_eq!(m.last_producer_epoch, -1);
        assert_eq!(m.state, TxnState::Empty);
        assert_eq!(m.timeout_ms, 60_000);
        assert_eq!(m.txn_start_ms, -1);
        assert_eq!(m.last_update_ms, 1000);
        // A Dead id is as good as none; an expected producer does not matter.
        let dead = TxnMetadata {
            state: TxnState::Dead,
            ..fresh()
        };
        let m = ready(init_producer_id(
            Some(&dead),
            1,
            MAX_TIMEOUT,
            Some((3, 9)),
            5,
            &mut pids(50),
        ));
        assert_eq!((m.producer_id, m.producer_epoch), (50, 0));
    }

    #[test]
    fn init_rejects_timeouts_out_of_range() {
        for t in [0, -1, MAX_TIMEOUT + 1] {
            assert_eq!(
                init_producer_id(None, t, MAX_TIMEOUT, None, 0, &mut no_pid),
                Err(TxnError::InvalidTransactionTimeout)
            );
        }
        assert!(init_producer_id(None, MAX_TIMEOUT, MAX_TIMEOUT, None, 0, &mut pids(1)).is_ok());
    }

    #[test]
    fn init_bumps_epoch_and_fences_the_old_producer() {
        let old = fresh();
        let new = ready(init_producer_id(
            Some(&old),
            30_000,
            MAX_TIMEOUT,
            None,
            3000,
            &mut no_pid,
        ));
        assert_eq!((new.producer_id, new.producer_epoch), (7, 1));
        assert_eq!(new.last_producer_epoch, -1);
        assert_eq!(new.timeout_ms, 30_000);
        assert_eq!(
            add_partitions(Some(&new), 7, 0, &[tp("t", 0)], 3001),
            Err(TxnError::Fenced)
        );
        assert_eq!(
            add_offsets(Some(&new), 7, 0, "g", 3001),
            Err(TxnError::Fenced)
        );
        assert_eq!(end_txn(Some(&new), 7, 0, true, 3001), Err(TxnError::Fenced));
        // A newer epoch than the coordinator's is refused the same way.
        assert_eq!(end_txn(Some(&new), 7, 2, true, 3001), Err(TxnError::Fenced));
        // After a completed transaction too.
        let done = complete(
            &prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000)),
            3001,
        );
        let new = ready(init_producer_id(
            Some(&done),
            30_000,
            MAX_TIMEOUT,
            None,
            3002,
            &mut no_pid,
        ));
        assert_eq!((new.state, new.producer_epoch), (TxnState::Empty, 1));
        assert!(new.partitions.is_empty() && new.groups.is_empty());
        assert_eq!(new.txn_start_ms, -1);
    }

    #[test]
    fn init_with_ongoing_transaction_aborts_it_first() {
        let mut cur = ongoing();
        cur.groups.insert("g".into());
        let abort = match init_producer_id(Some(&cur), 1, MAX_TIMEOUT, None, 5000, &mut no_pid) {
            Ok(InitOutcome::AbortFirst(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(abort.state, TxnState::PrepareAbort);
        assert_eq!(abort.producer_epoch, 1);
        assert_eq!(abort.last_producer_epoch, -1);
        assert_eq!(abort.partitions, cur.partitions);
        assert_eq!(abort.groups, cur.groups);
        // The request's timeout applies on the retry, not to the abort.
        assert_eq!(abort.timeout_ms, cur.timeout_ms);
        // The old producer is fenced; the retry waits for the abort...
        assert_eq!(
            end_txn(Some(&abort), 7, 0, true, 5001),
            Err(TxnError::Fenced)
        );
        assert_eq!(
            init_producer_id(Some(&abort), 1, MAX_TIMEOUT, None, 5001, &mut no_pid),
            Err(TxnError::ConcurrentTransactions)
        );
        // ...then gets the epoch bumped once more.
        let done = complete(&abort, 5002);
        assert_eq!(done.state, TxnState::CompleteAbort);
        let m = ready(init_producer_id(
            Some(&done),
            1,
            MAX_TIMEOUT,
            None,
            5003,
            &mut no_pid,
        ));
        assert_eq!((m.producer_id, m.producer_epoch, m.timeout_ms), (7, 2, 1));
    }

    #[test]
    fn init_in_prepare_states_is_concurrent() {
        for commit in [true, false] {
            let p = prepared(end_txn(Some(&ongoing()), 7, 0, commit, 3000));
            assert_eq!(
                init_producer_id(Some(&p), 1, MAX_TIMEOUT, None, 3001, &mut no_pid),
                Err(TxnError::ConcurrentTransactions)
            );
            assert_eq!(
                init_producer_id(Some(&p), 1, MAX_TIMEOUT, Some((7, 0)), 3001, &mut no_pid),
                Err(TxnError::ConcurrentTransactions)
            );
        }
    }

    #[test]
    fn init_with_expected_producer_follows_kip_360() {
        let cur = fresh();
        let init = |m: &TxnMetadata, expected| {
            init_producer_id(Some(m), 1, MAX_TIMEOUT, Some(expected), 9, &mut no_pid)
        };
        // The current epoch: bumped, and the last epoch remembered.
        let bumped = ready(init(&cur, (7, 0)));
        assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (1, 0));
        // A retry of that call: the same epoch, not bumped again.
        let retried = ready(init(&bumped, (7, 0)));
        assert_eq!(
            (retried.producer_epoch, retried.last_producer_epoch),
            (1, 0)
        );
        // Neither the current nor the last epoch: fenced.
        assert_eq!(init(&bumped, (7, 5)), Err(TxnError::Fenced));
        // Another producer's InitProducerId (no expected) resets the last
        // epoch: the old producer's retry is fenced.
        let other = ready(init_producer_id(
            Some(&bumped),
            1,
            MAX_TIMEOUT,
            None,
            9,
            &mut no_pid,
        ));
        assert_eq!((other.producer_epoch, other.last_producer_epoch), (2, -1));
        assert_eq!(init(&other, (7, 0)), Err(TxnError::Fenced));
        assert_eq!(init(&other, (7, 1)), Err(TxnError::Fenced));
        // Another producer id: fenced.
        assert_eq!(init(&cur, (8, 0)), Err(TxnError::Fenced));
    }

    #[test]
    fn epoch_overflow_rotates_the_producer_id() {
        // MAX - 2 is not exhausted: bumped to MAX - 1.
        let m = ready(init_producer_id(
            Some(&idle_at(i16::MAX - 2)),
            1,
            MAX_TIMEOUT,
            None,
            9,
            &mut no_pid,
        ));
        assert_eq!((m.producer_id, m.producer_epoch), (7, i16::MAX - 1));
        // MAX - 1 (and MAX, after a fence) are: a new producer id at 0.
        for epoch in [i16::MAX - 1, i16::MAX] {
            let m = ready(init_producer_id(
                Some(&idle_at(epoch)),
                1,
                MAX_TIMEOUT,
                None,
                9,
                &mut pids(100),
            ));
            assert_eq!(
                (m.producer_id, m.producer_epoch, m.last_producer_epoch),
                (100, 0, -1)
            );
            assert_eq!(m.previous_producer_id, 7);
        }
        // With the expected producer (KIP-360) the old epoch is remembered,
        // so the retry of the rotation gets the same new producer id.
        let cur = idle_at(i16::MAX - 1);
        let rotated = ready(init_producer_id(
            Some(&cur),
            1,
            MAX_TIMEOUT,
            Some((7, i16::MAX - 1)),
            9,
            &mut pids(100),
        ));
        assert_eq!((rotated.producer_id, rotated.producer_epoch), (100, 0));
        assert_eq!(rotated.last_producer_epoch, i16::MAX - 1);
        let retry = ready(init_producer_id(
            Some(&rotated),
            1,
            MAX_TIMEOUT,
            Some((7, i16::MAX - 1)),
            10,
            &mut no_pid,
        ));
        assert_eq!((retry.producer_id, retry.producer_epoch), (100, 0));
        // The old producer id with an epoch that is not exhausted: fenced.
        assert_eq!(
            init_producer_id(
                Some(&rotated),
                1,
                MAX_TIMEOUT,
                Some((7, 3)),
                10,
                &mut no_pid
            ),
            Err(TxnError::Fenced)
        );
        // An exhausted epoch with a stale expected epoch that is its last one:
        // a retry, answered without a bump (Kafka throws here).
        let at_max = TxnMetadata {
            last_producer_epoch: i16::MAX - 2,
            ..idle_at(i16::MAX - 1)
        };
        let m = ready(init_producer_id(
            Some(&at_max),
            1,
            MAX_TIMEOUT,
            Some((7, i16::MAX - 2)),
            9,
            &mut no_pid,
        ));
        assert_eq!((m.producer_id, m.producer_epoch), (7, i16::MAX - 1));
    }

    #[test]
    fn add_partitions_opens_and_extends_the_transaction() {
        let m = ongoing();
        assert_eq!(m.state, TxnState::Ongoing);
        assert_eq!(m.txn_start_ms, 2000);
        assert_eq!(m.partitions, BTreeSet::from([tp("t", 0)]));
        let m2 = add_partitions(Some(&m), 7, 0, &[tp("t", 1), tp("u", 0)], 2500).unwrap();
        assert_eq!(m2.txn_start_ms, 2000);
        assert_eq!(m2.last_update_ms, 2500);
        assert_eq!(m2.partitions.len(), 3);
        // Already there: unchanged, nothing to persist.
        let same = add_partitions(Some(&m2), 7, 0, &[tp("u", 0)], 2600).unwrap();
        assert_eq!(same, m2);
        // After a completed transaction a new one starts from nothing.
        let mut with_group = m2.clone();
        with_group.groups.insert("g".into());
        let done = complete(
            &prepared(end_txn(Some(&with_group), 7, 0, true, 3000)),
            3100,
        );
        assert!(done.partitions.is_empty() && done.groups.is_empty());
        assert_eq!(done.txn_start_ms, 2000);
        let next = add_partitions(Some(&done), 7, 0, &[tp("v", 2)], 4000).unwrap();
        assert_eq!(next.state, TxnState::Ongoing);
        assert_eq!(next.txn_start_ms, 4000);
        assert_eq!(next.partitions, BTreeSet::from([tp("v", 2)]));
        assert!(next.groups.is_empty());
    }

    #[test]
    fn add_partitions_refusals() {
        let parts = [tp("t", 0)];
        assert_eq!(
            add_partitions(None, 7, 0, &parts, 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
        let dead = TxnMetadata {
            state: TxnState::Dead,
            ..fresh()
        };
        assert_eq!(
            add_partitions(Some(&dead), 7, 0, &parts, 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            add_partitions(Some(&fresh()), 8, 0, &parts, 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            add_partitions(Some(&fresh()), 7, 1, &parts, 1),
            Err(TxnError::Fenced)
        );
        for commit in [true, false] {
            let p = prepared(end_txn(Some(&ongoing()), 7, 0, commit, 3000));
            assert_eq!(
                add_partitions(Some(&p), 7, 0, &parts, 3001),
                Err(TxnError::ConcurrentTransactions)
            );
            assert_eq!(
                add_offsets(Some(&p), 7, 0, "g", 3001),
                Err(TxnError::ConcurrentTransactions)
            );
        }
    }

    #[test]
    fn add_offsets_adds_the_group() {
        let m = add_offsets(Some(&fresh()), 7, 0, "g", 2000).unwrap();
        assert_eq!(m.state, TxnState::Ongoing);
        assert_eq!(m.txn_start_ms, 2000);
        assert_eq!(m.groups, BTreeSet::from(["g".to_owned()]));
        assert!(m.partitions.is_empty());
        let m2 = add_offsets(Some(&m), 7, 0, "h", 2100).unwrap();
        assert_eq!(m2.groups.len(), 2);
        assert_eq!(m2.txn_start_ms, 2000);
        assert_eq!(add_offsets(Some(&m2), 7, 0, "h", 2200).unwrap(), m2);
        assert_eq!(
            add_offsets(None, 7, 0, "g", 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(add_offsets(Some(&m2), 7, 1, "g", 1), Err(TxnError::Fenced));
        assert!(group_in_transaction(Some(&m2), 7, 0, "h"));
        assert!(!group_in_transaction(Some(&m2), 7, 0, "x"));
        assert!(!group_in_transaction(Some(&m2), 7, 1, "h"));
    }

    #[test]
    fn in_transaction_checks_producer_state_and_partition() {
        let m = ongoing();
        assert!(in_transaction(Some(&m), 7, 0, "t", 0));
        assert!(!in_transaction(Some(&m), 7, 0, "t", 1));
        assert!(!in_transaction(Some(&m), 7, 1, "t", 0));
        assert!(!in_transaction(Some(&m), 8, 0, "t", 0));
        assert!(!in_transaction(None, 7, 0, "t", 0));
        let p = prepared(end_txn(Some(&m), 7, 0, true, 3000));
        assert!(!in_transaction(Some(&p), 7, 0, "t", 0));
    }

    #[test]
    fn end_txn_prepares_then_completes() {
        for (commit, prep, done) in [
            (true, TxnState::PrepareCommit, TxnState::CompleteCommit),
            (false, TxnState::PrepareAbort, TxnState::CompleteAbort),
        ] {
            let cur = ongoing();
            let p = prepared(end_txn(Some(&cur), 7, 0, commit, 3000));
            assert_eq!(p.state, prep);
            assert_eq!(
                (p.producer_epoch, p.partitions.clone()),
                (0, cur.partitions.clone())
            );
            assert_eq!(p.last_update_ms, 3000);
            let c = complete(&p, 3100);
            assert_eq!(c.state, done);
            assert_eq!(
                (c.producer_id, c.producer_epoch, c.last_producer_epoch),
                (7, 0, 0)
            );
            assert!(c.partitions.is_empty() && c.groups.is_empty());
            assert_eq!((c.txn_start_ms, c.last_update_ms), (2000, 3100));
            // Nothing to complete elsewhere.
            assert_eq!(complete(&c, 3200), c);
        }
        // An empty transaction still goes through Prepare, as Kafka.
        let empty = add_offsets(Some(&fresh()), 7, 0, "g", 2000).unwrap();
        let mut empty = empty;
        empty.groups.clear();
        let p = prepared(end_txn(Some(&empty), 7, 0, true, 3000));
        assert!(p.partitions.is_empty() && p.groups.is_empty());
    }

    #[test]
    fn end_txn_retry_after_completion_succeeds() {
        let commit = complete(&prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000)), 3001);
        assert_eq!(
            end_txn(Some(&commit), 7, 0, true, 3002),
            Ok(EndOutcome::AlreadyDone)
        );
        let abort = complete(
            &prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000)),
            3001,
        );
        assert_eq!(
            end_txn(Some(&abort), 7, 0, false, 3002),
            Ok(EndOutcome::AlreadyDone)
        );
        // A retry from the fenced epoch is not a retry.
        assert_eq!(
            end_txn(Some(&abort), 7, 1, false, 3002),
            Err(TxnError::Fenced)
        );
    }

    #[test]
    fn end_txn_the_other_way_after_completion_is_invalid() {
        let commit = complete(&prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000)), 3001);
        assert_eq!(
            end_txn(Some(&commit), 7, 0, false, 3002),
            Err(TxnError::InvalidTxnState)
        );
        let abort = complete(
            &prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000)),
            3001,
        );
        assert_eq!(
            end_txn(Some(&abort), 7, 0, true, 3002),
            Err(TxnError::InvalidTxnState)
        );
    }

    #[test]
    fn end_txn_in_prepare_states() {
        let pc = prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000));
        assert_eq!(
            end_txn(Some(&pc), 7, 0, true, 3001),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            end_txn(Some(&pc), 7, 0, false, 3001),
            Err(TxnError::InvalidTxnState)
        );
        let pa = prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000));
        assert_eq!(
            end_txn(Some(&pa), 7, 0, false, 3001),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            end_txn(Some(&pa), 7, 0, true, 3001),
            Err(TxnError::InvalidTxnState)
        );
    }

    #[test]
    fn end_txn_refusals() {
        assert_eq!(
            end_txn(Some(&fresh()), 7, 0, true, 1),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            end_txn(Some(&fresh()), 7, 0, false, 1),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            end_txn(None, 7, 0, true, 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            end_txn(Some(&ongoing()), 8, 0, true, 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
        let dead = TxnMetadata {
            state: TxnState::Dead,
            ..fresh()
        };
        assert_eq!(
            end_txn(Some(&dead), 7, 0, true, 1),
            Err(TxnError::InvalidProducerIdMapping)
        );
    }

    #[test]
    fn timeout_aborts_and_bumps_the_epoch() {
        let m = ongoing(); // started at 2000, timeout 60 000
        assert_eq!(timed_out(&m, 62_000), None);
        let abort = timed_out(&m, 62_001).unwrap();
        assert_eq!(abort.state, TxnState::PrepareAbort);
        assert_eq!((abort.producer_id, abort.producer_epoch), (7, 1));
        assert_eq!(abort.last_producer_epoch, -1);
        assert_eq!(abort.partitions, m.partitions);
        assert_eq!(abort.last_update_ms, 62_001);
        // The producer is fenced: its commit and its next add are refused.
        assert_eq!(
            end_txn(Some(&abort), 7, 0, true, 62_002),
            Err(TxnError::Fenced)
        );
        let done = complete(&abort, 62_003);
        assert_eq!(done.state, TxnState::CompleteAbort);
        assert_eq!(
            add_partitions(Some(&done), 7, 0, &[tp("t", 0)], 62_004),
            Err(TxnError::Fenced)
        );
        // Only Ongoing transactions time out.
        assert_eq!(timed_out(&done, i64::MAX), None);
        assert_eq!(timed_out(&fresh(), i64::MAX), None);
    }

    #[test]
    fn timeout_at_the_last_epoch_does_not_overflow() {
        // A client has at most MAX - 1; the fence takes it to MAX, and the
        // next InitProducerId rotates.
        let m = TxnMetadata {
            producer_epoch: i16::MAX - 1,
            ..ongoing()
        };
        let abort = timed_out(&m, i64::MAX).unwrap();
        assert_eq!(abort.producer_epoch, i16::MAX);
        let done = complete(&abort, 1);
        let m2 = ready(init_producer_id(
            Some(&done),
            1,
            MAX_TIMEOUT,
            None,
            2,
            &mut pids(40),
        ));
        assert_eq!((m2.producer_id, m2.producer_epoch), (40, 0));
        // At MAX (a bug elsewhere) it aborts without the bump, as Kafka 4.x.
        let broken = TxnMetadata {
            producer_epoch: i16::MAX,
            ..ongoing()
        };
        assert_eq!(
            timed_out(&broken, i64::MAX).unwrap().producer_epoch,
            i16::MAX
        );
    }

    #[test]
    fn idle_ids_expire() {
        let m = fresh(); // last update 1000
        assert!(!expired(&m, 1000 + 604_800_000 - 1, 604_800_000));
        assert!(expired(&m, 1000 + 604_800_000, 604_800_000));
        assert!(!expired(&ongoing(), i64::MAX, 1));
        let p = prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000));
        assert!(!expired(&p, i64::MAX, 1));
        assert!(expired(&complete(&p, 3001), i64::MAX, 1));
        assert!(!expired(&m, i64::MIN, i64::MAX));
    }

    #[test]
    fn describe_finds_live_ids_only() {
        let m = fresh();
        assert_eq!(describe(Some(&m)), Ok(&m));
        assert_eq!(describe(None), Err(TxnError::TransactionalIdNotFound));
        let dead = TxnMetadata {
            state: TxnState::Dead,
            ..fresh()
        };
        assert_eq!(
            describe(Some(&dead)),
            Err(TxnError::TransactionalIdNotFound)
        );
        assert_eq!(TxnError::TransactionalIdNotFound.code(true), 105);
    }

    #[test]
    fn error_codes_and_fenced_versions() {
        assert_eq!(TxnError::ConcurrentTransactions.code(false), 51);
        assert_eq!(TxnError::Fenced.code(true), 90);
        assert_eq!(TxnError::Fenced.code(false), 47);
        assert_eq!(TxnError::InvalidProducerIdMapping.code(true), 49);
        assert_eq!(TxnError::InvalidTxnState.code(true), 48);
        assert_eq!(TxnError::InvalidTransactionTimeout.code(true), 50);
        for (api, first) in [
            (API_INIT_PRODUCER_ID, 4),
            (API_ADD_PARTITIONS_TO_TXN, 2),
            (API_ADD_OFFSETS_TO_TXN, 2),
            (API_END_TXN, 2),
        ] {
            assert_eq!(fenced_code(api, first - 1), 47);
            assert_eq!(fenced_code(api, first), 90);
            assert_eq!(TxnError::Fenced.code_for(api, first), 90);
        }
        for v in 0..12 {
            assert_eq!(fenced_code(API_TXN_OFFSET_COMMIT, v), 47);
            assert_eq!(fenced_code(API_PRODUCE, v), 47);
        }
        assert_eq!(TxnError::InvalidTxnState.code_for(API_END_TXN, 0), 48);
    }

    #[test]
    fn state_ids_and_names() {
        for id in 0..=6 {
            assert_eq!(TxnState::from_id(id).unwrap().id(), id);
        }
        assert_eq!(TxnState::from_id(7), None);
        assert_eq!(TxnState::PrepareCommit.name(), "PrepareCommit");
    }

    fn sample() -> TxnMetadata {
        let mut m = ongoing();
        m.partitions.insert(tp("ünïcode", i32::MAX));
        m.partitions.insert(tp("", -1));
        m.groups.insert("g".into());
        m.groups.insert(String::new());
        m.previous_producer_id = -1;
        m.last_producer_epoch = i16::MIN;
        m.last_update_ms = i64::MIN;
        m
    }

    #[test]
    fn encode_decode_round_trip() {
        let samples = [
            sample(),
            fresh(),
            complete(&prepared(end_txn(Some(&ongoing()), 7, 0, false, 3)), 4),
            TxnMetadata {
                state: TxnState::Dead,
                ..fresh()
            },
        ];
        for m in samples {
            assert_eq!(TxnMetadata::decode(&m.encode()), Some(m));
        }
    }

    #[test]
    fn every_truncation_decodes_to_none() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert_eq!(TxnMetadata::decode(&bytes[..len]), None, "length {len}");
        }
    }

    #[test]
    fn malformed_encodings_decode_to_none() {
        let good = sample().encode();
        // Another format, trailing bytes.
        let mut b = good.clone();
        b[0] = 1;
        assert_eq!(TxnMetadata::decode(&b), None);
        let mut b = good.clone();
        b.push(0);
        assert_eq!(TxnMetadata::decode(&b), None);
        // An unknown state (its byte follows 1 + 8 + 8 + 2 + 2 + 4).
        let mut b = fresh().encode();
        b[25] = 7;
        assert_eq!(TxnMetadata::decode(&b), None);
        // A huge count or length with nothing behind it.
        let mut b = fresh().encode();
        let n = b.len();
        b[n - 8..n - 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(TxnMetadata::decode(&b), None);
        // Bad UTF-8 in a group; a group listed twice.
        let mut m = fresh();
        m.groups.insert("a".into());
        let mut b = m.encode();
        *b.last_mut().unwrap() = 0xff;
        assert_eq!(TxnMetadata::decode(&b), None);
        let mut b = m.encode();
        let n = b.len();
        b[n - 9..n - 5].copy_from_slice(&2u32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 1, b'a']);
        assert_eq!(TxnMetadata::decode(&b), None);
        // Arbitrary bytes and bit flips never panic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = good.clone();
            let i = (x % b.len() as u64) as usize;
            b[i] ^= (x >> 32) as u8 | 1;
            let _ = TxnMetadata::decode(&b);
            let junk: Vec<u8> = (0..(x % 64)).map(|k| (x >> (k % 56)) as u8).collect();
            let _ = TxnMetadata::decode(&junk);
        }
    }
}
