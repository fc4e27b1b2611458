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

use crate::topic_partition::{TopicPartition, TopicPartitionRef};

mod encoding;
mod errors;
#[cfg(test)]
mod tests;

pub use errors::{fenced_code, TxnApi, TxnError};

/// The producer id and epoch of "none" in Kafka's records.
pub const NO_PRODUCER_ID: i64 = -1;
/// See [`NO_PRODUCER_ID`].
pub const NO_PRODUCER_EPOCH: i16 = -1;

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
    pub partitions: BTreeSet<TopicPartition>,
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
    partitions: &[TopicPartition],
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
            && m.partitions
                .contains(&(topic, partition) as &dyn TopicPartitionRef)
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
