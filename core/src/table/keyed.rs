//! A keyed table's current rows (the latest row per primary key), kept per
//! shard for the partitions it owns and brought up to date from the log by
//! each scan. Held by the table code, not by the partition: a partition
//! knows its log, not what SQL makes of it.
//!
//! **Layers.** A partition's rows are, newest last: the snapshot chain on
//! disk (`keyed_snapshot`, mapped, read in place), a *frozen* layer being
//! written out as the next snapshot, and the rows applied from the log
//! since. A lookup goes from the newest layer down. At start-up only the
//! log past the chain's last offset is read; the shard's snapshot task
//! turns the applied rows into a delta (or merges the chain into a new full
//! snapshot) at segment rolls, every `TAIL_RECORDS` records and at a
//! clean stop.
//!
//! **One row per key across partitions.** A producer picks a record's
//! partition from its key's bytes with its own partitioner (Java's murmur2,
//! librdkafka's CRC-32 by default) and its own spelling of the key (`1`,
//! `{"id":1}`, Kafka Connect's `{"schema":…,"payload":…}`), so one key's
//! writes may land in several partitions. Each key has a *home*: the
//! partition Kafka's default partitioner gives its stored key (where SQL
//! writes go). A copy elsewhere is a *stray*. Before a multi-partition
//! keyed table is scanned, `settle` compares every stray with the other
//! copies of its key at the key's home and marks the losers; the scan then
//! skips them. The newest copy wins: the greater record timestamp, then
//! the home copy, then the greater partition. A tombstone in one partition
//! hides older copies in others until its `delete.retention.ms` has
//! passed (when compaction may remove it from the log too).
//!
//! This file holds a partition's rows (`KeyedRows`) and which copy wins;
//! `tables` holds a shard's (`KeyedTables`) and writes their snapshots
//! (`snapshot_due`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use serde_json::Value;

use super::keyed_snapshot::{self, parse_row, RowSource, Snapshot};
use crate::partition::Partition;
use crate::partitioner::partition_for_key;

mod tables;

pub use tables::{snapshot_due, KeyedTables};

/// A key's latest write in one partition.
#[derive(Debug, Clone)]
pub struct Entry {
    pub offset: i64,
    pub timestamp: i64,
    /// `None`: deleted (kept only in a table of several partitions, where
    /// it hides older copies elsewhere).
    pub row: Option<Vec<Value>>,
}

/// A key's latest write, wherever it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latest {
    pub offset: i64,
    pub timestamp: i64,
    /// A row rather than a deletion.
    pub live: bool,
}

impl Latest {
    fn of(e: &Entry) -> Latest {
        Latest {
            offset: e.offset,
            timestamp: e.timestamp,
            live: e.row.is_some(),
        }
    }
}

/// A copy of a key outside its home partition, as `settle` compares it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Claim {
    pub key: Vec<u8>,
    pub partition: i32,
    pub timestamp: i64,
}

/// Copies that lost to a newer copy of their key in another partition:
/// their keys, by partition.
pub type Losers = HashMap<i32, HashSet<Vec<u8>>>;

/// The order copies of one key win in: timestamp, then the home copy,
/// then the partition.
pub fn rank(timestamp: i64, at_home: bool, partition: i32) -> (i64, bool, i32) {
    (timestamp, at_home, partition)
}

/// Writes applied in memory, by key: each key's latest, or `None` for a
/// key removed (it masks the same key in the layers below).
pub type Layer = HashMap<Vec<u8>, Option<Entry>, foldhash::fast::RandomState>;

/// Records applied since the newest snapshot that make a new one due
/// (besides a segment roll): what a restart reads at most, about.
const TAIL_RECORDS: i64 = 100_000;
/// Deltas after which the chain is merged into a full snapshot, whatever
/// their size.
const MAX_DELTAS: usize = 8;
/// The most records applied since the newest snapshot that a stopping
/// node writes (a second or two of its stop; past it the next start reads
/// them from the log, as after a crash).
const STOP_RECORDS: i64 = 1_000_000;

