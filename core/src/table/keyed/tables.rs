//! The keyed tables of one shard (`KeyedTables`): each partition's rows
//! loaded from its snapshots and brought up to date from the log when a
//! scan asks, and the snapshot task's work (`snapshot_due`): the rows
//! applied since the newest snapshot written as the next one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::rc::Rc;

use super::{Entry, KeyedRows, STOP_RECORDS, TAIL_RECORDS};
use crate::catalog::TopicMeta;
use crate::partition::Partition;
use crate::shard::Shard;
use crate::table::avro::WriterSchemas;
use crate::table::keyed_snapshot;
use crate::table::read::{each_record, table_row, ScanError};
use crate::table::schema::TableSchema;
use crate::topic_partition::TopicPartition;

/// Puts a frozen layer back under the newest one if its snapshot was not
/// made (failed, or its task was cancelled by a stopping node).
struct Unfreeze {
    rows: Rc<RefCell<KeyedRows>>,
    generation: u64,
    done: bool,
}

impl Drop for Unfreeze {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = self.rows.borrow_mut();
        if st.generation != self.generation {
            return;
        }
        if let Some(frozen) = st.frozen.take() {
            let frozen = Rc::try_unwrap(frozen).unwrap_or_else(|f| (*f).clone());
            for (k, slot) in frozen {
                st.rows.entry(k).or_insert(slot);
            }
        }
    }
}

/// One partition's rows and the lock its refreshes take: two scans (or a
/// scan and the snapshot task) that find records to apply take turns
/// rather than both reading and parsing the same records.
#[derive(Clone, Default)]
struct Held {
    rows: Rc<RefCell<KeyedRows>>,
    refresh: Rc<futures::lock::Mutex<()>>,
}

/// The keyed tables' rows of the partitions one shard owns.
#[derive(Default)]
pub struct KeyedTables {
    tables: RefCell<HashMap<TopicPartition, Held>>,
}

impl crate::shard::ShardState for KeyedTables {
    fn partition_removed(&self, tp: &TopicPartition) {
        self.forget(tp);
    }
}

/// How long a stopping shard spends snapshotting keyed rows, at most (of
/// the node's 30 s to stop).
const STOP_SNAPSHOTS_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// Snapshots the rows of each keyed table partition of this shard that
/// is due one (`table::keyed`): a segment rolled since its last, or,
/// `stopping`, anything applied since (then for at most
/// `STOP_SNAPSHOTS_FOR` in all: the node's stop has a deadline, and
/// what is not written is read from the log at the next start). One at
/// a time.
pub async fn snapshot_due(shard: &Rc<Shard>, stopping: bool) {
    let catalog = shard.catalog();
    let parts = shard.owned_partitions();
    let began = std::time::Instant::now();
    let tables = shard.state::<KeyedTables>();
    for p in parts {
        if shard.is_stopping() != stopping {
            return;
        }
        if stopping && began.elapsed() > STOP_SNAPSHOTS_FOR {
            log::info!(
                "stop: keyed rows not snapshotted past {} s; the next start reads them from the log",
                STOP_SNAPSHOTS_FOR.as_secs()
            );
            return;
        }
        let Some(meta) = catalog.topics.get(&p.topic) else {
            continue;
        };
        let Some(schema) = meta.schema.as_ref().filter(|s| s.is_keyed()) else {
            continue;
        };
        let started = std::time::Instant::now();
        match tables.snapshot(shard, &p, meta, schema, stopping).await {
            Ok(true) => log::info!(
                "{}-{}: keyed rows snapshotted in {} ms",
                p.topic,
                p.index,
                started.elapsed().as_millis()
            ),
            Ok(false) => {}
            Err(e) => log::warn!(
                "{}-{}: snapshotting the keyed rows failed (a restart replays more of the log): {e}",
                p.topic,
                p.index
            ),
        }
    }
}

