//! A transactional id's state in its durable form (the group log's
//! `Entry::Txn` value), and back.

use std::collections::BTreeSet;

use super::{TxnMetadata, TxnState};
use crate::topic_partition::TopicPartition;

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
        for tp in &self.partitions {
            put_str(&mut out, tp.topic());
            out.extend_from_slice(&tp.partition.to_be_bytes());
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
            if !partitions.insert(TopicPartition::new(topic, partition)) {
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
