//! A shard: one glommio executor pinned to a core, owning a set of
//! partitions, its tail cache and the connections it accepted.
//!
//! Shards share nothing mutable. Work for a partition owned elsewhere is a
//! closure sent over the channel mesh to the owner ([`Shard::invoke_on`]),
//! which runs it there and sends the answer back; that is the only hop.
//!
//! Rooms: `routed` (partition work wherever the partition lives:
//! produce, fetch, list offsets, delete records), `admin` (catalog changes
//! made on the catalog shard and installed everywhere), `start` (executors,
//! start-up and the running `Node`).

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::channel::oneshot;
use futures::future::join_all;
use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;

use crate::cache::TailCache;
use crate::catalog::Catalog;
use crate::clock::now_ms;
use crate::config::NodeConfig;
use crate::counters::{ApiLatency, CounterValues, Counters};
use crate::error::{ErrorCode, KafkaError};
use crate::groups::{owner_shard, Coordinator, ListedGroup};
use crate::partition::Partition;
use crate::topic_partition::{TopicPartition, TopicPartitionRef};

mod admin;
mod brokers;
mod replicas;
mod routed;

pub use admin::{ConfigChange, NewTopic, PartitionCount};
pub use brokers::PartitionView;
pub use replicas::Followed;
pub use routed::{FetchPartition, OffsetQuery};

/// Work sent to another shard: runs there with that shard's state.
pub type ShardJob = Box<dyn FnOnce(Rc<Shard>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// The shard that owns the catalog and makes every change to it.
pub const CATALOG_SHARD: usize = 0;

/// A feature's state on one shard (a keyed table's rows, the registry's,
/// the Avro writer schemas fetched), made on first use and reached through
/// [`Shard::state`]. The runtime knows features only through this trait,
/// so they depend on the shard and never the reverse.
pub trait ShardState: Any {
    /// Partition `tp` is gone from this shard (deleted, or its topic
    /// re-created): forget what is held of it.
    fn partition_removed(&self, _tp: &TopicPartition) {}
}

/// One feature's state, by its type.
#[derive(Clone)]
struct Feature {
    ty: TypeId,
    any: Rc<dyn Any>,
    hooks: Rc<dyn ShardState>,
}

/// What one shard measures of its work besides its counters
/// (`crate::counters`): errors answered, requests' latency by API, and the
/// produce path's histograms.
#[derive(Debug, Default)]
pub struct ShardStats {
    /// Error codes answered, by (API key, error code): the error's name
    /// and how many (one per code in a response, `net`'s
    /// `response_errors`).
    pub errors: RefCell<BTreeMap<(i16, i16), (String, u64)>>,
    /// Requests by API key: how many and how long (`/metrics`).
    pub apis: RefCell<BTreeMap<i16, ApiLatency>>,
    /// How long produce requests, flush writes and syncs take here.
    pub latency: Rc<crate::latency::Latencies>,
}

/// A snapshot of one shard's counters (`GET /stats`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ShardReport {
    pub shard: usize,
    pub partitions: usize,
    #[serde(flatten)]
    pub counters: CounterValues,
    pub sign_in_failures: u64,
    pub cache_bytes: usize,
    /// Request frames' memory (`memory`).
    pub request_memory: crate::memory::MemoryReport,
    /// Fetch answers' memory (`memory`).
    pub answer_memory: crate::memory::MemoryReport,
    /// Times the watchdog found this shard asleep past its heartbeat and
    /// woke it (a lost wake-up; see `watchdog`).
    pub lost_wakeups: u64,
    /// The shard journal's writes and the bytes they wrote (`--journal`;
    /// 0 without it).
    pub journal_writes: u64,
    pub journal_written_bytes: u64,
    pub latency_us: crate::latency::LatencyReport,
}