/// One keyed table partition's current rows, in layers, each newer than
/// the ones below and masking their keys: the snapshot chain mapped from
/// disk (`keyed_snapshot`: a full snapshot and deltas), the writes being
/// made into the next snapshot (frozen while it is written), and the
/// writes applied since.
#[derive(Default)]
pub struct KeyedRows {
    /// Every record below this offset is applied.
    upto: i64,
    /// Oldest first.
    snaps: Vec<Rc<Snapshot>>,
    frozen: Option<Rc<Layer>>,
    rows: Layer,
    partitions: i32,
    /// Deletions kept (timestamp, key), oldest first, to forget them
    /// after `delete.retention.ms`.
    tombstones: VecDeque<(i64, Vec<u8>)>,
    /// Bumped when the rows are dropped and rebuilt: a snapshot taken
    /// before does not replace them.
    generation: u64,
}

impl KeyedRows {
    /// The rows as of the snapshots in the partition's directory, if there
    /// are any made under `schema` and the log still holds what follows
    /// them; otherwise none (the log is replayed).
    fn open(p: &Partition, schema: &str) -> KeyedRows {
        let start = p.log.log_start();
        let mut rows = KeyedRows {
            upto: start,
            ..KeyedRows::default()
        };
        let began = std::time::Instant::now();
        let chain = Snapshot::open_chain(p.log.dir(), schema);
        for why in &chain.refused {
            log::warn!(
                "{}-{}: {why}; reading the log from before it",
                p.topic,
                p.index
            );
        }
        let Some(upto) = chain.files.last().map(|f| f.upto) else {
            return rows;
        };
        if upto < start || upto > p.log.high_watermark() {
            log::info!(
                "{}-{}: the keyed rows' snapshots (up to offset {upto}) are outside the log \
                 ({start}..{}): rebuilding the rows from the log",
                p.topic,
                p.index,
                p.log.high_watermark()
            );
            return rows;
        }
        log::info!(
            "{}-{}: keyed rows from {} snapshot file(s) up to offset {upto} (mapped and checked in {} ms), \
             then the log from there",
            p.topic,
            p.index,
            chain.files.len(),
            began.elapsed().as_millis()
        );
        rows.upto = upto;
        rows.tombstones = chain.tombstones.into();
        rows.snaps = chain.files.into_iter().map(Rc::new).collect();
        rows
    }

    /// Where the newest snapshot ends.
    fn snapshot_upto(&self) -> Option<i64> {
        self.snaps.last().map(|s| s.upto)
    }

    /// The latest write of `key` here.
    pub fn get(&self, key: &[u8]) -> Option<Latest> {
        match self.rows.get(key) {
            Some(slot) => slot.as_ref().map(Latest::of),
            None => self.below(key),
        }
    }

    /// The latest write of `key` in the layers below the newest.
    fn below(&self, key: &[u8]) -> Option<Latest> {
        if let Some(slot) = self.frozen.as_ref().and_then(|f| f.get(key)) {
            return slot.as_ref().map(Latest::of);
        }
        let held = self.snaps.iter().rev().find_map(|s| s.get(key))?;
        (!held.gone).then_some(Latest {
            offset: held.offset,
            timestamp: held.timestamp,
            live: held.row.is_some(),
        })
    }

