//! Idempotent producers: per partition and producer id, the epoch and the
//! sequence numbers of the last five batches, so a resent batch is answered
//! with its original offsets and a gap is refused.
//!
//! Transactions too: where each producer's open transaction began in this
//! partition (the last stable offset is the earliest of those, and of
//! transactions whose marker is not yet durable), and the aborted
//! transactions a read_committed reader must skip.
//!
//! The state is rebuilt with the log: a snapshot written when a segment
//! rolls (`{base}.snapshot`, the state as of offset `base`) plus the batches
//! of the active segment, which recovery scans anyway.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::batch::{BatchHeader, Marker};

/// A producer as DescribeProducers tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last batch's last sequence (-1: none kept).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The highest coordinator epoch of its transaction markers (-1: none).
    pub coordinator_epoch: i32,
    /// Where its open transaction begins, if one is open.
    pub txn_start_offset: Option<i64>,
}

/// A transaction that ended with an abort marker: its data batches lie in
/// `first_offset..last_offset` (the marker's offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// How many recent batches per producer are remembered (Kafka's five
/// in-flight requests per connection).
pub const BATCHES_KEPT: usize = 5;

/// A remembered batch: its sequence range and where it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMeta>,
    /// Wall-clock ms of the last append (for expiry).
    pub last_append_ms: i64,
    /// The offset of this producer's first batch in its open transaction.
    pub txn_first_offset: Option<i64>,
    /// The highest coordinator epoch of its markers here (-1: none): a
    /// marker from an older coordinator is refused (Kafka's
    /// TRANSACTION_COORDINATOR_FENCED), since a deposed coordinator's late
    /// marker could end a later transaction of the same producer.
    pub coordinator_epoch: i32,
}

/// What to do with a producer's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// New and in order: append it.
    Append,
    /// Already written: answer with its original offsets, write nothing.
    Duplicate { base_offset: i64, last_offset: i64 },
}

/// Why a producer's batch is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequenceError {
    OutOfOrder {
        expected: i32,
        got: i32,
    },
    StaleEpoch {
        current: i16,
        got: i16,
    },
    /// A marker from a coordinator older than one that wrote a marker
    /// for the producer here.
    CoordinatorFenced {
        current: i32,
        got: i32,
    },
}

impl std::fmt::Display for SequenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequenceError::OutOfOrder { expected, got } => {
                write!(
                    f,
                    "out of order sequence number: expected {expected}, got {got}"
                )
            }
            SequenceError::StaleEpoch { current, got } => {
                write!(
                    f,
                    "producer epoch {got} is older than the current epoch {current}"
                )
            }
            SequenceError::CoordinatorFenced { current, got } => {
                write!(
                    f,
                    "a transaction marker of coordinator epoch {got}, older than {current}, which wrote one already"
                )
            }
        }
    }
}

/// The sequence after `seq` (sequences wrap at i32::MAX, as Kafka's).
fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

fn last_seq(h: &BatchHeader) -> i32 {
    let span = h.record_count.max(1) - 1;
    (h.base_sequence as i64 + span as i64).rem_euclid(i32::MAX as i64 + 1) as i32
}

/// Every producer's state for one partition. Lives with its log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// The open transactions as (first offset, producer id), so the
    /// earliest is found without looking at every producer (a fetch asks
    /// for it each time).
    open: BTreeSet<(i64, i64)>,
    /// Ended transactions as (first offset, marker offset), until the
    /// marker is durable: readers of committed data stop before them.
    ending: Vec<(i64, i64)>,
    /// Aborted transactions, in marker order.
    aborted: Vec<AbortedTxn>,
}

impl ProducerStates {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Checks a marker's coordinator epoch before it is appended (`check`
    /// checks the rest).
    pub fn check_coordinator(&self, h: &BatchHeader, epoch: i32) -> Result<(), SequenceError> {
        match self.producers.get(&h.producer_id) {
            Some(e) if epoch < e.coordinator_epoch => Err(SequenceError::CoordinatorFenced {
                current: e.coordinator_epoch,
                got: epoch,
            }),
            _ => Ok(()),
        }
    }