/// Per-shard state. Lives on shard `id`, reached from elsewhere only
/// through `invoke_on`.
pub struct Shard {
    pub id: usize,
    pub nr_shards: usize,
    pub config: Arc<NodeConfig>,
    catalog: RefCell<Arc<Catalog>>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    pub cache: RefCell<TailCache>,
    /// Bytes of request frames held (`memory`).
    pub request_memory: Arc<crate::memory::MemoryBudget>,
    /// Bytes read from this shard's partitions for fetch answers not yet
    /// sent (`memory`; given back on the connection's shard).
    pub answer_memory: Arc<crate::memory::MemoryBudget>,
    mesh: Senders<ShardJob>,
    /// Serialises catalog changes (used on the catalog shard only).
    catalog_lock: Semaphore,
    /// Serialises installing catalogs (the catalog shard's).
    install_lock: Semaphore,
    /// The last catalog published failed to install on some shard (a
    /// partition that did not open): the next install of the cluster's
    /// catalog tries again even if it is no newer.
    install_failed: std::cell::Cell<bool>,
    /// The cluster's control plane; `None` on a single node.
    pub cluster: Option<crate::cluster::Control>,
    stopping: Arc<AtomicBool>,
    pub counters: Counters,
    pub stats: ShardStats,
    /// Producer id allocation (the catalog shard's only).
    producer_ids: RefCell<Option<crate::producer_ids::ProducerIds>>,
    /// The consumer groups this shard coordinates.
    pub groups: Coordinator,
    /// Each feature's state on this shard (`state`), made on first use.
    features: RefCell<Vec<Feature>>,
    /// Failed sign-ins per client address (this shard's connections).
    pub sign_in_throttle: crate::auth::throttle::Throttle,
    /// Every shard's heartbeat (this one beats its own).
    hearts: Arc<crate::watchdog::Hearts>,
    /// Woken at each catalog installed (the replica fetcher looks again).
    catalog_watchers: RefCell<Vec<oneshot::Sender<()>>>,
}

/// What a shard is made of at start-up (`crate::node`).
pub struct ShardParts {
    pub id: usize,
    pub config: Arc<NodeConfig>,
    pub catalog: Arc<Catalog>,
    pub mesh: Senders<ShardJob>,
    pub stopping: Arc<AtomicBool>,
    pub hearts: Arc<crate::watchdog::Hearts>,
    pub groups: Coordinator,
    /// The catalog shard's only.
    pub producer_ids: Option<crate::producer_ids::ProducerIds>,
    pub cluster: Option<crate::cluster::Control>,
}

/// How long a group request waits for its slot's state to load on the
/// node the catalog names its coordinator (`Shard::on_group`).
const SLOT_LOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

impl Shard {
    pub fn new(parts: ShardParts) -> Shard {
        let config = parts.config;
        Shard {
            id: parts.id,
            nr_shards: config.shards,
            catalog: RefCell::new(parts.catalog),
            partitions: RefCell::new(HashMap::new()),
            cache: RefCell::new(TailCache::new(config.cache_bytes_per_shard)),
            request_memory: crate::memory::MemoryBudget::new(
                config.request_memory_bytes.max(config.max_request_bytes),
            ),
            answer_memory: crate::memory::MemoryBudget::new(
                config.answer_memory_bytes.max(config.fetch_max_bytes),
            ),
            mesh: parts.mesh,
            catalog_lock: Semaphore::new(1),
            install_lock: Semaphore::new(1),
            install_failed: std::cell::Cell::new(false),
            cluster: parts.cluster,
            stopping: parts.stopping,
            counters: Counters::default(),
            stats: ShardStats::default(),
            producer_ids: RefCell::new(parts.producer_ids),
            groups: parts.groups,
            features: RefCell::default(),
            sign_in_throttle: Default::default(),
            hearts: parts.hearts,
            catalog_watchers: RefCell::default(),
            config,
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.borrow().clone()
    }

    /// Whether any client quota is set: asked of every request, so it
    /// reads the snapshot in place rather than taking a share of it.
    pub fn quotas_set(&self) -> bool {
        !self.catalog.borrow().quotas.is_empty()
    }

    /// Why a partition routed here is not open on this shard: moved away
    /// (a reassignment, a leadership the catalog just gave elsewhere) or
    /// not open yet, NOT_LEADER_OR_FOLLOWER, as Kafka answers for a
    /// partition it knows but does not keep; else no such partition.
    pub fn not_here(&self, topic: &str, p: i32) -> KafkaError {
        match self.catalog().place(topic, p) {
            Some(_) => KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!("partition {p} of topic {topic:?} is not kept here now (moved, or not open yet)"),
            ),
            None => KafkaError::unknown_partition(topic, p),
        }
    }

