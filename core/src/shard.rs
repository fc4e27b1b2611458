//! A shard: one glommio executor pinned to a core, owning a set of
//! partitions, its tail cache and the connections it accepted.
//!
//! Shards share nothing mutable. Work for a partition owned elsewhere is a
//! closure sent over the channel mesh to the owner ([`Shard::invoke_on`]),
//! which runs it there and sends the answer back; that is the only hop.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::{join_all, select, select_all, Either};
use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use glommio::sync::Semaphore;
use weir_storage::PartitionLog;

use crate::cache::TailCache;
use crate::catalog::{
    new_topic_id, placement, validate_topic_name, Catalog, TopicConfig, TopicMeta, MAX_PARTITIONS,
};
use crate::clock::now_ms;
use crate::config::NodeConfig;
use crate::error::{ErrorCode, KafkaError};
use crate::groups::{owner_shard, Coordinator, ListedGroup};
use crate::partition::{Partition, PartitionRead, ProduceResult};

/// Work sent to another shard: runs there with that shard's state.
pub type ShardJob = Box<dyn FnOnce(Rc<Shard>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// The shard that owns the catalog and makes every change to it.
pub const CATALOG_SHARD: usize = 0;

/// One partition of a fetch request.
#[derive(Debug, Clone)]
pub struct FetchPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

/// One topic of a CreateTopics request.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, Option<String>)>,
    /// CREATE TABLE's columns; `None` for a raw topic.
    pub schema: Option<crate::table::schema::TableSchema>,
}

/// Counters of one shard's work (for `GET /stats`).
#[derive(Debug, Default)]
pub struct ShardStats {
    /// Kafka requests received on this shard's connections.
    pub requests: std::cell::Cell<u64>,
    pub produce_requests: std::cell::Cell<u64>,
    pub appended_bytes: std::cell::Cell<u64>,
    pub fetch_requests: std::cell::Cell<u64>,
    pub connections: std::cell::Cell<u64>,
    /// Jobs this shard sent to another shard (`invoke_on`): the cross-core
    /// hops its requests cost.
    pub hops_sent: std::cell::Cell<u64>,
    /// How long produce requests, flush writes and syncs take here.
    pub latency: Rc<crate::latency::Latencies>,
}

/// A snapshot of one shard's counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ShardReport {
    pub shard: usize,
    pub partitions: usize,
    pub requests: u64,
    pub produce_requests: u64,
    pub appended_bytes: u64,
    pub fetch_requests: u64,
    pub connections: u64,
    pub hops_sent: u64,
    pub cache_bytes: usize,
    /// Times the watchdog found this shard asleep past its heartbeat and
    /// woke it (a lost wake-up; see `watchdog`).
    pub lost_wakeups: u64,
    pub latency_us: crate::latency::LatencyReport,
}

/// One config change of an IncrementalAlterConfigs request.
#[derive(Debug, Clone)]
pub struct ConfigChange {
    pub name: String,
    /// Kafka's operation: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
    pub op: i8,
    pub value: Option<String>,
}

/// Per-shard state. Lives on shard `id`, reached from elsewhere only
/// through `invoke_on`.
pub struct Shard {
    pub id: usize,
    pub nr_shards: usize,
    pub config: Arc<NodeConfig>,
    catalog: RefCell<Arc<Catalog>>,
    partitions: RefCell<HashMap<(String, i32), Rc<Partition>>>,
    pub cache: RefCell<TailCache>,
    mesh: Senders<ShardJob>,
    /// Serialises catalog changes (used on the catalog shard only).
    catalog_lock: Semaphore,
    stopping: Arc<AtomicBool>,
    pub stats: ShardStats,
    /// Producer id allocation (the catalog shard's only).
    producer_ids: RefCell<Option<crate::producer_ids::ProducerIds>>,
    /// The consumer groups this shard coordinates.
    pub groups: Coordinator,
    /// Every shard's heartbeat (this one beats its own).
    hearts: Arc<crate::watchdog::Hearts>,
}

impl Shard {
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.borrow().clone()
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// How many partitions this shard owns.
    pub fn partition_count(&self) -> usize {
        self.partitions.borrow().len()
    }

    /// This shard's counters.
    pub fn report(&self) -> ShardReport {
        ShardReport {
            shard: self.id,
            partitions: self.partition_count(),
            requests: self.stats.requests.get(),
            produce_requests: self.stats.produce_requests.get(),
            appended_bytes: self.stats.appended_bytes.get(),
            fetch_requests: self.stats.fetch_requests.get(),
            connections: self.stats.connections.get(),
            hops_sent: self.stats.hops_sent.get(),
            cache_bytes: self.cache.borrow().bytes(),
            lost_wakeups: self.hearts.woken(self.id),
            latency_us: self.stats.latency.report(),
        }
    }

    /// Every shard's latency histograms merged (`GET /stats/latency`).
    pub async fn latency(self: &Rc<Self>) -> crate::latency::LatencyReport {
        let all = (0..self.nr_shards)
            .map(|i| self.send_job(i, |s| async move { s.stats.latency.snapshot() }));
        let mut total = crate::latency::Histograms::default();
        for snapshot in join_all(all).await.into_iter().flatten() {
            total.merge(&snapshot);
        }
        total.report()
    }