    /// Checks a batch before it is appended. Batches without a producer id
    /// are always appended.
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, SequenceError> {
        if h.producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        // No state (new, or expired): accept whatever sequence it starts at,
        // so expiry never fails a live producer.
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return Ok(SequenceCheck::Append);
        };
        if h.is_control() {
            // A marker (written by the node, never a client) has no
            // sequence; it may not come from a fenced epoch.
            if h.producer_epoch < entry.epoch {
                return Err(SequenceError::StaleEpoch {
                    current: entry.epoch,
                    got: h.producer_epoch,
                });
            }
            return Ok(SequenceCheck::Append);
        }
        if h.producer_epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                current: entry.epoch,
                got: h.producer_epoch,
            });
        }
        if h.producer_epoch > entry.epoch {
            // A bumped epoch starts its sequences again at 0.
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    expected: 0,
                    got: h.base_sequence,
                })
            };
        }
        let last = last_seq(h);
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: b.base_offset,
                last_offset: b.last_offset,
            });
        }
        let expected = entry
            .batches
            .back()
            .map_or(h.base_sequence, |b| next_seq(b.last_seq));
        if h.base_sequence != expected {
            return Err(SequenceError::OutOfOrder {
                expected,
                got: h.base_sequence,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// Records an appended batch (its base offset assigned); `marker` is
    /// what a control batch says, with its coordinator's epoch.
    pub fn record(&mut self, h: &BatchHeader, marker: Option<(Marker, i32)>, now_ms: i64) {
        if h.producer_id < 0 {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert(ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
                last_append_ms: now_ms,
                txn_first_offset: None,
                coordinator_epoch: -1,
            });
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        if h.is_control() {
            // A marker ends the producer's transaction here; it has no
            // sequence of its own.
            if let Some((_, epoch)) = marker {
                entry.coordinator_epoch = entry.coordinator_epoch.max(epoch);
            }
            let marker = marker.map(|(m, _)| m);
            if let Some(first) = entry.txn_first_offset.take() {
                self.open.remove(&(first, h.producer_id));
                let end = h.base_offset;
                self.ending.push((first, end));
                if marker == Some(Marker::Abort) {
                    self.aborted.push(AbortedTxn {
                        producer_id: h.producer_id,
                        first_offset: first,
                        last_offset: end,
                    });
                }
            }
            return;
        }
        if h.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(h.base_offset);
            self.open.insert((h.base_offset, h.producer_id));
        }
        if entry.batches.len() == BATCHES_KEPT {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: last_seq(h),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
    }

    /// Forgets producers idle for longer than `max_idle_ms` (never one
    /// with an open transaction: its marker is still to come).
    pub fn expire(&mut self, now_ms: i64, max_idle_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.txn_first_offset.is_some() || now_ms - e.last_append_ms <= max_idle_ms
        });
        before - self.producers.len()
    }

    /// The first offset a read_committed reader may not pass, given the
    /// durable high watermark: the start of the earliest transaction still
    /// open, or ended by a marker at or past `high_watermark`; `None` when
    /// there is none (the last stable offset is then the high watermark).
    pub fn first_unstable(&self, high_watermark: i64) -> Option<i64> {
        let open = self.open.first().map(|(first, _)| *first);
        let ending = self
            .ending
            .iter()
            .filter(|(_, marker)| *marker >= high_watermark)
            .map(|(first, _)| *first);
        open.into_iter().chain(ending).min()
    }

    /// Forgets ended transactions whose markers are durable (below
    /// `high_watermark`): they hold no reader back any more.
    pub fn settle(&mut self, high_watermark: i64) {
        self.ending.retain(|(_, marker)| *marker >= high_watermark);
    }

    /// The aborted transactions with data in `from..upto`, oldest first.
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|t| t.last_offset >= from && t.first_offset < upto)
            .copied()
            .collect()
    }

    /// Forgets aborted transactions wholly before `log_start` (their
    /// segments are gone).
    pub fn forget_before(&mut self, log_start: i64) {
        self.aborted.retain(|t| t.last_offset >= log_start);
        self.ending.retain(|(_, marker)| *marker >= log_start);
    }

    /// Every producer's state (DescribeProducers), by id.
    pub fn summary(&self) -> Vec<ProducerSummary> {
        let mut out: Vec<_> = self
            .producers
            .iter()
            .map(|(id, e)| ProducerSummary {
                producer_id: *id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_append_ms,
                coordinator_epoch: e.coordinator_epoch,
                txn_start_offset: e.txn_first_offset,
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    /// The producer's open transaction in this partition, if any.
    pub fn open_transaction(&self, producer_id: i64) -> Option<i64> {
        self.producers.get(&producer_id)?.txn_first_offset
    }

    /// Snapshot bytes: `SNAPSHOT_MAGIC`, the count, each producer (its
    /// open transaction's first offset or -1, its coordinator epoch) and
    /// its batches, the
    /// transactions ending and aborted, then a CRC-32C of everything before
    /// it. (A snapshot without the magic is the format before transactions:
    /// the same producers, no transactions.)
    pub fn encode(&self) -> Vec<u8> {
        let mut out = SNAPSHOT_MAGIC.to_vec();
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_append_ms.to_be_bytes());
            out.extend_from_slice(&e.txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.ending.len() as u32).to_be_bytes());
        for (first, marker) in &self.ending {
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&marker.to_be_bytes());
        }
        out.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        for t in &self.aborted {
            out.extend_from_slice(&t.producer_id.to_be_bytes());
            out.extend_from_slice(&t.first_offset.to_be_bytes());
            out.extend_from_slice(&t.last_offset.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a snapshot; `None` if it is damaged.
    pub fn decode(b: &[u8]) -> Option<ProducerStates> {
        if b.len() < 8 {
            return None;
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let with_coordinators = body.starts_with(&SNAPSHOT_MAGIC);
        let with_txns = with_coordinators || body.starts_with(&SNAPSHOT_MAGIC_V2);
        let mut at = if with_txns { SNAPSHOT_MAGIC.len() } else { 0 };
        let mut take = |n: usize| -> Option<&[u8]> {
            let s = body.get(at..at + n)?;
            at += n;
            Some(s)
        };
        let i64_at = |s: &[u8]| i64::from_be_bytes(s.try_into().expect("8 bytes"));
        let count = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let mut states = ProducerStates::default();
        for _ in 0..count {
            let id = i64_at(take(8)?);
            let epoch = i16::from_be_bytes(take(2)?.try_into().ok()?);
            let last_append_ms = i64_at(take(8)?);
            let txn_first_offset = if with_txns {
                Some(i64_at(take(8)?)).filter(|o| *o >= 0)
            } else {
                None
            };
            let coordinator_epoch = match with_coordinators {
                true => i32::from_be_bytes(take(4)?.try_into().ok()?),
                false => -1,
            };
            let n = take(1)?[0] as usize;
            let mut batches = VecDeque::with_capacity(n.min(BATCHES_KEPT));
            for _ in 0..n {
                batches.push_back(BatchMeta {
                    first_seq: i32::from_be_bytes(take(4)?.try_into().ok()?),
                    last_seq: i32::from_be_bytes(take(4)?.try_into().ok()?),
                    base_offset: i64_at(take(8)?),
                    last_offset: i64_at(take(8)?),
                });
            }
            if let Some(first) = txn_first_offset {
                states.open.insert((first, id));
            }
            states.producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_append_ms,
                    txn_first_offset,
                    coordinator_epoch,
                },
            );
        }
        if with_txns {
            let n = u32::from_be_bytes(take(4)?.try_into().ok()?);
            for _ in 0..n {
                states.ending.push((i64_at(take(8)?), i64_at(take(8)?)));
            }
            let n = u32::from_be_bytes(take(4)?.try_into().ok()?);
            for _ in 0..n {
                states.aborted.push(AbortedTxn {
                    producer_id: i64_at(take(8)?),
                    first_offset: i64_at(take(8)?),
                    last_offset: i64_at(take(8)?),
                });
            }
        }
        Some(states)
    }
}

/// The first bytes of a snapshot with transactions and coordinator
/// epochs (a count of producers in the first format never starts so: it
/// would be 1.46 billion).
const SNAPSHOT_MAGIC: [u8; 4] = *b"WPS3";
/// The same, from before coordinator epochs were kept (none: -1).
const SNAPSHOT_MAGIC_V2: [u8; 4] = *b"WPS2";

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, base: i64) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 100,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn sequences() {
        let mut s = ProducerStates::default();
        let a = header(7, 0, 0, 3, 10);
        assert_eq!(s.check(&a), Ok(SequenceCheck::Append));
        s.record(&a, None, 1);
        // The same batch again: its original offsets.
        assert_eq!(
            s.check(&header(7, 0, 0, 3, -1)),
            Ok(SequenceCheck::Duplicate {
                base_offset: 10,
                last_offset: 12
            })
        );
        // A gap.
        assert_eq!(
            s.check(&header(7, 0, 5, 1, -1)),
            Err(SequenceError::OutOfOrder {
                expected: 3,
                got: 5
            })
        );
        assert_eq!(s.check(&header(7, 0, 3, 1, -1)), Ok(SequenceCheck::Append));
        // A bumped epoch restarts at 0; an older epoch is refused.
        assert_eq!(s.check(&header(7, 1, 0, 1, -1)), Ok(SequenceCheck::Append));
        assert!(s.check(&header(7, 1, 4, 1, -1)).is_err());
        s.record(&header(7, 1, 0, 1, 20), None, 2);
        assert_eq!(
            s.check(&header(7, 0, 3, 1, -1)),
            Err(SequenceError::StaleEpoch { current: 1, got: 0 })
        );
        // Unknown producers and plain batches are appended.
        assert_eq!(s.check(&header(8, 0, 42, 1, -1)), Ok(SequenceCheck::Append));
        assert_eq!(
            s.check(&header(-1, -1, -1, 1, -1)),
            Ok(SequenceCheck::Append)
        );
    }

    #[test]
    fn keeps_five_and_wraps() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.record(&header(1, 0, i, 1, i as i64), None, 0);
        }
        assert_eq!(s.get(1).unwrap().batches.len(), BATCHES_KEPT);
        assert!(s.check(&header(1, 0, 1, 1, -1)).is_err());
        let mut w = ProducerStates::default();
        w.record(&header(2, 0, i32::MAX - 1, 2, 0), None, 0);
        assert_eq!(w.check(&header(2, 0, 0, 1, -1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn snapshot_round_trip_and_expiry() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 3, 0, 2, 0), None, 100);
        s.record(&header(2, 0, 9, 1, 2), None, 5000);
        let bytes = s.encode();
        assert_eq!(ProducerStates::decode(&bytes), Some(s.clone()));
        let mut bad = bytes.clone();
        bad[5] ^= 1;
        assert_eq!(ProducerStates::decode(&bad), None);
        assert_eq!(s.expire(6000, 2000), 1);
        assert!(s.get(1).is_none() && s.get(2).is_some());
    }

    fn txn(pid: i64, epoch: i16, count: i32, base: i64) -> BatchHeader {
        let mut h = header(pid, epoch, 0, count, base);
        h.attributes = crate::batch::ATTR_TRANSACTIONAL;
        h
    }

    fn marker(pid: i64, epoch: i16, base: i64) -> BatchHeader {
        let mut h = header(pid, epoch, -1, 1, base);
        h.attributes = crate::batch::ATTR_TRANSACTIONAL | crate::batch::ATTR_CONTROL;
        h
    }

    #[test]
    fn transactions_hold_the_stable_offset_until_their_marker_is_durable() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, 0, 2, 0), None, 0); // plain, offsets 0-1
        s.record(&txn(2, 0, 3, 2), None, 0); // open: 2-4
        s.record(&txn(3, 0, 1, 5), None, 0); // open: 5
        s.record(&txn(2, 0, 1, 6), None, 0); // more of 2's
        assert_eq!(s.first_unstable(7), Some(2));
        assert_eq!(s.open_transaction(2), Some(2));
        // 2 aborts at 7; until the marker is durable it still holds.
        s.record(&marker(2, 0, 7), Some((Marker::Abort, 3)), 0);
        assert_eq!(s.open_transaction(2), None);
        assert_eq!(s.first_unstable(7), Some(2));
        assert_eq!(s.first_unstable(8), Some(5));
        s.settle(8);
        // 3 commits at 8: nothing unstable once durable.
        s.record(&marker(3, 0, 8), Some((Marker::Commit, 3)), 0);
        // A marker of an older coordinator is refused; of the same or a
        // newer one, taken.
        assert_eq!(
            s.check_coordinator(&marker(3, 0, 9), 2),
            Err(SequenceError::CoordinatorFenced { current: 3, got: 2 })
        );
        assert_eq!(s.check_coordinator(&marker(3, 0, 9), 3), Ok(()));
        assert_eq!(s.check_coordinator(&marker(9, 0, 9), 0), Ok(()));
        assert_eq!(s.first_unstable(9), None);
        let aborted = AbortedTxn {
            producer_id: 2,
            first_offset: 2,
            last_offset: 7,
        };
        assert_eq!(s.aborted_between(0, 9), vec![aborted]);
        assert_eq!(s.aborted_between(8, 9), vec![]);
        assert_eq!(s.aborted_between(7, 9), vec![aborted]);
        // The snapshot keeps all of it; an open transaction is not expired.
        s.record(&txn(4, 0, 1, 9), None, 0);
        let back = ProducerStates::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.expire(1_000_000, 10), 3);
        assert_eq!(s.open_transaction(4), Some(9));
        s.forget_before(8);
        assert_eq!(s.aborted_between(0, 10), vec![]);
    }

    #[test]
    fn snapshots_from_before_coordinator_epochs_still_load() {
        let mut old = b"WPS2".to_vec();
        old.extend_from_slice(&1u32.to_be_bytes());
        old.extend_from_slice(&7i64.to_be_bytes());
        old.extend_from_slice(&2i16.to_be_bytes());
        old.extend_from_slice(&99i64.to_be_bytes());
        old.extend_from_slice(&12i64.to_be_bytes()); // open at 12
        old.push(0);
        old.extend_from_slice(&0u32.to_be_bytes());
        old.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32c::crc32c(&old);
        old.extend_from_slice(&crc.to_be_bytes());
        let s = ProducerStates::decode(&old).unwrap();
        assert_eq!(s.get(7).unwrap().coordinator_epoch, -1);
        assert_eq!(s.open_transaction(7), Some(12));
    }

    #[test]
    fn snapshots_from_before_transactions_still_load() {
        let mut old = Vec::new();
        old.extend_from_slice(&1u32.to_be_bytes());
        old.extend_from_slice(&7i64.to_be_bytes());
        old.extend_from_slice(&2i16.to_be_bytes());
        old.extend_from_slice(&99i64.to_be_bytes());
        old.push(0);
        let crc = crc32c::crc32c(&old);
        old.extend_from_slice(&crc.to_be_bytes());
        let s = ProducerStates::decode(&old).unwrap();
        assert_eq!(s.get(7).unwrap().epoch, 2);
        assert_eq!(s.open_transaction(7), None);
    }
}