    /// The shard of this node owning a partition, or why none does (there
    /// is no such partition, or another node of the cluster leads it).
    pub fn owner_here(&self, cat: &Catalog, topic: &str, p: i32) -> Result<usize, KafkaError> {
        match cat.place(topic, p) {
            None => Err(KafkaError::unknown_partition(topic, p)),
            Some((Some(crate::catalog::NO_LEADER), _)) => Err(KafkaError::new(
                ErrorCode::LeaderNotAvailable,
                format!("partition {p} of topic {topic:?} has no live in-sync replica to lead it"),
            )),
            Some((Some(node), shard)) if node != self.config.node_id => Err(KafkaError {
                leader_epoch: cat.topic(topic).map_or(-1, |t| t.leader_epoch(p)),
                ..KafkaError::not_leader(topic, p, self.node_broker(node, shard))
            }),
            Some((_, shard)) => Ok(self.local_shard(shard)),
        }
    }

    /// This node's shard for a placement: a cluster places partitions on
    /// a node's shards as it registered them, and a node started later
    /// with fewer serves them modulo its count (the files do not name the
    /// shard).
    pub fn local_shard(&self, placed: usize) -> usize {
        placed % self.nr_shards.max(1)
    }

    /// This shard's state of feature `T`, made (empty) on first use.
    pub fn state<T: ShardState + Default>(&self) -> Rc<T> {
        let ty = TypeId::of::<T>();
        if let Some(f) = self.features.borrow().iter().find(|f| f.ty == ty) {
            return f.any.clone().downcast().expect("kept under its own type");
        }
        let made = Rc::new(T::default());
        self.features.borrow_mut().push(Feature {
            ty,
            any: made.clone(),
            hooks: made.clone(),
        });
        made
    }

    /// Tells every feature that partition `tp` is gone from this shard.
    fn partition_removed(&self, tp: &TopicPartition) {
        let features = self.features.borrow().clone();
        for f in features {
            f.hooks.partition_removed(tp);
        }
    }

    /// Whether clients must sign in (a role token is set or a user exists).
    pub fn sign_in_required(&self) -> bool {
        crate::auth::sign_in_required(&self.config.role_tokens, &self.catalog.borrow())
    }

    /// Whether `principal` from `host` may do `operation` on `resource`
    /// named `name` (`auth::Access::allows`).
    pub fn allows(
        &self,
        principal: &crate::auth::Principal,
        host: &str,
        operation: crate::auth::acl::Operation,
        resource: crate::auth::acl::ResourceType,
        name: &str,
    ) -> bool {
        let catalog = self.catalog.borrow();
        crate::auth::Access {
            catalog: &catalog,
            tokens: &self.config.role_tokens,
        }
        .allows(principal, host, operation, resource, name)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        let key: &dyn TopicPartitionRef = &(topic, partition);
        self.partitions.borrow().get(key).cloned()
    }

    /// How many partitions this shard owns.
    pub fn partition_count(&self) -> usize {
        self.partitions.borrow().len()
    }