    /// Empties every shard's latency histograms (`POST /stats/reset`).
    pub async fn reset_latencies(self: &Rc<Self>) {
        let all = (0..self.nr_shards)
            .map(|i| self.send_job(i, |s| async move { s.stats.latency.reset() }));
        join_all(all).await;
    }

    /// Every shard's counters, gathered over the mesh (hops not counted, so
    /// reading the counters does not change them).
    pub async fn reports(self: &Rc<Self>) -> Vec<ShardReport> {
        let all = (0..self.nr_shards).map(|i| self.send_job(i, |s| async move { s.report() }));
        join_all(all).await.into_iter().flatten().collect()
    }

    /// Runs `f` on shard `target` with its state and returns the answer.
    /// On the local shard it runs in place.
    pub async fn invoke_on<R, F, Fut>(self: &Rc<Self>, target: usize, f: F) -> Result<R, KafkaError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        if target != self.id {
            self.stats.hops_sent.set(self.stats.hops_sent.get() + 1);
        }
        self.send_job(target, f).await
    }

    /// `invoke_on` without counting the hop.
    async fn send_job<R, F, Fut>(self: &Rc<Self>, target: usize, f: F) -> Result<R, KafkaError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        if target == self.id {
            return Ok(f(self.clone()).await);
        }
        let (tx, rx) = oneshot::channel();
        let job: ShardJob = Box::new(move |shard| {
            Box::pin(async move {
                let _ = tx.send(f(shard).await);
            })
        });
        let lost = || {
            KafkaError::new(
                ErrorCode::UnknownServerError,
                format!("shard {target} is not answering"),
            )
        };
        self.mesh.send_to(target, job).await.map_err(|_| lost())?;
        rx.await.map_err(|_| lost())
    }

    /// Sends each item to the shard named with it, runs `f` there on that
    /// shard's items (one hop per shard, concurrently) and gathers the answers.
    pub async fn scatter<T, R, F, Fut>(
        self: &Rc<Self>,
        items: Vec<(usize, T)>,
        f: F,
    ) -> Vec<Result<Vec<R>, KafkaError>>
    where
        T: Send + 'static,
        R: Send + 'static,
        F: Fn(Rc<Shard>, Vec<T>) -> Fut + Send + Clone + 'static,
        Fut: Future<Output = Vec<R>> + 'static,
    {
        let mut groups: BTreeMap<usize, Vec<T>> = BTreeMap::new();
        for (shard, item) in items {
            groups.entry(shard).or_default().push(item);
        }
        join_all(groups.into_iter().map(|(shard, group)| {
            let f = f.clone();
            self.invoke_on(shard, move |s| f(s, group))
        }))
        .await
    }

    // ---- groups --------------------------------------------------------

    /// The shard coordinating `group`.
    pub fn group_shard(&self, group: &str) -> usize {
        owner_shard(group, self.nr_shards)
    }

    /// Runs `f` on the shard coordinating `group`.
    pub async fn on_group<R, F, Fut>(self: &Rc<Self>, group: &str, f: F) -> Result<R, KafkaError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        self.invoke_on(self.group_shard(group), f).await
    }

    /// Every group of every shard (ListGroups), sorted by id.
    pub async fn list_groups(self: &Rc<Self>) -> Result<Vec<ListedGroup>, KafkaError> {
        let all =
            (0..self.nr_shards).map(|i| self.invoke_on(i, |s| async move { s.groups.list() }));
        let mut out = Vec::new();
        for part in join_all(all).await {
            out.extend(part?);
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    // ---- produce -------------------------------------------------------

    /// Runs `op` on each partition named in `items`, on the shard that owns
    /// it: one hop per owning shard, the partitions of a shard concurrently.
    /// Items carry the caller's index so answers can be matched up; every
    /// item gets an answer (an unknown partition, or a lost hop, an error).
    pub async fn on_partitions<A, R, F, Fut>(
        self: &Rc<Self>,
        items: Vec<(usize, String, i32, A)>,
        op: F,
    ) -> Vec<(usize, Result<R, KafkaError>)>
    where
        A: Send + 'static,
        R: Send + 'static,
        F: Fn(Rc<Shard>, Rc<Partition>, A) -> Fut + Send + Clone + 'static,
        Fut: Future<Output = Result<R, KafkaError>> + 'static,
    {
        let catalog = self.catalog();
        let mut out = Vec::with_capacity(items.len());
        let mut routed = Vec::with_capacity(items.len());
        let mut routed_ids = Vec::with_capacity(items.len());
        for (i, topic, partition, arg) in items {
            match catalog.shard_for(&topic, partition) {
                Some(shard) => {
                    routed_ids.push(i);
                    routed.push((shard, (i, topic, partition, arg)));
                }
                None => out.push((i, Err(KafkaError::unknown_partition(&topic, partition)))),
            }
        }
        let answers = self
            .scatter(routed, move |s, group| {
                let op = op.clone();
                async move {
                    join_all(group.into_iter().map(|(i, topic, partition, arg)| {
                        let (s, op) = (s.clone(), op.clone());
                        async move {
                            let r = match s.partition(&topic, partition) {
                                Some(p) => op(s.clone(), p, arg).await,
                                None => Err(KafkaError::unknown_partition(&topic, partition)),
                            };
                            (i, r)
                        }
                    }))
                    .await
                }
            })
            .await;
        let answered = out.len();
        out.extend(answers.into_iter().flatten().flatten());
        if out.len() - answered < routed_ids.len() {
            // A hop failed (its shard stopped): its items still get answers.
            let have: std::collections::HashSet<usize> = out.iter().map(|(i, _)| *i).collect();
            for i in routed_ids.into_iter().filter(|i| !have.contains(i)) {
                log::error!("a hop to the shard owning item {i} was lost");
                let lost = KafkaError::new(
                    ErrorCode::UnknownServerError,
                    "the owning shard did not answer",
                );
                out.push((i, Err(lost)));
            }
        }
        out
    }

    // ---- produce -------------------------------------------------------

    /// Appends to partitions wherever they live.
    pub async fn produce(
        self: &Rc<Self>,
        items: Vec<(usize, String, i32, Bytes)>,
        acks: i16,
    ) -> Vec<(usize, ProduceResult)> {
        self.on_partitions(items, move |s, p, records: Bytes| async move {
            let stats = &s.stats;
            stats.produce_requests.set(stats.produce_requests.get() + 1);
            stats
                .appended_bytes
                .set(stats.appended_bytes.get() + records.len() as u64);
            let catalog = s.catalog();
            let topic = catalog.topic(&p.topic);
            let max = topic.map_or(i32::MAX, |t| t.config.max_message_bytes);
            let schema = topic.and_then(|t| t.schema.as_ref());
            p.produce(records, acks, max, schema, &s.cache).await
        })
        .await
    }

    // ---- fetch ---------------------------------------------------------

    /// A fetch across shards: each owner reads (and waits, if nothing is
    /// there) for its partitions; the first owner to answer with data
    /// releases the others early, as Kafka completes a delayed fetch.
    pub async fn fetch(
        self: &Rc<Self>,
        parts: Vec<FetchPartition>,
        min_bytes: i32,
        max_bytes: i32,
        max_wait: Duration,
    ) -> Vec<Result<PartitionRead, KafkaError>> {
        let catalog = self.catalog();
        let deadline = crate::clock::long_poll_deadline(Instant::now(), max_wait);
        let mut results: Vec<Option<Result<PartitionRead, KafkaError>>> = vec![None; parts.len()];
        let mut groups: BTreeMap<usize, Vec<(usize, FetchPartition)>> = BTreeMap::new();
        for (i, p) in parts.into_iter().enumerate() {
            match catalog.shard_for(&p.topic, p.partition) {
                Some(shard) => groups.entry(shard).or_default().push((i, p)),
                None => {
                    results[i] = Some(Err(KafkaError::unknown_partition(&p.topic, p.partition)))
                }
            }
        }
        let mut cancels = Vec::new();
        let mut pending: Vec<Pin<Box<dyn Future<Output = _>>>> = Vec::new();
        for (shard, group) in groups {
            let (tx, rx) = oneshot::channel::<()>();
            cancels.push(tx);
            pending.push(Box::pin(self.invoke_on(shard, move |s| async move {
                s.fetch_local(group, min_bytes, max_bytes, deadline, rx)
                    .await
            })));
        }
        let mut answers = Vec::new();
        if !pending.is_empty() {
            let (first, _, rest) = select_all(pending).await;
            // Whatever the first owner found, the fetch can complete now.
            cancels.clear();
            answers.push(first);
            answers.extend(join_all(rest).await);
        }
        for a in answers {
            match a {
                Ok(v) => {
                    for (i, r) in v {
                        results[i] = Some(r);
                    }
                }
                Err(e) => log::error!("fetch hop failed: {e}"),
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(KafkaError::new(ErrorCode::UnknownServerError, "fetch lost"))
                })
            })
            .collect()
    }

    /// Reads this shard's part of a fetch; with less than `min_bytes`
    /// waits until an append wakes it, the deadline passes or `cancel`.
    async fn fetch_local(
        self: &Rc<Self>,
        parts: Vec<(usize, FetchPartition)>,
        min_bytes: i32,
        max_bytes: i32,
        deadline: Instant,
        cancel: oneshot::Receiver<()>,
    ) -> Vec<(usize, Result<PartitionRead, KafkaError>)> {
        self.stats
            .fetch_requests
            .set(self.stats.fetch_requests.get() + 1);
        let mut cancel = cancel;
        let mut cancelled = false;
        loop {
            // Watch before reading, so an append during the read still wakes us.
            let mut watches = Vec::with_capacity(parts.len());
            let mut out = Vec::with_capacity(parts.len());
            // Read every partition at once (their disk reads overlap), then
            // apply the response budget in request order, as Kafka does: the
            // first partition with data always gets at least one batch.
            let budget = (max_bytes.max(1) as usize).min(self.config.fetch_max_bytes);
            let limits = read_limits(parts.iter().map(|(_, fp)| fp.max_bytes), budget);
            let reads = join_all(parts.iter().zip(limits).map(|((_, fp), limit)| {
                let part = self.partition(&fp.topic, fp.partition);
                if let Some(p) = &part {
                    watches.push(p.watch());
                }
                async move {
                    match part {
                        Some(p) => p.read(fp.offset, limit).await,
                        None => Err(KafkaError::unknown_partition(&fp.topic, fp.partition)),
                    }
                }
            }))
            .await;
            let mut total = 0usize;
            let mut errors = false;
            for ((i, _), mut r) in parts.iter().zip(reads) {
                match &mut r {
                    Ok(read) => {
                        if total > 0 && total + read.records.len() > budget {
                            read.records = Default::default();
                        }
                        total += read.records.len();
                    }
                    Err(_) => errors = true,
                }
                out.push((*i, r));
            }
            let now = Instant::now();
            if total >= min_bytes.max(1) as usize
                || errors
                || watches.is_empty()
                || now >= deadline
                || cancelled
                || self.is_stopping()
            {
                return out;
            }
            let timer = Box::pin(glommio::timer::sleep(deadline - now));
            // An append wakes us, or the deadline passes (the check above
            // then ends the loop), or another shard answered first: in each
            // case read once more.
            if let Either::Right(_) = select(select(select_all(watches), timer), &mut cancel).await
            {
                cancelled = true;
            }
        }
    }

    // ---- list offsets --------------------------------------------------

    /// Answers ListOffsets for partitions wherever they live: (offset,
    /// timestamp) for a timestamp or the specials -1 (latest), -2
    /// (earliest), -3 (max timestamp).
    pub async fn list_offsets(
        self: &Rc<Self>,
        items: Vec<(usize, String, i32, i64)>,
    ) -> Vec<(usize, Result<(i64, i64), KafkaError>)> {
        self.on_partitions(items, |_, p, ts: i64| async move {
            match ts {
                -1 => Ok((p.log.high_watermark(), -1)),
                -2 => Ok((p.log.log_start(), -1)),
                -3 => Ok(p.log.max_timestamp().unwrap_or((-1, -1))),
                t if t >= 0 => Ok(p.log.offset_for_time(t).await?.unwrap_or((-1, -1))),
                t => Err(KafkaError::new(
                    ErrorCode::InvalidRequest,
                    format!("timestamp {t} is not a valid ListOffsets query"),
                )),
            }
        })
        .await
    }

    /// DeleteRecords for partitions wherever they live: each moves its log
    /// start to the given offset (-1: the high watermark); answers the new
    /// low watermark.
    pub async fn delete_records(
        self: &Rc<Self>,
        items: Vec<(usize, String, i32, i64)>,
    ) -> Vec<(usize, Result<i64, KafkaError>)> {
        self.on_partitions(items, |_, p, offset: i64| async move {
            Ok(p.log.delete_records_before(offset)?)
        })
        .await
    }

    // ---- catalog -------------------------------------------------------

    /// Runs one catalog change on the catalog shard: `change` edits a copy
    /// of the catalog and says per item what happened, and whether anything
    /// changed; if so the copy is saved and installed on every shard before
    /// the answers return. Changes are serialised by the catalog lock.
    async fn change_catalog<T, F>(
        self: &Rc<Self>,
        items: usize,
        change: F,
    ) -> Vec<Result<T, KafkaError>>
    where
        T: Clone + Send + 'static,
        F: FnOnce(&Shard, &mut Catalog) -> (Vec<Result<T, KafkaError>>, bool) + Send + 'static,
    {
        self.invoke_on(CATALOG_SHARD, move |s| async move {
            let _lock = s.catalog_lock.acquire_permit(1).await.expect("open");
            let mut cat = (*s.catalog()).clone();
            let (results, changed) = change(&s, &mut cat);
            if changed {
                if let Err(e) = s.commit_catalog(cat).await {
                    return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
                }
            }
            results
        })
        .await
        .unwrap_or_else(|e| vec![Err(e); items])
    }

    /// Creates topics. `validate_only` checks without creating.
    pub async fn create_topics(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<TopicMeta, KafkaError>> {
        self.change_catalog(topics.len(), move |s, cat| {
            let results: Vec<_> = topics
                .into_iter()
                .map(|t| {
                    s.plan_topic(cat, t).inspect(|meta| {
                        if !validate_only {
                            cat.topics.insert(meta.name.clone(), meta.clone());
                        }
                    })
                })
                .collect();
            let changed = !validate_only && results.iter().any(|r| r.is_ok());
            (results, changed)
        })
        .await
    }

    fn plan_topic(&self, cat: &Catalog, t: NewTopic) -> Result<TopicMeta, KafkaError> {
        validate_topic_name(&t.name)?;
        if cat.topics.contains_key(&t.name) {
            return Err(KafkaError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic {:?} already exists", t.name),
            ));
        }
        let partitions = if t.partitions == -1 {
            self.config.default_partitions
        } else {
            t.partitions
        };
        if partitions <= 0 || partitions > MAX_PARTITIONS {
            return Err(KafkaError::new(
                ErrorCode::InvalidPartitions,
                format!("{partitions} partitions: a topic has 1 to {MAX_PARTITIONS}"),
            ));
        }
        if t.replication_factor != -1 && t.replication_factor != 1 {
            return Err(KafkaError::new(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {} is larger than the 1 node available",
                    t.replication_factor
                ),
            ));
        }
        let mut config = TopicConfig::default();
        for (name, value) in &t.configs {
            if let Some(v) = value {
                config.set(name, v)?;
            }
        }
        Ok(TopicMeta {
            shards: (0..partitions)
                .map(|p| placement(&t.name, p, self.nr_shards))
                .collect(),
            name: t.name,
            id: new_topic_id(),
            config,
            schema: t.schema,
        })
    }

    /// Deletes topics by name. Returns each topic's id, or why not.
    pub async fn delete_topics(
        self: &Rc<Self>,
        names: Vec<String>,
    ) -> Vec<Result<[u8; 16], KafkaError>> {
        self.change_catalog(names.len(), move |_, cat| {
            let results: Vec<_> = names
                .iter()
                .map(|name| {
                    cat.topics.remove(name).map(|t| t.id).ok_or_else(|| {
                        KafkaError::new(
                            ErrorCode::UnknownTopicOrPartition,
                            format!("topic {name:?} does not exist"),
                        )
                    })
                })
                .collect();
            let changed = results.iter().any(|r| r.is_ok());
            (results, changed)
        })
        .await
    }

    /// Grows topics to `count` partitions.
    pub async fn create_partitions(
        self: &Rc<Self>,
        items: Vec<(String, i32)>,
        validate_only: bool,
    ) -> Vec<Result<(), KafkaError>> {
        self.change_catalog(items.len(), move |s, cat| {
            let results: Vec<_> = items
                .into_iter()
                .map(|(name, count)| {
                    let t = cat.topics.get_mut(&name).ok_or_else(|| {
                        KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("topic {name:?} does not exist"))
                    })?;
                    let have = t.partitions();
                    if count <= have || count > MAX_PARTITIONS {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidPartitions,
                            format!("topic {name:?} has {have} partitions; the new count must be larger and at most {MAX_PARTITIONS}, not {count}"),
                        ));
                    }
                    if !validate_only {
                        for p in have..count {
                            t.shards.push(placement(&name, p, s.nr_shards));
                        }
                    }
                    Ok(())
                })
                .collect();
            let changed = !validate_only && results.iter().any(|r| r.is_ok());
            (results, changed)
        })
        .await
    }

    /// Changes topics' configs (IncrementalAlterConfigs): per topic a list of
    /// (config name, operation, value) with Kafka's operations 0 SET and
    /// 1 DELETE (back to the default). A topic's changes apply all or none.
    pub async fn alter_topic_configs(
        self: &Rc<Self>,
        items: Vec<(String, Vec<ConfigChange>)>,
        validate_only: bool,
    ) -> Vec<Result<(), KafkaError>> {
        self.change_catalog(items.len(), move |_, cat| {
            let mut changed = false;
            let results: Vec<_> = items
                .into_iter()
                .map(|(name, ops)| {
                    let t = cat.topics.get_mut(&name).ok_or_else(|| {
                        KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("topic {name:?} does not exist"))
                    })?;
                    let mut config = t.config;
                    for ConfigChange { name: key, op, value } in ops {
                        match (op, value) {
                            (0, Some(v)) => config.set(&key, &v)?,
                            (0, None) => {
                                return Err(KafkaError::new(ErrorCode::InvalidConfig, format!("SET of {key} has no value")))
                            }
                            (1, _) => config.reset(&key)?,
                            (op, _) => {
                                return Err(KafkaError::new(
                                    ErrorCode::InvalidConfig,
                                    format!("operation {op} on {key}: only SET (0) and DELETE (1) apply to these configs"),
                                ))
                            }
                        }
                    }
                    if !validate_only && config != t.config {
                        t.config = config;
                        changed = true;
                    }
                    Ok(())
                })
                .collect();
            (results, changed)
        })
        .await
    }

    /// Saves a new catalog and installs it on every shard (which opens or
    /// drops its partitions) before returning. Catalog shard only.
    async fn commit_catalog(self: &Rc<Self>, mut cat: Catalog) -> Result<(), KafkaError> {
        assert_eq!(self.id, CATALOG_SHARD);
        let old = self.catalog();
        cat.version += 1;
        cat.save(&self.config.data_dir)
            .map_err(|e| KafkaError::new(ErrorCode::KafkaStorageError, e))?;
        let cat = Arc::new(cat);
        let installs = (0..self.nr_shards).map(|i| {
            let cat = cat.clone();
            self.invoke_on(i, move |s| async move { s.install_catalog(cat).await })
        });
        for r in join_all(installs).await {
            r??;
        }
        // Every shard dropped its partitions of deleted topics; the topics'
        // directories go too (only those the previous catalog named).
        for t in old.topics.values() {
            if cat.topic(&t.name).map(|n| n.id) != Some(t.id) {
                let dir = t.topic_dir(&self.config.data_dir);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    log::warn!("removing {}: {e}", dir.display());
                }
            }
        }
        Ok(())
    }

    /// Takes a new catalog snapshot: opens partitions this shard now owns,
    /// applies changed configs, and deletes partitions that are gone.
    async fn install_catalog(self: &Rc<Self>, cat: Arc<Catalog>) -> Result<(), KafkaError> {
        let gone: Vec<(String, i32)> = self
            .partitions
            .borrow()
            .keys()
            .filter(|(t, p)| {
                cat.shard_for(t, *p) != Some(self.id) || {
                    let old = self.catalog.borrow();
                    old.topic(t).map(|m| m.id) != cat.topic(t).map(|m| m.id)
                }
            })
            .cloned()
            .collect();
        for key in gone {
            if let Some(p) = self.partitions.borrow_mut().remove(&key) {
                p.cache.clear();
                p.log.destroy();
            }
        }
        *self.catalog.borrow_mut() = cat.clone();
        self.open_owned_partitions(&cat).await
    }

    async fn open_owned_partitions(self: &Rc<Self>, cat: &Catalog) -> Result<(), KafkaError> {
        for t in cat.topics.values() {
            for (p, &shard) in t.shards.iter().enumerate() {
                if shard != self.id {
                    continue;
                }
                let key = (t.name.clone(), p as i32);
                if let Some(existing) = self.partitions.borrow().get(&key) {
                    existing.log.set_config(t.config.log_config());
                    continue;
                }
                let dir = t.partition_dir(&self.config.data_dir, p as i32);
                let log = PartitionLog::open(&dir, t.config.log_config(), now_ms()).await?;
                let part = Rc::new(Partition::new(
                    t.name.clone(),
                    p as i32,
                    log,
                    self.config.flushes_in_flight,
                    self.stats.latency.clone(),
                ));
                self.partitions.borrow_mut().insert(key, part);
            }
        }
        Ok(())
    }

    /// A new producer id (InitProducerId), from the catalog shard.
    pub async fn allocate_producer_id(self: &Rc<Self>) -> Result<i64, KafkaError> {
        self.invoke_on(CATALOG_SHARD, |s| async move {
            let mut ids = s.producer_ids.borrow_mut();
            let ids = ids
                .as_mut()
                .expect("the catalog shard allocates producer ids");
            ids.allocate()
                .map_err(|e| KafkaError::new(ErrorCode::KafkaStorageError, e))
        })
        .await?
    }

    /// Applies retention to every partition this shard owns, and forgets
    /// idle producers.
    pub fn enforce_retention(&self) {
        let now = now_ms();
        let parts: Vec<_> = self.partitions.borrow().values().cloned().collect();
        let expiry = self.config.producer_expiry.as_millis() as i64;
        for p in parts {
            p.log.expire_producers(now, expiry);
            let n = p.log.enforce_retention(now);
            if n > 0 {
                log::info!(
                    "{}-{}: retention removed {n} segment(s); log now starts at {}",
                    p.topic,
                    p.index,
                    p.log.log_start()
                );
            }
        }
    }

    /// Flushes every partition (clean stop).
    pub async fn close_all(&self) {
        let parts: Vec<_> = self.partitions.borrow().values().cloned().collect();
        join_all(parts.iter().map(|p| p.close())).await;
    }
}

