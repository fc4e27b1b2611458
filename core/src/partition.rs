//! A topic-partition as its owning shard holds it: the log (which flushes
//! itself and publishes the durable high watermark, `weir_storage::log`),
//! its part of the tail cache and, when replicated, its role (leading or
//! following, `replication::leader`). A produce (checked by
//! `table::ingest`) appends, caches and waits for the watermark; a fetch
//! reads, or waits for it to move. A replicated leader's high watermark
//! is its in-sync replicas' least durable end: acks=all waits for it.
//! Lives on the shard that owns it; never crosses cores.

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
use crate::replication::leader::Role;

/// The longest an acks=all write waits for its in-sync replicas when no
/// client's produce names a timeout (Kafka's default request timeout):
/// SQL writes, markers, group commits.
pub const REPLICATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
    /// KIP-392: the broker the consumer should fetch this partition from
    /// instead (a replica in its rack); nothing is read then.
    pub preferred_read_replica: Option<i32>,
}

/// A topic-partition. Lives on its owning shard.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub log: Rc<PartitionLog>,
    pub cache: Rc<PartitionCache>,
    pub counters: PartitionCounters,
    /// Leading, following or alone (not replicated), as the catalog says.
    pub role: RefCell<Role>,
    /// Woken when the role changes (acks=all waiters look again).
    role_watchers: RefCell<Vec<oneshot::Sender<()>>>,
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
    /// Consumer fetches this replica served as a follower (KIP-392).
    pub follower_reads: Cell<u64>,
    /// Changes of the ISR this node saw applied while leading: members
    /// dropped (shrinks) and added (expands), as Kafka's
    /// IsrShrinksPerSec and IsrExpandsPerSec count them.
    pub isr_shrinks: Cell<u64>,
    pub isr_expands: Cell<u64>,
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
            role: RefCell::new(Role::Alone),
            role_watchers: RefCell::new(Vec::new()),
        }
    }

    /// Takes the role the catalog gives this node. Becoming leader in a
    /// new epoch records where the epoch starts (durably, in the log's
    /// epoch cache) and starts counting followers afresh; a replicated
    /// partition's high watermark is from then on the ISR's (first: the
    /// log start, until the leader or followers say more).
    pub fn set_role(&self, next: Role) -> Result<(), KafkaError> {
        {
            let mut role = self.role.borrow_mut();
            match (&mut *role, next) {
                (Role::Leader(cur), Role::Leader(n)) if cur.epoch == n.epoch => {
                    if cur.isr == n.isr && cur.partition_epoch == n.partition_epoch {
                        return Ok(());
                    }
                    if n.isr.iter().any(|m| !cur.isr.contains(m)) {
                        bump(&self.counters.isr_expands, 1);
                    }
                    if cur.isr.iter().any(|m| !n.isr.contains(m)) {
                        bump(&self.counters.isr_shrinks, 1);
                    }
                    cur.update(n);
                }
                (cur, next) if *cur == next => return Ok(()),
                (_, next) => {
                    if next != Role::Alone && !self.log.is_replicated() {
                        self.log.set_replicated(self.log.log_start());
                    }
                    let mut next = next;
                    if !matches!(next, Role::Leader(_) | Role::Alone) {
                        // Appends copied from a leader are not cached: what
                        // is cached would stop ending at the log end.
                        self.cache.clear();
                        self.log.stop_leading(next.epoch());
                    }
                    if let Role::Leader(l) = &mut next {
                        self.log.set_leader_epoch(l.epoch)?;
                        l.start(self.log.log_end(), std::time::Instant::now());
                        log::info!(
                            "{}-{}: leading in epoch {} from offset {} (in sync: {:?})",
                            self.topic,
                            self.index,
                            l.epoch,
                            l.epoch_start,
                            l.isr
                        );
                    }
                    *role = next;
                }
            }
        }
        self.update_high_watermark();
        for w in self.role_watchers.borrow_mut().drain(..) {
            let _ = w.send(());
        }
        Ok(())
    }

    /// A leader's high watermark, as its ISR allows now: the log's durable
    /// end while it is the only in-sync replica, else the least durable
    /// end of them all (unchanged while a follower has not fetched in
    /// this epoch).
    pub fn update_high_watermark(&self) {
        let role = self.role.borrow();
        let Role::Leader(l) = &*role else { return };
        // Alone in the ISR, and no member being added (Kafka's maximal
        // ISR): what is durable here is on every in-sync replica.
        let joining = l.altering.iter().flatten();
        let alone = l.isr.iter().chain(joining).all(|&n| n == l.me);
        self.log.follow_durable(alone);
        if let Some(hw) = l.high_watermark(self.log.durable_end()) {
            self.log.set_high_watermark(hw);
        }
    }

    /// The partition leaves this node (its topic deleted, or a
    /// reassignment moved it away): nothing here leads it any more, and
    /// acks=all producers waiting on it are answered at once
    /// (NOT_LEADER_OR_FOLLOWER) rather than at their timeout.
    pub fn give_up(&self) {
        let epoch = self.role.borrow().epoch();
        *self.role.borrow_mut() = Role::Leaderless { epoch };
        for w in self.role_watchers.borrow_mut().drain(..) {
            let _ = w.send(());
        }
    }

    /// A receiver woken when the role next changes.
    fn watch_role(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut w = self.role_watchers.borrow_mut();
        w.retain(|w| !w.is_canceled());
        w.push(tx);
        rx
    }

    /// Where a leader's high watermark is not yet known (KIP-207): it has
    /// not reached the start of this leader's epoch, so ListOffsets'
    /// latest would be too low. OFFSET_NOT_AVAILABLE, which clients retry.
    pub fn check_high_watermark_known(&self) -> Result<(), KafkaError> {
        match &*self.role.borrow() {
            Role::Leader(l) if self.log.high_watermark() < l.epoch_start => Err(KafkaError::new(
                ErrorCode::OffsetNotAvailable,
                format!(
                    "{}-{}: the new leader's high watermark has not reached its epoch's start ({}) yet",
                    self.topic, self.index, l.epoch_start
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Checks a client's read (Fetch, ListOffsets, OffsetForLeaderEpoch)
    /// as Kafka's `getLocalLog` does: the leader epoch it knows first
    /// (KIP-320), then that this node leads the partition. The catalog
    /// may name this node leader before its partition takes the role (a
    /// restart not yet registered keeps it leaderless): a replica not
    /// leading answers NOT_LEADER_OR_FOLLOWER, never reads past a high
    /// watermark it does not keep, nor an epoch cache it has not written
    /// (an empty one answers "no such epoch", which a consumer takes for
    /// a truncation and resets its position). Answers the leader epoch.
    pub fn check_serving(&self, asked: i32) -> Result<i32, KafkaError> {
        let role = self.role.borrow();
        crate::leader_epoch::check(&self.topic, self.index, asked, role.epoch())?;
        match role.leads() {
            true => Ok(role.epoch()),
            false => Err(KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{}-{}: this node does not lead it yet (or any more)",
                    self.topic, self.index
                ),
            )),
        }
    }

    /// Checks a consumer's fetch from this replica as a follower (KIP-392:
    /// Fetch v11+ may read from any replica, up to the high watermark the
    /// leader told it): answered if this node follows the partition in
    /// the epoch the consumer knows (or leads it); the high watermark here
    /// bounds what it reads.
    pub fn check_follower_serving(&self, asked: i32) -> Result<i32, KafkaError> {
        let role = self.role.borrow();
        crate::leader_epoch::check(&self.topic, self.index, asked, role.epoch())?;
        match &*role {
            Role::Follower { epoch, .. } => {
                bump(&self.counters.follower_reads, 1);
                Ok(*epoch)
            }
            r if r.leads() => Ok(r.epoch()),
            _ => Err(KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{}-{}: this node neither leads nor follows it now",
                    self.topic, self.index
                ),
            )),
        }
    }

    /// Whether follower `node` holds `offset`, as this node leading the
    /// partition knows from its fetches (a consumer sent there can read
    /// it): at or past the log start, and below the end it fetched from.
    pub fn follower_holds(&self, node: i32, offset: i64) -> bool {
        let Role::Leader(l) = &*self.role.borrow() else {
            return false;
        };
        let end = l.followers.get(&node).and_then(|f| f.end);
        offset >= self.log.log_start() && end.is_some_and(|e| offset <= e)
    }

    /// Refuses a write unless this node leads the partition (and, for
    /// acks=all, enough replicas are in sync: NOT_ENOUGH_REPLICAS, as
    /// Kafka checks before the append). Answers the leader epoch.
    fn check_leading(&self, acks: i16) -> Result<i32, KafkaError> {
        match &*self.role.borrow() {
            Role::Alone => Ok(crate::leader_epoch::CURRENT),
            Role::Leader(l) if acks == -1 && !l.enough_in_sync() => Err(KafkaError::new(
                ErrorCode::NotEnoughReplicas,
                format!(
                    "{}-{}: {} in-sync replica(s) {:?}, fewer than min.insync.replicas {}",
                    self.topic,
                    self.index,
                    l.isr.len(),
                    l.isr,
                    l.min_isr
                ),
            )),
            Role::Leader(l) => Ok(l.epoch),
            _ => Err(KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{}-{}: this node does not lead it (any more)",
                    self.topic, self.index
                ),
            )),
        }
    }

    /// Waits until the high watermark passes `last_offset` in leader epoch
    /// `epoch`: every in-sync replica has the batch durably. Refused if
    /// leadership moves first, or if the ISR shrank below
    /// min.insync.replicas meanwhile (NOT_ENOUGH_REPLICAS_AFTER_APPEND);
    /// bounded by `timeout` (REQUEST_TIMED_OUT).
    async fn replicated_past(
        &self,
        last_offset: i64,
        epoch: i32,
        timeout: std::time::Duration,
    ) -> Result<(), KafkaError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let moved = self.log.watch();
            let changed = self.watch_role();
            {
                let role = self.role.borrow();
                let Role::Leader(l) = &*role else {
                    return Err(KafkaError::new(
                        ErrorCode::NotLeaderOrFollower,
                        format!(
                            "{}-{}: leadership moved before offset {last_offset} was replicated",
                            self.topic, self.index
                        ),
                    ));
                };
                if l.epoch != epoch {
                    return Err(KafkaError::new(
                        ErrorCode::NotLeaderOrFollower,
                        format!(
                            "{}-{}: a new leader epoch ({}) began before offset {last_offset} was replicated",
                            self.topic, self.index, l.epoch
                        ),
                    ));
                }
                if self.log.high_watermark() > last_offset {
                    if !l.enough_in_sync() {
                        return Err(KafkaError::new(
                            ErrorCode::NotEnoughReplicasAfterAppend,
                            format!(
                                "{}-{}: written, but only {:?} are in sync, fewer than min.insync.replicas {}",
                                self.topic, self.index, l.isr, l.min_isr
                            ),
                        ));
                    }
                    return Ok(());
                }
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(KafkaError::new(
                    ErrorCode::RequestTimedOut,
                    format!(
                        "{}-{}: offset {last_offset} was not on every in-sync replica within {} ms",
                        self.topic,
                        self.index,
                        timeout.as_millis()
                    ),
                ));
            }
            let timer = Box::pin(glommio::timer::sleep(deadline - now));
            let _ = futures::future::select(futures::future::select(moved, changed), timer).await;
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
    /// 0`) waits until they are durable; with acks=all on a replicated
    /// partition, until they are on every in-sync replica, for at most
    /// `timeout` (a produce's `timeout_ms`; then REQUEST_TIMED_OUT).
    pub async fn append(
        self: &Rc<Self>,
        batches: &[(BatchHeader, Bytes)],
        acks: i16,
        timeout: std::time::Duration,
        cache: &RefCell<TailCache>,
        appended_tell: Option<oneshot::Sender<()>>,
    ) -> ProduceResult {
        let epoch = self.check_leading(acks)?;
        // Whether acks=all waits for the followers: as the role was when
        // the write was taken (`replicated_past` refuses if it changes).
        let replicated = *self.role.borrow() != Role::Alone;
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
            if acks == -1 && replicated {
                self.replicated_past(appended.last_offset, epoch, timeout)
                    .await?;
            }
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
        self.append(&[(header, batch)], -1, REPLICATION_TIMEOUT, cache, None)
            .await
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
        // As Kafka: out of range past the log end; between the high
        // watermark and the log end (a new leader's high watermark not yet
        // caught up, records not yet on every in-sync replica) nothing yet.
        let end = self.log.log_end();
        if offset < start || offset > end {
            return Err(KafkaError::new(
                ErrorCode::OffsetOutOfRange,
                format!(
                    "offset {offset} is outside {}-{} [{start}, {end}]",
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
            preferred_read_replica: None,
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
            preferred_read_replica: None,
        })
    }

    /// A receiver that completes when the high watermark next moves.
    pub fn watch(&self) -> oneshot::Receiver<()> {
        self.log.watch()
    }

    /// A follower's fetch on its leader: node `node`, which knows leader
    /// epoch `epoch` (KIP-320-checked), holds everything below `offset`
    /// durably. Its progress may move the high watermark; then it reads
    /// from `offset` up to the leader's durable end (past the high
    /// watermark: a follower copies what it does not have yet).
    pub async fn read_for_follower(
        &self,
        node: i32,
        epoch: i32,
        offset: i64,
        max_bytes: usize,
    ) -> Result<PartitionRead, KafkaError> {
        let durable = self.log.durable_end();
        {
            let mut role = self.role.borrow_mut();
            let Role::Leader(l) = &mut *role else {
                return Err(KafkaError::new(
                    ErrorCode::NotLeaderOrFollower,
                    format!("{}-{}: this node does not lead it", self.topic, self.index),
                ));
            };
            crate::leader_epoch::check(&self.topic, self.index, epoch, l.epoch)?;
            let start = self.log.log_start();
            if offset < start || offset > durable {
                return Err(KafkaError::new(
                    ErrorCode::OffsetOutOfRange,
                    format!(
                        "{}-{}: a follower asked for offset {offset}, outside the leader's [{start}, {durable}]",
                        self.topic, self.index
                    ),
                ));
            }
            let hw = self.log.high_watermark();
            l.fetched(node, offset, durable, hw, std::time::Instant::now())?;
        }
        self.update_high_watermark();
        let (hw, start) = (self.log.high_watermark(), self.log.log_start());
        let answer = |records| PartitionRead {
            records,
            high_watermark: hw,
            log_start: start,
            last_stable_offset: self.log.last_stable_offset(),
            aborted: None,
            preferred_read_replica: None,
        };
        if offset >= durable {
            return Ok(answer(Chunks::default()));
        }
        if let Some(records) = self.cache.read(offset, max_bytes, durable) {
            if !records.is_empty() {
                return Ok(answer(records));
            }
        }
        let r = self.log.read_replica(offset, max_bytes).await?;
        Ok(answer(r.batches))
    }

    /// A receiver woken when the log's durable end next moves (what a
    /// leader's waiting follower fetches wait for).
    pub fn watch_durable(&self) -> oneshot::Receiver<()> {
        self.log.watch_durable()
    }

    /// A follower's copy of what its leader sent in a fetch answer:
    /// `records` as the leader stored them (offsets, epochs and bytes
    /// kept), appended and made durable here before the next fetch tells
    /// the leader so; then the leader's high watermark (within this log)
    /// and log start are taken. A batch failing its CRC-32C refuses the
    /// whole answer (nothing of it appended).
    ///
    /// `epoch` is the leader epoch the fetch was made in: an answer that
    /// arrives once this node follows in another epoch, or leads, is
    /// refused whole (NOT_LEADER_OR_FOLLOWER), its high watermark too. A
    /// deposed leader's late answer (a fetch sent before a cut, delivered
    /// after it heals) would otherwise put what it took alone, never
    /// acknowledged, into this log.
    pub async fn append_from_leader(
        &self,
        records: &Bytes,
        epoch: i32,
        leader_hw: i64,
        leader_start: i64,
    ) -> Result<(), KafkaError> {
        let mut batches = Vec::new();
        let mut iter = weir_storage::batch::BatchIter::new(records);
        for (at, h) in iter.by_ref() {
            let batch = records.slice(at..at + h.total_len());
            if !weir_storage::batch::crc_ok(&batch, &h) {
                return Err(KafkaError::new(
                    ErrorCode::CorruptMessage,
                    format!(
                        "{}-{}: the leader sent a batch at offset {} failing its CRC-32C",
                        self.topic, self.index, h.base_offset
                    ),
                ));
            }
            batches.push((h, batch));
        }
        if let Some((first, _)) = batches.first() {
            let end = self.log.log_end();
            if first.base_offset < end && first.last_offset() >= end && self.log.log_start() == end
            {
                // An empty log (just started over at the leader's start),
                // which fell inside this batch: the copy starts at the
                // batch's base, as Kafka's follower append does.
                self.cache.clear();
                self.log.start_over_at(first.base_offset, epoch).await?;
            }
        }
        if let Some((h, _)) = batches.last() {
            let last = h.last_offset();
            let (_, stored) = self.log.append_replica(&batches, epoch, now_ms()).await?;
            for (h, bytes) in &stored {
                bump(&self.counters.bytes_in, bytes.len() as u64);
                bump(&self.counters.records_in, h.record_count.max(0) as u64);
            }
            self.log.durable_past(last).await?;
        }
        if !self.follows_in(epoch) {
            return Err(KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{}-{}: a fetch answer of leader epoch {epoch} arrived after this node left it",
                    self.topic, self.index
                ),
            ));
        }
        self.log
            .set_high_watermark(leader_hw.min(self.log.durable_end()));
        let hw = self.log.high_watermark();
        if leader_start > self.log.log_start() && leader_start <= hw {
            self.log.delete_records_before(leader_start)?;
        }
        Ok(())
    }

    /// Whether this node follows the partition's leader of `epoch` now.
    fn follows_in(&self, epoch: i32) -> bool {
        matches!(&*self.role.borrow(), Role::Follower { epoch: e, .. } if *e == epoch)
    }

    /// Cuts the log back to `offset` (a follower's truncation to where
    /// its leader's log and its own agree, KIP-101/279): never at or
    /// below the high watermark, which every in-sync replica holds.
    /// `epoch` is the leader epoch the cut was reconciled in (refused in
    /// any other, as `append_from_leader` is).
    pub async fn truncate_to(&self, offset: i64, epoch: i32) -> Result<(), KafkaError> {
        let hw = self.log.high_watermark();
        // Every in-sync replica holds the log below the high watermark: a
        // cut there would drop committed records. Asserted in debug
        // builds; refused (the node goes on) in release.
        debug_assert!(
            offset >= hw,
            "truncation to {offset} below the high watermark {hw}"
        );
        if offset < hw {
            return Err(KafkaError::new(
                ErrorCode::UnknownServerError,
                format!(
                    "{}-{}: truncation to {offset} refused: it would cut below the high watermark {hw}",
                    self.topic, self.index
                ),
            ));
        }
        if offset >= self.log.log_end() {
            return Ok(());
        }
        log::info!(
            "{}-{}: truncating from {} to {offset}, where the leader's log diverges",
            self.topic,
            self.index,
            self.log.log_end()
        );
        self.cache.clear();
        self.log.truncate_to(offset, epoch).await?;
        Ok(())
    }

    /// Empties the log and starts it again at `offset`, the leader's log
    /// start, past this follower's end (Kafka's truncateFullyAndStartAt:
    /// the leader deleted what this one missed). `epoch` as for
    /// `truncate_to`.
    pub async fn start_over_at(&self, offset: i64, epoch: i32) -> Result<(), KafkaError> {
        if !self.follows_in(epoch) {
            return Err(KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{}-{}: no longer following in leader epoch {epoch}",
                    self.topic, self.index
                ),
            ));
        }
        self.cache.clear();
        self.log.start_over_at(offset, epoch).await?;
        Ok(())
    }

    /// Flushes what is staged and answers waiting producers (shutdown).
    pub async fn close(&self) {
        // A failure was logged where it happened and answered to every
        // producer waiting; a stopping node has no one else to tell.
        let _ = self.log.close().await;
    }
}