    /// This shard's counters.
    pub fn report(&self) -> ShardReport {
        // Runs on this shard's thread, whose journal is the installed one.
        let journal = weir_storage::journal::current().map_or((0, 0), |j| j.counters());
        ShardReport {
            shard: self.id,
            partitions: self.partition_count(),
            counters: self.counters.values(),
            sign_in_failures: self.sign_in_throttle.failed_total(),
            cache_bytes: self.cache.borrow().bytes(),
            request_memory: self.request_memory.report(),
            answer_memory: self.answer_memory.report(),
            lost_wakeups: self.hearts.woken(self.id),
            journal_writes: journal.0,
            journal_written_bytes: journal.1,
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

    /// The partitions this shard owns.
    pub fn owned_partitions(&self) -> Vec<Rc<Partition>> {
        self.partitions.borrow().values().cloned().collect()
    }

    /// A response of API `api` carried error `code` (named `name`) `n`
    /// times.
    pub fn record_error(&self, api: i16, code: i16, name: impl FnOnce() -> String, n: u64) {
        let mut errors = self.stats.errors.borrow_mut();
        errors.entry((api, code)).or_insert_with(|| (name(), 0)).1 += n;
    }

    /// A request of API `key` took `elapsed` (from its last byte read to
    /// its answer ready).
    pub fn record_request(&self, key: i16, elapsed: std::time::Duration) {
        self.stats
            .apis
            .borrow_mut()
            .entry(key)
            .or_default()
            .record(elapsed.as_secs_f64());
    }

    /// Every shard's counters, gathered over the mesh (hops not counted, so
    /// reading the counters does not change them).
    pub async fn reports(self: &Rc<Self>) -> Vec<ShardReport> {
        let all = (0..self.nr_shards).map(|i| self.send_job(i, |s| async move { s.report() }));
        join_all(all).await.into_iter().flatten().collect()
    }

    /// The bytes of each partition's log (DescribeLogDirs), sorted: every
    /// shard's, or this shard's alone when each shard is a broker of its
    /// own (`--shard-ports`), so a client asking every broker counts each
    /// partition once.
    pub async fn log_sizes(self: &Rc<Self>) -> Vec<(TopicPartition, u64)> {
        let local = |s: &Shard| -> Vec<(TopicPartition, u64)> {
            s.partitions
                .borrow()
                .iter()
                .map(|(tp, part)| (tp.clone(), part.log.size_bytes()))
                .collect()
        };
        let mut all = if self.config.shard_port_base.is_some() {
            local(self)
        } else {
            let each =
                (0..self.nr_shards).map(|i| self.send_job(i, move |s| async move { local(&s) }));
            join_all(each)
                .await
                .into_iter()
                .flatten()
                .flatten()
                .collect()
        };
        all.sort();
        all
    }

    /// The data directory's file system: (total, usable) bytes.
    pub fn disk_space(&self) -> std::io::Result<(u64, u64)> {
        weir_storage::disk_space(&self.config.data_dir)
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
            crate::counters::add(&self.counters.hops_sent, 1);
        }
        self.send_job(target, f).await
    }

    /// `invoke_on` without counting the hop.
    pub(crate) async fn send_job<R, F, Fut>(
        self: &Rc<Self>,
        target: usize,
        f: F,
    ) -> Result<R, KafkaError>
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
        let cat = self.catalog();
        match cat.topic(crate::catalog::GROUPS_TOPIC) {
            Some(t) if self.cluster.is_some() => {
                let slot = crate::catalog::group_slot(group) as i32;
                t.place(slot)
                    .map_or(0, |(_, placed)| self.local_shard(placed))
            }
            _ => owner_shard(group, self.nr_shards),
        }
    }