/// Each partition's read limit in one fetch: its own max bytes, handed out
/// in request order from the response's `budget`, but never below an equal
/// share of it. The reads run at once, so whatever the request asks, they
/// hold at most twice the budget before the response is cut to it.
fn read_limits(partition_max: impl ExactSizeIterator<Item = i32>, budget: usize) -> Vec<usize> {
    let share = budget / partition_max.len().max(1);
    let mut left = budget;
    partition_max
        .map(|m| {
            let limit = (m.max(0) as usize).min(left.max(share));
            left = left.saturating_sub(limit);
            limit
        })
        .collect()
}

/// What the network layer starts on each shard once its partitions are
/// open: it binds at once (an error there fails start-up) and returns the
/// future that serves until the shard stops.
pub type ServeFn = Arc<dyn Fn(Rc<Shard>) -> Result<Serving, String> + Send + Sync>;

/// The future that serves a shard's clients until it stops.
pub type Serving = Pin<Box<dyn Future<Output = Result<(), String>>>>;

/// Starts `config.shards` executors, pinned one per core, each opening the
/// partitions it owns and binding its ports with `serve`. Returns once all
/// are ready (and only then do they accept clients, together), or the first
/// start-up error.
pub fn start(config: NodeConfig, serve: ServeFn) -> Result<Node, String> {
    // Shards bind with SO_REUSEPORT, which would also let them share a port
    // with another live process (say, a second node). A plain bind cannot
    // tell that apart from connections of a previous run still closing, so
    // ask the port itself: anyone answering means it is taken. A node just
    // killed can still answer for a moment: its io_uring instance holds the
    // listening socket until the kernel tears the ring down, after the
    // process is gone. So the port must keep answering to count as taken.
    let shard_ports = (0..config.shards).filter_map(|s| config.shard_listen_addr(s));
    let ports = [("Kafka", config.kafka_addr), ("HTTP", config.http_addr)]
        .into_iter()
        .chain(shard_ports.map(|a| ("a shard's Kafka port", a)));
    for (what, addr) in ports {
        let mut probe = addr;
        if probe.ip().is_unspecified() {
            probe.set_ip(match addr {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let answers =
            || std::net::TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_ok();
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut taken = answers();
        while taken && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            taken = answers();
        }
        if taken {
            return Err(format!(
                "cannot listen for {what} on {addr}: another process is listening there"
            ));
        }
    }
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        format!(
            "cannot create data directory {}: {e}",
            config.data_dir.display()
        )
    })?;
    let lock = lock_data_dir(&config.data_dir)?;
    let catalog = Arc::new(Catalog::load_or_create(&config.data_dir, config.shards)?);
    let config = Arc::new(config);
    let stopping = Arc::new(AtomicBool::new(false));
    let all_ready = Arc::new(AtomicBool::new(false));
    let mesh = MeshBuilder::<ShardJob, _>::full(config.shards, config.mesh_capacity);
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
    crate::watchdog::install()?;
    let hearts = crate::watchdog::Hearts::new(config.shards);
    let watchdog = crate::watchdog::spawn(hearts.clone(), stopping.clone())?;
    let mut handles = Vec::new();
    for id in 0..config.shards {
        let (config, catalog, stopping, all_ready, mesh, serve, ready, hearts) = (
            config.clone(),
            catalog.clone(),
            stopping.clone(),
            all_ready.clone(),
            mesh.clone(),
            serve.clone(),
            ready_tx.clone(),
            hearts.clone(),
        );
        let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(id % cpus))
            .name(&format!("weir-shard-{id}"))
            .spin_before_park(config.spin_before_park);
        let handle = builder
            .spawn(move || async move {
                let fail = |e: String| {
                    let _ = ready.send(Err(e));
                };
                // Beating from the first moment: the watchdog wakes a
                // shard that sleeps through its own timer, start-up too.
                hearts.register(id);
                let heartbeat = {
                    let (hearts, stopping) = (hearts.clone(), stopping.clone());
                    glommio::spawn_local(async move {
                        while !stopping.load(Ordering::Relaxed) {
                            glommio::timer::sleep(crate::watchdog::BEAT).await;
                            hearts.beat(id);
                        }
                    })
                };
                let (senders, mut receivers) = match mesh.join().await {
                    Ok(x) => x,
                    Err(_) => return fail(format!("shard {id}: joining the channel mesh failed")),
                };
                if let Err(e) = weir_storage::segment::prepare_direct_io(&config.data_dir).await {
                    return fail(e.to_string());
                }
                let groups =
                    match Coordinator::open(&config.data_dir, id, config.shards, config.groups)
                        .await
                    {
                        Ok(c) => c,
                        Err(e) => return fail(format!("shard {id}: opening the group log: {e}")),
                    };
                let shard = Rc::new(Shard {
                    id,
                    nr_shards: config.shards,
                    config: config.clone(),
                    catalog: RefCell::new(catalog.clone()),
                    partitions: RefCell::new(HashMap::new()),
                    cache: RefCell::new(TailCache::new(config.cache_bytes_per_shard)),
                    mesh: senders,
                    catalog_lock: Semaphore::new(1),
                    stopping: stopping.clone(),
                    stats: ShardStats::default(),
                    producer_ids: RefCell::new(None),
                    groups,
                    hearts: hearts.clone(),
                });
                let mut tasks = Vec::new();
                for (_, rx) in receivers.streams() {
                    let s = shard.clone();
                    tasks.push(glommio::spawn_local(async move {
                        while let Some(job) = rx.recv().await {
                            glommio::spawn_local(job(s.clone())).detach();
                        }
                    }));
                }
                if id == CATALOG_SHARD {
                    match crate::producer_ids::ProducerIds::load(&config.data_dir) {
                        Ok(p) => *shard.producer_ids.borrow_mut() = Some(p),
                        Err(e) => return fail(e),
                    }
                }
                if let Err(e) = shard.open_owned_partitions(&catalog).await {
                    return fail(format!("shard {id}: opening partitions: {e}"));
                }
                let serving = match serve(shard.clone()) {
                    Ok(fut) => fut,
                    Err(e) => return fail(e),
                };
                let _ = ready.send(Ok(id));
                let server = {
                    let (stopping, all_ready) = (stopping.clone(), all_ready.clone());
                    glommio::spawn_local(async move {
                        // Accept nothing until every shard has opened its
                        // partitions and bound its ports: Metadata names
                        // every shard's port, and a request may hop to any
                        // shard. Clients that connect meanwhile wait in the
                        // listen backlog. Start-up only, so a short poll.
                        while !all_ready.load(Ordering::Acquire) {
                            if stopping.load(Ordering::Relaxed) {
                                return;
                            }
                            glommio::timer::sleep(Duration::from_millis(1)).await;
                        }
                        if let Err(e) = serving.await {
                            log::error!("shard {id} stopped serving: {e}");
                            stopping.store(true, Ordering::Relaxed);
                        }
                    })
                };
                let mut ticks = 0u64;
                let tick = Duration::from_millis(100);
                let retention_every =
                    (config.retention_check_interval.as_millis() / tick.as_millis()).max(1) as u64;
                while !stopping.load(Ordering::Relaxed) {
                    glommio::timer::sleep(tick).await;
                    ticks += 1;
                    shard.groups.tick();
                    if ticks.is_multiple_of(retention_every) {
                        shard.enforce_retention();
                    }
                }
                // Stop taking requests, then sync what was appended and
                // answer its producers, then stop serving other shards.
                server.cancel().await;
                shard.close_all().await;
                shard.groups.close().await;
                for t in tasks {
                    t.cancel().await;
                }
                heartbeat.cancel().await;
                log::info!("shard {id} stopped");
            })
            .map_err(|e| {
                format!("cannot start shard {id} (is `ulimit -l` at least 512 KiB?): {e}")
            })?;
        handles.push(handle);
    }
    drop(ready_tx);
    let began = Instant::now();
    let mut starting: Vec<usize> = (0..config.shards).collect();
    while !starting.is_empty() {
        match ready_rx.recv_timeout(STARTUP_PROGRESS_EVERY) {
            Ok(Ok(id)) => starting.retain(|&s| s != id),
            Ok(Err(e)) => {
                stopping.store(true, Ordering::Relaxed);
                return Err(e);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // Clients wait in the backlog meanwhile: say why.
                let waiting: Vec<String> = starting
                    .iter()
                    .map(|&s| format!("shard {s} ({})", hearts.thread_state(s)))
                    .collect();
                log::warn!(
                    "still starting after {} s: waiting for {} to open its partitions and listen; connections wait in the listen backlog",
                    began.elapsed().as_secs(),
                    waiting.join(", ")
                );
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // An executor that could not be made (io_uring setup) ends
                // its thread before our code runs: its handle has the error.
                stopping.store(true, Ordering::Relaxed);
                let why = handles
                    .into_iter()
                    .filter_map(|h| h.join().err())
                    .map(|e| e.to_string())
                    .next()
                    .unwrap_or_else(|| "unknown error".into());
                return Err(format!(
                    "a shard could not start: {why} (io_uring needs locked memory: is `ulimit -l` at least 512 KiB?)"
                ));
            }
        }
    }
    all_ready.store(true, Ordering::Release);
    Ok(Node {
        handles,
        watchdog,
        stopping,
        _lock: lock,
    })
}

