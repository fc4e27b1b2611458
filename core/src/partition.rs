//! A topic-partition as its owning shard holds it: the log (which flushes
//! itself and publishes the durable high watermark, `weir_storage::log`)
//! and its part of the tail cache. A produce (checked by `table::ingest`)
//! appends, caches and waits for the watermark; a fetch reads, or waits for it to move. Lives on the
//! shard that owns it; never crosses cores.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;
use futures::channel::oneshot;
use weir_storage::batch::{BatchHeader, Marker};
use weir_storage::producer_state::AbortedTxn;
use weir_storage::{Appended, Chunks, PartitionLog};

use crate::cache::{CachedBatch, PartitionCache, TailCache};
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::latency::Latencies;

/// The result of a successful produce to one partition.
pub type ProduceResult = Result<Appended, KafkaError>;

/// What a read of one partition returns.
#[derive(Debug, Clone, Default)]
pub struct PartitionRead {
    /// Whole batches, in pieces (the tail cache's are shared, not copied).
    pub records: Chunks,
    pub high_watermark: i64,
    pub log_start: i64,
    /// Where read_committed readers stop (the high watermark when no
    /// transaction is open).
    pub last_stable_offset: i64,
    /// For a read_committed read: the aborted transactions with data in
    /// what was read, for the client to skip. `None` for read_uncommitted.
    pub aborted: Option<Vec<AbortedTxn>>,
}

/// A topic-partition. Lives on its owning shard.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub log: Rc<PartitionLog>,
    pub cache: Rc<PartitionCache>,
    pub counters: PartitionCounters,
}

/// What a partition took in and served since start (for `/metrics`).
#[derive(Debug, Default)]
pub struct PartitionCounters {
    /// Bytes of batches appended, as stored, and their records.
    pub bytes_in: Cell<u64>,
    pub records_in: Cell<u64>,
    /// Bytes of batches read (fetches, SQL scans), their records, and
    /// where they came from.
    pub bytes_out: Cell<u64>,
    pub records_out: Cell<u64>,
    pub cache_hits: Cell<u64>,
    pub cache_misses: Cell<u64>,
}

fn bump(c: &Cell<u64>, n: u64) {
    c.set(c.get() + n);
}

impl Partition {
    /// `max_flushes` may be in flight at once
    /// (`NodeConfig::flushes_in_flight`); their times go to `latency`.
    pub fn new(
        topic: String,
        index: i32,
        log: PartitionLog,
        max_flushes: usize,
        latency: Rc<Latencies>,
    ) -> Partition {
        log.set_flushing(max_flushes, move |t| latency.flush(t.wait, t.write));
        Partition {
            topic,
            index,
            log: Rc::new(log),
            cache: Rc::new(PartitionCache::default()),
            counters: PartitionCounters::default(),
        }
    }

    /// Stores nothing for `headers` (a typed table's produce in which no
    /// record became a row), but moves an idempotent producer's sequence
    /// past them: the answer is the log's end.
    pub async fn skip(&self, headers: &[BatchHeader]) -> ProduceResult {
        let end = self.log.log_end();
        let mut answer = Appended {
            base_offset: end,
            last_offset: end - 1,
            log_append_time: -1,
        };
        let now = now_ms();
        for h in headers.iter().filter(|h| h.producer_id >= 0) {
            answer = self.log.skip_batch(h, now).await?;
        }
        Ok(answer)
    }

    /// Appends `batches` (checked by `table::ingest`), caches them, tells
    /// `appended_tell` once they have their offsets and (unless `acks ==
    /// 0`) waits until they are durable.
    pub async fn append(
        self: &Rc<Self>,
        batches: &[(BatchHeader, Bytes)],
        acks: i16,
        cache: &RefCell<TailCache>,
        appended_tell: Option<oneshot::Sender<()>>,
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
            for (h, bytes) in &stored {
                bump(&self.counters.bytes_in, bytes.len() as u64);
                bump(&self.counters.records_in, h.record_count.max(0) as u64);
            }
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
        if let Some(tell) = appended_tell {
            let _ = tell.send(());
        }
        if acks == 0 {
            self.log.flush_soon();
        } else {
            self.log.durable_past(appended.last_offset).await?;
        }
        Ok(appended)
    }

    /// Ends `producer_id`'s transaction in this partition with `marker`,
    /// durably: the control batch is appended as a produce with acks=all.
    pub async fn append_marker(
        self: &Rc<Self>,
        marker: Marker,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        cache: &RefCell<TailCache>,
    ) -> ProduceResult {
        let batch = weir_storage::records::build_marker_batch(
            marker,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            now_ms(),
        );
        let header = BatchHeader::parse(&batch).expect("a marker batch");
        self.append(&[(header, batch)], -1, cache, None).await
    }

    /// Reads from `offset`: from the tail cache when it reaches back that
    /// far, else from the log. `committed`: read_committed, which stops at
    /// the last stable offset and lists the aborted transactions read.
    pub async fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        committed: bool,
    ) -> Result<PartitionRead, KafkaError> {
        let mut read = self.read_below(offset, max_bytes, committed).await?;
        if committed {
            let upto = read.last_stable_offset;
            read.aborted = Some(self.log.aborted_between(offset, upto));
        }
        Ok(read)
    }

    async fn read_below(
        &self,
        offset: i64,
        max_bytes: usize,
        committed: bool,
    ) -> Result<PartitionRead, KafkaError> {
        let (hw, start) = (self.log.high_watermark(), self.log.log_start());
        let lso = self.log.last_stable_offset();
        let upto = if committed { lso } else { hw };
        if offset < start || offset > hw {
            return Err(KafkaError::new(
                ErrorCode::OffsetOutOfRange,
                format!(
                    "offset {offset} is outside {}-{} [{start}, {hw}]",
                    self.topic, self.index
                ),
            ));
        }
        let answer = |records| PartitionRead {
            records,
            high_watermark: hw,
            log_start: start,
            last_stable_offset: lso,
            aborted: None,
        };
        if offset >= upto {
            return Ok(answer(Chunks::default()));
        }
        if let Some(records) = self.cache.read(offset, max_bytes, upto) {
            if !records.is_empty() {
                bump(&self.counters.cache_hits, 1);
                bump(&self.counters.bytes_out, records.len() as u64);
                bump(&self.counters.records_out, records.record_count());
                return Ok(answer(records));
            }
        }
        let r = self.log.read_below(offset, max_bytes, upto).await?;
        bump(&self.counters.cache_misses, 1);
        bump(&self.counters.bytes_out, r.batches.len() as u64);
        bump(&self.counters.records_out, r.batches.record_count());
        Ok(PartitionRead {
            records: r.batches,
            high_watermark: r.high_watermark,
            log_start: r.log_start,
            last_stable_offset: lso.min(r.high_watermark),
            aborted: None,
        })
    }

    /// A receiver that completes when the high watermark next moves.
    pub fn watch(&self) -> oneshot::Receiver<()> {
        self.log.watch()
    }

    /// Flushes what is staged and answers waiting producers (shutdown).
    pub async fn close(&self) {
        // A failure was logged where it happened and answered to every
        // producer waiting; a stopping node has no one else to tell.
        let _ = self.log.close().await;
    }
}
