//! A topic-partition as its owning shard holds it: the log, its part of the
//! tail cache, the produce requests waiting for their durable write and the fetches
//! waiting for new data. Lives on the shard that owns it; never crosses cores.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;
use futures::channel::oneshot;
use weir_storage::batch::{split_produced, BatchHeader};
use weir_storage::{Appended, Chunks, PartitionLog};

use crate::cache::{CachedBatch, PartitionCache, TailCache};
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::latency::Latencies;
use crate::table::schema::TableSchema;

/// The result of a successful produce to one partition.
pub type ProduceResult = Result<Appended, KafkaError>;

/// A produce request waiting for the durable write that covers its last
/// offset.
type AckWaiter = (i64, oneshot::Sender<Result<(), KafkaError>>);

/// What a read of one partition returns.
#[derive(Debug, Clone, Default)]
pub struct PartitionRead {
    /// Whole batches, in pieces (the tail cache's are shared, not copied).
    pub records: Chunks,
    pub high_watermark: i64,
    pub log_start: i64,
}

/// A topic-partition. Lives on its owning shard.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub log: PartitionLog,
    pub cache: Rc<PartitionCache>,
    /// Produce requests waiting for the high watermark to pass their last offset.
    acks: RefCell<Vec<AckWaiter>>,
    /// Fetches waiting for the high watermark to move.
    waiters: RefCell<Vec<oneshot::Sender<()>>>,
    /// The high watermark fetches were last woken for (a flush that lands
    /// before an earlier one moves nothing, and wakes no one).
    announced: Cell<i64>,
    /// Flushers running (their writes may be in flight together).
    flushing: Cell<usize>,
    /// The most flushes in flight (`NodeConfig::flushes_in_flight`).
    max_flushes: usize,
    /// Whether the task writing zeros ahead runs.
    zeroing: Cell<bool>,
    /// A keyed table's current rows, built from the log by SQL scans.
    pub keyed: RefCell<crate::table::scan::KeyedRows>,
    /// The owning shard's histograms (flush times go there).
    latency: Rc<Latencies>,
}

impl Partition {
    pub fn new(
        topic: String,
        index: i32,
        log: PartitionLog,
        max_flushes: usize,
        latency: Rc<Latencies>,
    ) -> Partition {
        Partition {
            announced: Cell::new(log.high_watermark()),
            topic,
            index,
            log,
            cache: Rc::new(PartitionCache::default()),
            acks: RefCell::new(Vec::new()),
            waiters: RefCell::new(Vec::new()),
            flushing: Cell::new(0),
            max_flushes: max_flushes.max(1),
            zeroing: Cell::new(false),
            keyed: RefCell::new(Default::default()),
            latency,
        }
    }

    /// Validates, appends and (unless `acks == 0`) waits until the batches
    /// are durable. `max_message_bytes` bounds each batch.
    pub async fn produce(
        self: &Rc<Self>,
        records: Bytes,
        acks: i16,
        max_message_bytes: i32,
        schema: Option<&TableSchema>,
        cache: &RefCell<TailCache>,
    ) -> ProduceResult {
        let mut batches = split_produced(&records)?;
        for (h, _) in &batches {
            if h.total_len() > max_message_bytes.max(0) as usize {
                return Err(KafkaError::new(
                    ErrorCode::MessageTooLarge,
                    format!(
                        "a batch of {} bytes is larger than max.message.bytes {} of {}-{}",
                        h.total_len(),
                        max_message_bytes,
                        self.topic,
                        self.index
                    ),
                ));
            }
        }
        if let Some(schema) = schema {
            // A typed table stores rows: every record is converted (or the
            // whole request refused) before anything is appended.
            let now = now_ms();
            let stamp = self.log.config().log_append_time;
            let mut rows = Vec::with_capacity(batches.len());
            // The rows are held until all are converted: their total is
            // bounded, and each batch may decompress only to what is left.
            let mut budget = crate::table::MAX_DECOMPRESSED;
            for (h, b) in &batches {
                if let Some(r) =
                    crate::table::rows_batch(&self.topic, schema, h, b, now, stamp, budget)?
                {
                    budget = budget.checked_sub(r.1.len()).ok_or_else(|| {
                        KafkaError::new(
                            ErrorCode::RecordListTooLarge,
                            format!(
                                "the rows of this request to {} are over {} bytes",
                                self.topic,
                                crate::table::MAX_DECOMPRESSED
                            ),
                        )
                    })?;
                    rows.push(r);
                }
            }
            if rows.is_empty() {
                // Nothing became a row: nothing is written, but an
                // idempotent producer's sequence still moves on.
                let end = self.log.log_end();
                let mut answer = Appended {
                    base_offset: end,
                    last_offset: end - 1,
                    log_append_time: -1,
                };
                for (h, _) in batches.iter().filter(|(h, _)| h.producer_id >= 0) {
                    answer = self.log.skip_batch(h, now).await?;
                }
                return Ok(answer);
            }
            batches = rows;
        }
        self.append(&batches, acks, cache).await
    }