/// How often start-up says which shards it still waits for.
const STARTUP_PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Takes `DATA/.lock` (an exclusive `flock`, as Kafka locks each log
/// directory): two nodes writing one data directory would overwrite each
/// other's segments. The kernel drops the lock when the process ends, however
/// it ends, so a crash leaves nothing to clean up.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, String> {
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "data directory {} is in use by another process (it holds {})",
            dir.display(),
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// A running node: its executor threads, the stop flag they watch, and the
/// data directory's lock (held until the node is dropped).
pub struct Node {
    handles: Vec<glommio::ExecutorJoinHandle<()>>,
    watchdog: std::thread::JoinHandle<()>,
    stopping: Arc<AtomicBool>,
    _lock: std::fs::File,
}

impl Node {
    /// The flag that stops every shard when set.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stopping.clone()
    }

    /// Waits for every shard to stop.
    pub fn join(self) {
        for h in self.handles {
            let _ = h.join();
        }
        self.stopping.store(true, Ordering::Relaxed);
        let _ = self.watchdog.join();
    }
}

#[cfg(test)]
mod tests {
    use super::read_limits;

    #[test]
    fn a_fetch_reads_at_most_twice_its_budget() {
        let budget = 1000;
        // Asking for everything: the first takes the budget, the rest a share.
        let l = read_limits([i32::MAX; 4].into_iter(), budget);
        assert_eq!(l, vec![1000, 250, 250, 250]);
        // Modest asks are granted as asked.
        assert_eq!(
            read_limits([100, 0, 300].into_iter(), budget),
            vec![100, 0, 300]
        );
        for n in [1usize, 3, 7, 1000] {
            let l = read_limits(std::iter::repeat_n(i32::MAX, n), budget);
            assert!(l.iter().sum::<usize>() <= 2 * budget, "{n}: {l:?}");
            assert!(l.iter().all(|&x| x >= budget / n), "{n}: {l:?}");
        }
    }
}
