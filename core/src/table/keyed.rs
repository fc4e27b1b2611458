//! A keyed table's current rows (the latest row per primary key), kept per
//! shard for the partitions it owns and brought up to date from the log by
//! each scan. Held by the table code, not by the partition: a partition
//! knows its log, not what SQL makes of it.
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

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::ControlFlow;
use std::rc::Rc;

use serde_json::Value;

use super::scan::{each_record, table_row, ScanError};
use super::schema::TableSchema;
use crate::by_partition::TopicPartition;
use crate::catalog::TopicMeta;
use crate::partition::Partition;
use crate::partitioner::partition_for_key;

/// A key's latest write in one partition.
#[derive(Debug, Clone)]
pub struct Entry {
    pub offset: i64,
    pub timestamp: i64,
    /// `None`: deleted (kept only in a table of several partitions, where
    /// it hides older copies elsewhere).
    pub row: Option<Vec<Value>>,
}

/// A copy of a key outside its home partition, as `settle` compares it.
#[derive(Debug, Clone)]
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

/// One keyed table partition's current rows.
#[derive(Default)]
pub struct KeyedRows {
    /// Every record below this offset is applied.
    upto: i64,
    /// Key → its latest write here.
    rows: HashMap<Vec<u8>, Entry>,
    /// The keys whose home is another partition, for `partitions`.
    strays: HashSet<Vec<u8>>,
    partitions: i32,
    /// Deletions kept (timestamp, key), oldest first, to forget them
    /// after `delete.retention.ms`.
    tombstones: VecDeque<(i64, Vec<u8>)>,
}