    async fn append(
        self: &Rc<Self>,
        batches: &[(BatchHeader, Bytes)],
        acks: i16,
        cache: &RefCell<TailCache>,
    ) -> ProduceResult {
        let (appended, stored) = match self.log.append(batches, now_ms()).await {
            Ok(r) => r,
            Err(_) => {
                // The log failed a write; retry its staged data once before
                // refusing (a disk that filled up may have room again).
                self.log.flush().await?;
                self.log.append(batches, now_ms()).await?
            }
        };
        {
            let mut cache = cache.borrow_mut();
            for (h, bytes) in stored {
                cache.insert(
                    &self.cache,
                    CachedBatch {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        bytes,
                    },
                );
            }
        }
        let ack = if acks != 0 {
            let (tx, rx) = oneshot::channel();
            self.acks.borrow_mut().push((appended.last_offset, tx));
            Some(rx)
        } else {
            None
        };
        self.schedule_flush();
        if let Some(rx) = ack {
            match rx.await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(KafkaError::new(
                        ErrorCode::KafkaStorageError,
                        "the node stopped before the batch was synced",
                    ))
                }
            }
        }
        Ok(appended)
    }

    /// Starts a flusher unless `max_flushes` run: it flushes until nothing
    /// is left unwritten, so one durable write covers every batch appended
    /// meanwhile. A second flusher starts when batches arrive while the
    /// first one writes: it writes them at once instead of waiting for the
    /// first write to land.
    fn schedule_flush(self: &Rc<Self>) {
        let running = self.flushing.get();
        if running >= self.max_flushes {
            return;
        }
        self.flushing.set(running + 1);
        let p = self.clone();
        glommio::spawn_local(async move {
            loop {
                let result = p.log.flush_timed().await.map(|(hw, times)| {
                    if let Some(t) = times {
                        p.latency.flush(t.wait, t.write);
                    }
                    hw
                });
                let failed = result.is_err();
                p.complete(result.map_err(KafkaError::from));
                // After a failure the staged data waits for the next append,
                // which retries the flush before appending more.
                if failed {
                    break;
                }
                p.schedule_zeroing();
                // Batches that arrived meanwhile found this flusher counted
                // and started none: it must take them. No await between this
                // check and the count going down.
                if !p.log.has_unwritten() {
                    break;
                }
            }
            p.flushing.set(p.flushing.get() - 1);
        })
        .detach();
    }

    /// Keeps zeros written ahead of the log's end (so later syncs are a
    /// single device flush) in a task of its own: flushes never wait for
    /// it unless their write reaches the piece being zeroed.
    fn schedule_zeroing(self: &Rc<Self>) {
        // No task per flush when nothing is wanted (the common case).
        if self.zeroing.get() || !self.log.wants_zeros() {
            return;
        }
        self.zeroing.set(true);
        let p = self.clone();
        glommio::spawn_local(async move {
            while let Ok(true) = p.log.zero_ahead().await {}
            p.zeroing.set(false);
        })
        .detach();
    }

    /// Answers the produce requests the flush covered and wakes fetches.
    fn complete(&self, result: Result<i64, KafkaError>) {
        match result {
            Ok(hw) => {
                let done: Vec<_> = {
                    let mut acks = self.acks.borrow_mut();
                    let (done, wait): (Vec<_>, Vec<_>) =
                        acks.drain(..).partition(|(last, _)| *last < hw);
                    *acks = wait;
                    done
                };
                for (_, tx) in done {
                    let _ = tx.send(Ok(()));
                }
                if hw > self.announced.get() {
                    self.announced.set(hw);
                    for w in self.waiters.borrow_mut().drain(..) {
                        let _ = w.send(());
                    }
                }
            }
            Err(e) => {
                for (_, tx) in self.acks.borrow_mut().drain(..) {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }

    /// Reads from `offset`: from the tail cache when it reaches back that
    /// far, else from the log.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<PartitionRead, KafkaError> {
        let (hw, start) = (self.log.high_watermark(), self.log.log_start());
        if offset < start || offset > hw {
            return Err(KafkaError::new(
                ErrorCode::OffsetOutOfRange,
                format!(
                    "offset {offset} is outside {}-{} [{start}, {hw}]",
                    self.topic, self.index
                ),
            ));
        }
        if offset == hw {
            return Ok(PartitionRead {
                records: Chunks::default(),
                high_watermark: hw,
                log_start: start,
            });
        }
        if let Some(records) = self.cache.read(offset, max_bytes, hw) {
            if !records.is_empty() {
                return Ok(PartitionRead {
                    records,
                    high_watermark: hw,
                    log_start: start,
                });
            }
        }
        let r = self.log.read(offset, max_bytes).await?;
        Ok(PartitionRead {
            records: r.batches,
            high_watermark: r.high_watermark,
            log_start: r.log_start,
        })
    }

    /// A receiver that completes when the high watermark next moves.
    pub fn watch(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = self.waiters.borrow_mut();
        // Drop waiters whose fetch already finished, so an idle partition's
        // list stays as long as its live fetches.
        waiters.retain(|w| !w.is_canceled());
        waiters.push(tx);
        rx
    }

    /// Flushes what is staged and answers waiting producers (shutdown).
    pub async fn close(&self) {
        let r = self.log.close().await.map(|_| self.log.high_watermark());
        self.complete(r.map_err(KafkaError::from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use weir_storage::records::build_batch;
    use weir_storage::LogConfig;

    /// Produces one record at a time, each after the previous one's ack:
    /// between them the partition goes idle and its flushers zero ahead, so
    /// a record often arrives while every flusher is zeroing. Each must
    /// still be flushed and acknowledged (a lost flusher once left such a
    /// record waiting for the next produce).
    #[test]
    fn every_ack_comes_when_produces_arrive_during_zeroing() {
        let dir = std::env::temp_dir().join(format!("weir-partition-{}", std::process::id()));
        let d = dir.clone();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                std::fs::create_dir_all(&d).unwrap();
                weir_storage::segment::prepare_direct_io(&d).await.unwrap();
                let log = PartitionLog::open(&d, LogConfig::default(), 0)
                    .await
                    .unwrap();
                let p = Rc::new(Partition::new("t".into(), 0, log, 2, Default::default()));
                let cache = RefCell::new(TailCache::new(1 << 20));
                for i in 0..300i64 {
                    let batch = build_batch(&[(None, Some(b"v"))], i);
                    let produce = p.produce(batch, 1, 1 << 20, None, &cache);
                    let acked = futures::future::select(
                        Box::pin(produce),
                        Box::pin(glommio::timer::sleep(Duration::from_secs(10))),
                    )
                    .await;
                    match acked {
                        futures::future::Either::Left((r, _)) => {
                            assert_eq!(r.unwrap().base_offset, i)
                        }
                        futures::future::Either::Right(_) => {
                            panic!("record {i} was not acknowledged within 10 s")
                        }
                    }
                }
                assert_eq!(p.log.high_watermark(), 300);
            })
            .unwrap()
            .join()
            .unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