impl KeyedTables {
    /// The partition's rows with every record up to its high watermark
    /// applied (the records appended since the last scan are read now;
    /// the first time, those past the partition's snapshot).
    pub async fn refreshed(
        &self,
        shard: &Rc<Shard>,
        p: &Partition,
        meta: &TopicMeta,
        schema: &TableSchema,
    ) -> Result<Rc<RefCell<KeyedRows>>, ScanError> {
        let tp = TopicPartition::new(p.topic.clone(), p.index);
        let held = self.tables.borrow().get(&tp).cloned();
        let Held { rows, refresh } = match held {
            Some(held) => held,
            None => {
                let held = Held {
                    rows: Rc::new(RefCell::new(KeyedRows::open(p, &schema_text(schema)))),
                    refresh: Rc::default(),
                };
                self.tables.borrow_mut().insert(tp, held.clone());
                held
            }
        };
        let _turn = refresh.lock().await;
        let start = p.log.log_start();
        let from = {
            let mut st = rows.borrow_mut();
            if st.upto < start {
                // Retention moved the log start past what was applied: rows
                // before it are gone from the log, so they go here too.
                *st = KeyedRows {
                    upto: start,
                    generation: st.generation + 1,
                    ..KeyedRows::default()
                };
            }
            st.partitions = meta.partitions();
            st.upto
        };
        let avro = schema.avro_subject().map(|_| shard);
        let writers = shard.state::<WriterSchemas>();
        each_record(p, from, avro, &mut |r| {
            let mut st = rows.borrow_mut();
            // A concurrent scan may have applied this record already.
            if r.offset < st.upto {
                return Ok(ControlFlow::Continue(()));
            }
            if let Some(k) = &r.key {
                let entry = Entry {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    row: table_row(schema, &writers, r)?,
                };
                st.apply(k, entry);
            }
            st.upto = r.offset + 1;
            Ok(ControlFlow::Continue(()))
        })
        .await?;
        let horizon = crate::clock::now_ms().saturating_sub(meta.config.delete_retention_ms);
        rows.borrow_mut().forget_tombstones(horizon);
        Ok(rows)
    }

    /// Brings the partition's rows up to date (loading them from their
    /// snapshots the first time) and snapshots them when that is due: a
    /// segment rolled since the newest snapshot or `TAIL_RECORDS` were
    /// applied since. The writes since the newest snapshot are frozen and
    /// written as a delta, or, when the deltas add up to half the full
    /// snapshot (or there is none), merged with the chain into a new full
    /// one. `stopping`, the work is bounded so that a stop stays short:
    /// only rows already applied are written (the log is not read), only
    /// as a delta, and only up to `STOP_RECORDS` of them (the next start
    /// reads the rest from the log). Returns whether one was written.
    pub async fn snapshot(
        &self,
        shard: &Rc<Shard>,
        p: &Partition,
        meta: &TopicMeta,
        schema: &TableSchema,
        stopping: bool,
    ) -> Result<bool, String> {
        let rows = if stopping {
            let tp = TopicPartition::new(p.topic.clone(), p.index);
            let Some(held) = self.tables.borrow().get(&tp).cloned() else {
                return Ok(false);
            };
            held.rows
        } else {
            self.refreshed(shard, p, meta, schema)
                .await
                .map_err(|e| match e {
                    ScanError::Statement(why) | ScanError::Read(why) => why,
                })?
        };
        let (writes, span, generation) = {
            let mut st = rows.borrow_mut();
            let since = st.snapshot_upto().unwrap_or_else(|| p.log.log_start());
            let applied = st.upto - since;
            let due = if stopping {
                applied > 0 && applied <= STOP_RECORDS
            } else {
                applied > 0 && (applied >= TAIL_RECORDS || p.log.active_base() > since)
            };
            if st.frozen.is_some() || !due {
                return Ok(false);
            }
            let (writes, span) = st.freeze(!stopping);
            (writes, span, st.generation)
        };
        let mut unfreeze = Unfreeze {
            rows: rows.clone(),
            generation,
            done: false,
        };
        let snap =
            keyed_snapshot::write(p.log.dir(), &schema_text(schema), span, writes.iter()).await?;
        {
            let mut st = rows.borrow_mut();
            if st.generation == generation {
                st.adopt(snap, writes.merge);
            }
        }
        unfreeze.done = true;
        if let Ok(layer) = Rc::try_unwrap(writes.frozen) {
            // Millions of rows take a while to free: a page at a time.
            let mut rest = layer.into_iter();
            while rest.by_ref().take(keyed_snapshot::PAGE).count() > 0 {
                glommio::yield_if_needed().await;
            }
        }
        Ok(true)
    }

    /// Forgets a partition this shard no longer has (its topic deleted, or
    /// made again under the same name).
    pub fn forget(&self, tp: &TopicPartition) {
        self.tables.borrow_mut().remove(tp);
    }
}

/// The schema as a snapshot records it: rows made under another are not
/// used.
fn schema_text(schema: &TableSchema) -> String {
    serde_json::to_string(schema).expect("a schema encodes")
}