impl KeyedRows {
    /// The live rows, oldest write first (the order a scan returns them
    /// in), without the copies in `losers` (this is partition `index`).
    pub fn rows_in_offset_order<'a>(
        &'a self,
        index: i32,
        losers: Option<&'a Losers>,
    ) -> impl Iterator<Item = &'a Vec<Value>> + 'a {
        let mut rows: Vec<(&Vec<u8>, &Entry)> =
            self.rows.iter().filter(|(_, e)| e.row.is_some()).collect();
        if let Some(lost) = losers.and_then(|l| l.get(&index)) {
            rows.retain(|(k, _)| !lost.contains(&k[..]));
        }
        rows.sort_by_key(|(_, e)| e.offset);
        rows.into_iter().filter_map(|(_, e)| e.row.as_ref())
    }

    /// This partition's copies of keys whose home is elsewhere.
    pub fn claims(&self, index: i32) -> Vec<Claim> {
        self.strays
            .iter()
            .filter_map(|k| {
                self.rows.get(k).map(|e| Claim {
                    key: k.clone(),
                    partition: index,
                    timestamp: e.timestamp,
                })
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
            let Some(e) = self.rows.get(key) else {
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

    /// The latest write of `key` here.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.rows.get(key)
    }

    fn apply(&mut self, key: &[u8], entry: Entry, index: i32) {
        if entry.row.is_none() && self.partitions <= 1 {
            self.rows.remove(key);
            self.strays.remove(key);
            return;
        }
        if entry.row.is_none() {
            self.tombstones.push_back((entry.timestamp, key.to_vec()));
        }
        if self.partitions > 1 && partition_for_key(key, self.partitions) != index {
            self.strays.insert(key.to_vec());
        }
        self.rows.insert(key.to_vec(), entry);
    }

    /// Homes computed for `partitions` (the table grew: some move).
    fn rehome(&mut self, partitions: i32, index: i32) {
        if partitions == self.partitions {
            return;
        }
        self.partitions = partitions;
        self.strays = if partitions > 1 {
            self.rows
                .keys()
                .filter(|k| partition_for_key(k, partitions) != index)
                .cloned()
                .collect()
        } else {
            HashSet::new()
        };
    }

    /// Forgets deletions older than `horizon` (ms).
    fn forget_tombstones(&mut self, horizon: i64) {
        while let Some((ts, _)) = self.tombstones.front() {
            if *ts >= horizon {
                break;
            }
            let (ts, key) = self.tombstones.pop_front().expect("a front");
            if self
                .rows
                .get(&key)
                .is_some_and(|e| e.row.is_none() && e.timestamp == ts)
            {
                self.rows.remove(&key);
                self.strays.remove(&key);
            }
        }
    }
}

/// The keyed tables' rows of the partitions one shard owns.
#[derive(Default)]
pub struct KeyedTables {
    tables: RefCell<HashMap<TopicPartition, Rc<RefCell<KeyedRows>>>>,
}

impl KeyedTables {
    /// The partition's rows with every record up to its high watermark
    /// applied (the records appended since the last scan are read now).
    pub async fn refreshed(
        &self,
        p: &Partition,
        meta: &TopicMeta,
        schema: &TableSchema,
    ) -> Result<Rc<RefCell<KeyedRows>>, ScanError> {
        let rows = self
            .tables
            .borrow_mut()
            .entry(TopicPartition::new(p.topic.clone(), p.index))
            .or_default()
            .clone();
        let start = p.log.log_start();
        let from = {
            let mut st = rows.borrow_mut();
            if st.upto < start {
                // Retention moved the log start past what was applied: rows
                // before it are gone from the log, so they go here too.
                *st = KeyedRows {
                    upto: start,
                    ..KeyedRows::default()
                };
            }
            st.rehome(meta.partitions(), p.index);
            st.upto
        };
        each_record(p, from, &mut |r| {
            let mut st = rows.borrow_mut();
            // A concurrent scan may have applied this record already.
            if r.offset < st.upto {
                return Ok(ControlFlow::Continue(()));
            }
            if let Some(k) = &r.key {
                let entry = Entry {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    row: table_row(schema, r),
                };
                st.apply(k, entry, p.index);
            }
            st.upto = r.offset + 1;
            Ok(ControlFlow::Continue(()))
        })
        .await?;
        let horizon = crate::clock::now_ms().saturating_sub(meta.config.delete_retention_ms);
        rows.borrow_mut().forget_tombstones(horizon);
        Ok(rows)
    }

    /// Forgets a partition this shard no longer has (its topic deleted, or
    /// made again under the same name).
    pub fn forget(&self, tp: &TopicPartition) {
        self.tables.borrow_mut().remove(tp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: i64, timestamp: i64, row: Option<i64>) -> Entry {
        Entry {
            offset,
            timestamp,
            row: row.map(|v| vec![Value::from(v)]),
        }
    }

    /// A key whose home (of 4) is `home`.
    fn key_at_home(home: i32) -> Vec<u8> {
        (0..)
            .map(|i| format!("{{\"id\":{i}}}").into_bytes())
            .find(|k| partition_for_key(k, 4) == home)
            .unwrap()
    }

    fn rows_of(index: i32, entries: &[(&[u8], Entry)]) -> KeyedRows {
        let mut r = KeyedRows::default();
        r.rehome(4, index);
        for (k, e) in entries {
            r.apply(k, e.clone(), index);
        }
        r
    }

    #[test]
    fn the_newest_copy_wins_then_the_home_one() {
        let k = key_at_home(0);
        let home = rows_of(0, &[(&k, entry(5, 100, Some(1)))]);
        let stray = rows_of(2, &[(&k, entry(9, 200, Some(2)))]);
        let claims = stray.claims(2);
        assert_eq!(claims.len(), 1);
        assert!(home.claims(0).is_empty());
        // Newer stray: the home copy loses.
        assert_eq!(home.settle(0, &claims), vec![(0, k.clone())]);
        // Same time: the home copy wins.
        let tie = rows_of(2, &[(&k, entry(9, 100, Some(2)))]);
        assert_eq!(home.settle(0, &tie.claims(2)), vec![(2, k.clone())]);
        // Two strays and no home copy: the newer stray wins.
        let other = rows_of(3, &[(&k, entry(1, 150, Some(3)))]);
        let mut both = claims.clone();
        both.extend(other.claims(3));
        assert_eq!(rows_of(0, &[]).settle(0, &both), vec![(3, k.clone())]);
        let losers: Losers = [(3, [k.clone()].into())].into();
        assert_eq!(other.rows_in_offset_order(3, Some(&losers)).count(), 0);
        assert_eq!(stray.rows_in_offset_order(2, Some(&losers)).count(), 1);
    }

    #[test]
    fn a_newer_tombstone_elsewhere_hides_the_row_until_it_is_forgotten() {
        let k = key_at_home(1);
        let home = rows_of(1, &[(&k, entry(0, 100, Some(1)))]);
        let mut stray = rows_of(3, &[(&k, entry(4, 300, None))]);
        assert_eq!(home.settle(1, &stray.claims(3)), vec![(1, k.clone())]);
        assert_eq!(stray.rows_in_offset_order(3, None).count(), 0);
        stray.forget_tombstones(301);
        assert!(stray.claims(3).is_empty());
        assert!(home.settle(1, &stray.claims(3)).is_empty());
    }

    #[test]
    fn one_partition_forgets_deletions_at_once_and_a_new_partition_count_rehomes() {
        let k = key_at_home(2);
        let mut one = KeyedRows::default();
        one.rehome(1, 0);
        one.apply(&k, entry(0, 1, Some(1)), 0);
        one.apply(&k, entry(1, 2, None), 0);
        assert!(one.get(&k).is_none());
        one.apply(&k, entry(2, 3, Some(2)), 0);
        assert!(one.claims(0).is_empty());
        one.rehome(4, 0);
        assert_eq!(one.claims(0).len(), 1);
    }
}