    /// Every key's latest write (rows and kept deletions), oldest first.
    fn latest_writes(&self) -> impl Iterator<Item = (&[u8], Latest, Row<'_>)> + '_ {
        let newest = &self.rows;
        chain_writes(&self.snaps, self.frozen.as_deref())
            .filter(move |(k, _, _)| !newest.contains_key(*k))
            .chain(layer_writes(newest))
    }

    /// The live rows, oldest write first (the order a scan returns them
    /// in), without the copies in `losers` (this is partition `index`).
    pub fn rows_in_offset_order<'a>(
        &'a self,
        index: i32,
        losers: Option<&'a Losers>,
    ) -> impl Iterator<Item = Result<Vec<Value>, String>> + 'a {
        let lost = losers.and_then(|l| l.get(&index));
        self.latest_writes()
            .filter(move |(k, _, _)| !lost.is_some_and(|l| l.contains(*k)))
            .filter_map(|(_, _, row)| match row {
                Row::Values(v) => Some(Ok(v.clone())),
                Row::Text(t) => Some(parse_row(t)),
                Row::Gone => None,
            })
    }

    /// This partition's copies of keys whose home is elsewhere.
    pub fn claims(&self, index: i32) -> Vec<Claim> {
        if self.partitions <= 1 {
            return Vec::new();
        }
        self.latest_writes()
            .filter(|(k, _, _)| partition_for_key(k, self.partitions) != index)
            .map(|(k, l, _)| Claim {
                key: k.to_vec(),
                partition: index,
                timestamp: l.timestamp,
            })
            .collect()
    }

    /// At a key's home (partition `index`): which of the copies `incoming`
    /// (strays of keys whose home is here) and of the copies here lost.
    pub fn settle(&self, index: i32, incoming: &[Claim]) -> Vec<(i32, Vec<u8>)> {
        let mut best: HashMap<&[u8], (i64, bool, i32)> = HashMap::new();
        let mut losers = Vec::new();
        for c in incoming {
            let r = rank(c.timestamp, false, c.partition);
            match best.get_mut(&c.key[..]) {
                Some(b) if *b > r => losers.push((c.partition, c.key.clone())),
                Some(b) => {
                    losers.push((b.2, c.key.clone()));
                    *b = r;
                }
                None => {
                    best.insert(&c.key[..], r);
                }
            }
        }
        for (key, (ts, at_home, partition)) in best {
            let Some(e) = self.get(key) else {
                continue;
            };
            let stray = (ts, at_home, partition);
            if rank(e.timestamp, true, index) > stray {
                losers.push((partition, key.to_vec()));
            } else {
                losers.push((index, key.to_vec()));
            }
        }
        losers
    }

    /// Freezes the writes since the newest snapshot for the next one: a
    /// delta of them, or, when `may_merge` and the deltas add up to half
    /// the full snapshot, the whole chain merged into a full one (always
    /// when there is none).
    fn freeze(&mut self, may_merge: bool) -> (Frozen, keyed_snapshot::Span) {
        let frozen = Rc::new(std::mem::take(&mut self.rows));
        self.frozen = Some(frozen.clone());
        let deltas: usize = self.snaps.iter().skip(1).map(|s| s.entry_count()).sum();
        let full = self.snaps.first().map_or(0, |s| s.entry_count());
        let merge = self.snaps.is_empty()
            || may_merge && (self.snaps.len() > MAX_DELTAS || 2 * (deltas + frozen.len()) >= full);
        let span = keyed_snapshot::Span {
            from: if merge { None } else { self.snapshot_upto() },
            upto: self.upto,
            tombstones: self.tombstones.iter().cloned().collect(),
        };
        let writes = Frozen {
            snaps: self.snaps.clone(),
            frozen,
            merge,
        };
        (writes, span)
    }

    /// Puts a snapshot written from `freeze` in place of what it holds.
    fn adopt(&mut self, snap: Snapshot, merge: bool) {
        if merge {
            self.snaps.clear();
        }
        self.snaps.push(Rc::new(snap));
        self.frozen = None;
    }

    /// Removes `key` (masking it where a lower layer holds it).
    fn remove(&mut self, key: &[u8]) {
        if self.below(key).is_some() {
            self.rows.insert(key.to_vec(), None);
        } else {
            self.rows.remove(key);
        }
    }

    fn apply(&mut self, key: &[u8], entry: Entry) {
        if entry.row.is_none() {
            if self.partitions <= 1 {
                self.remove(key);
                return;
            }
            self.tombstones.push_back((entry.timestamp, key.to_vec()));
        }
        self.rows.insert(key.to_vec(), Some(entry));
    }

    /// Forgets deletions older than `horizon` (ms).
    fn forget_tombstones(&mut self, horizon: i64) {
        while let Some((ts, _)) = self.tombstones.front() {
            if *ts >= horizon {
                break;
            }
            let (ts, key) = self.tombstones.pop_front().expect("a front");
            if self.get(&key).is_some_and(|e| !e.live && e.timestamp == ts) {
                self.remove(&key);
            }
        }
    }
}