    /// Runs `f` on the shard coordinating `group`.
    pub async fn on_group<R, F, Fut>(self: &Rc<Self>, group: &str, f: F) -> Result<R, KafkaError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        if let Err(e) = self.coordinates(group) {
            // Told to come here by a node whose catalog is newer than the
            // one installed here (a slot's leader just moved): catch up
            // with what the quorum applied on this node, then decide.
            let Some(control) = self.cluster.clone() else {
                return Err(e);
            };
            if self.catalog().version >= control.latest().version {
                return Err(e);
            }
            self.catch_up(&control, std::time::Duration::from_secs(1))
                .await;
            self.coordinates(group)?;
        }
        let key = group.to_string();
        self.invoke_on(self.group_shard(group), move |s| async move {
            // The catalog names this node as soon as it leads the slot;
            // until the slot's state is loaded, an answer would be of an
            // empty group. The load follows within moments (the slot's
            // partition opening, then its replay), so the request waits
            // for it, bounded: librdkafka's group describes give up on a
            // group's COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR
            // alike (seen on a new cluster's first describe, which makes
            // the groups topic). Past the bound, or once the catalog no
            // longer names this node, the error is answered.
            let deadline = std::time::Instant::now() + SLOT_LOAD_WAIT;
            loop {
                match s.groups.check_loaded(&key) {
                    Ok(()) => break,
                    Err(e)
                        if std::time::Instant::now() < deadline && s.coordinates(&key).is_ok() =>
                    {
                        log::debug!("{key:?}: waiting for its slot to load here: {e}");
                        glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(f(s).await)
        })
        .await?
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

    // ---- producer ids, retention, stop ------------------------------

    /// A new producer id (InitProducerId), from the catalog shard.
    pub async fn allocate_producer_id(self: &Rc<Self>) -> Result<i64, KafkaError> {
        self.invoke_on(CATALOG_SHARD, |s| async move {
            if let Some(control) = s.cluster.clone() {
                return s.producer_id_of_cluster(&control).await;
            }
            let mut ids = s.producer_ids.borrow_mut();
            let ids = ids
                .as_mut()
                .expect("the catalog shard allocates producer ids");
            ids.allocate()
                .map_err(|e| KafkaError::new(ErrorCode::KafkaStorageError, e))
        })
        .await?
    }

    /// A producer id from the block the cluster's quorum gave this node,
    /// asking for the next block when it is spent: ids never repeat
    /// across nodes.
    async fn producer_id_of_cluster(
        self: &Rc<Self>,
        control: &crate::cluster::Control,
    ) -> Result<i64, KafkaError> {
        use crate::cluster::types::{Applied, Command};
        loop {
            let taken = self
                .producer_ids
                .borrow_mut()
                .as_mut()
                .and_then(|p| p.take());
            if let Some(id) = taken {
                return Ok(id);
            }
            let count = crate::producer_ids::BLOCK;
            match control.propose(Command::ProducerIds { count }).await? {
                Applied::ProducerIds { start } => {
                    if let Some(p) = self.producer_ids.borrow_mut().as_mut() {
                        p.set_block(start)
                    }
                }
                other => {
                    return Err(KafkaError::new(
                        ErrorCode::UnknownServerError,
                        format!(
                            "the metadata quorum answered a block of producer ids with {other:?}"
                        ),
                    ))
                }
            }
        }
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

    /// Runs a cleaning pass on each compacted partition of this shard that
    /// is due one (`weir_storage::log`'s compaction), one at a time.
    pub async fn compact_all(&self) {
        let parts: Vec<_> = self
            .partitions
            .borrow()
            .values()
            .filter(|p| p.log.config().compaction.is_some())
            .cloned()
            .collect();
        let bump = crate::counters::add;
        for p in parts {
            if self.is_stopping() {
                return;
            }
            let started = std::time::Instant::now();
            let outcome = p
                .log
                .compact(now_ms(), self.config.compaction_map_bytes)
                .await;
            if matches!(&outcome, Ok(Some(done)) if done.segments_in > 0) {
                crate::timeline::note_since("compaction", started, || {
                    format!("{}-{}", p.topic, p.index)
                });
            }
            match outcome {
                Ok(Some(done)) if done.segments_in > 0 => {
                    // Cached batches below what was cleaned would show
                    // readers from the start what compaction removed.
                    p.cache.forget_below(p.log.cleaned_to());
                    bump(&self.counters.compactions, 1);
                    bump(&self.counters.compacted_bytes_in, done.bytes_in);
                    bump(&self.counters.compacted_bytes_out, done.bytes_out);
                    bump(
                        &self.counters.compacted_records_removed,
                        done.records_removed,
                    );
                    log::info!(
                        "{}-{}: compaction rewrote {} segment(s) of {} bytes into {} of {} bytes, {} record(s) removed, in {} ms",
                        p.topic,
                        p.index,
                        done.segments_in,
                        done.bytes_in,
                        done.segments_out,
                        done.bytes_out,
                        done.records_removed,
                        started.elapsed().as_millis()
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    bump(&self.counters.compaction_errors, 1);
                    log::warn!("{}-{}: compaction failed: {e}", p.topic, p.index);
                }
            }
        }
    }

    /// Flushes every partition (clean stop).
    pub async fn close_all(&self) {
        let parts: Vec<_> = self.partitions.borrow().values().cloned().collect();
        join_all(parts.iter().map(|p| p.close())).await;
    }
}