/// Every key's latest write (rows and kept deletions) in a snapshot chain
/// and the layer above it, oldest first.
fn chain_writes<'a>(
    snaps: &'a [Rc<Snapshot>],
    frozen: Option<&'a Layer>,
) -> impl Iterator<Item = (&'a [u8], Latest, Row<'a>)> + 'a {
    let snapshotted = snaps.iter().enumerate().flat_map(move |(i, snap)| {
        let newer = &snaps[i + 1..];
        snap.entries()
            .filter(move |h| {
                !frozen.is_some_and(|f| f.contains_key(h.key))
                    && !newer.iter().any(|n| n.get(h.key).is_some())
            })
            .map(|h| {
                let l = Latest {
                    offset: h.offset,
                    timestamp: h.timestamp,
                    live: h.row.is_some(),
                };
                (h.key, l, h.row.map_or(Row::Gone, Row::Text))
            })
    });
    snapshotted.chain(frozen.into_iter().flat_map(layer_writes))
}

/// A layer's latest writes (not its masks), oldest first.
fn layer_writes(layer: &Layer) -> impl Iterator<Item = (&[u8], Latest, Row<'_>)> + '_ {
    // The offset beside the references: sorting millions of writes then
    // compares what is in hand, not what is behind a pointer.
    let mut held: Vec<(i64, &[u8], &Entry)> = layer
        .iter()
        .filter_map(|(k, slot)| slot.as_ref().map(|e| (e.offset, &k[..], e)))
        .collect();
    held.sort_unstable_by_key(|(offset, _, _)| *offset);
    held.into_iter().map(|(_, k, e)| {
        (
            k,
            Latest::of(e),
            e.row.as_ref().map_or(Row::Gone, Row::Values),
        )
    })
}

/// A row as a layer holds it.
enum Row<'a> {
    Values(&'a Vec<Value>),
    /// Its JSON text, in a snapshot.
    Text(&'a [u8]),
    Gone,
}

/// What a snapshot being written holds: the frozen layer, merged with the
/// chain below it (a full snapshot) or alone (a delta).
struct Frozen {
    snaps: Vec<Rc<Snapshot>>,
    frozen: Rc<Layer>,
    merge: bool,
}

impl Frozen {
    /// The writes to make, masks first, then in offset order.
    fn iter(&self) -> Box<dyn Iterator<Item = keyed_snapshot::Write<'_>> + '_> {
        if self.merge {
            return Box::new(chain_writes(&self.snaps, Some(&self.frozen)).map(to_write));
        }
        let masks = self
            .frozen
            .iter()
            .filter(|(_, slot)| slot.is_none())
            .map(|(key, _)| keyed_snapshot::Write {
                key,
                offset: -1,
                timestamp: -1,
                row: RowSource::Text(None),
                gone: true,
            });
        Box::new(masks.chain(layer_writes(&self.frozen).map(to_write)))
    }
}

/// A write as a snapshot file takes it.
fn to_write<'a>((key, l, row): (&'a [u8], Latest, Row<'a>)) -> keyed_snapshot::Write<'a> {
    keyed_snapshot::Write {
        key,
        offset: l.offset,
        timestamp: l.timestamp,
        row: match row {
            Row::Values(v) => RowSource::Values(Some(v)),
            Row::Text(t) => RowSource::Text(Some(t)),
            Row::Gone => RowSource::Text(None),
        },
        gone: false,
    }
}

#[cfg(test)]
mod tests;
