//! Start-up and the running node: the executors, the channel mesh, the
//! data directory lock, the start gate that releases every shard together.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::sync::Semaphore;

use crate::cache::TailCache;
use crate::catalog::Catalog;
use crate::config::NodeConfig;
use crate::groups::Coordinator;

use super::{Shard, ShardJob, ShardStats, CATALOG_SHARD};

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
    let shard_ports = (0..config.shards).filter_map(|s| config.shard_listen_addr(s));
    let ports = [("Kafka", config.kafka_addr), ("HTTP", config.http_addr)]
        .into_iter()
        .chain(shard_ports.map(|a| ("a shard's Kafka port", a)));
    for (what, addr) in ports {
        wait_for_port(what, addr)?;
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
    let stopped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
        let (config, catalog, stopping, all_ready, stopped, mesh, serve, ready, hearts) = (
            config.clone(),
            catalog.clone(),
            stopping.clone(),
            all_ready.clone(),
            stopped.clone(),
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
                // Beating from the first moment (start-up included; the tick
                // loop takes over once serving): the watchdog wakes a shard
                // that sleeps through its own timer.
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
                    request_memory: crate::memory::MemoryBudget::new(
                        config.request_memory_bytes.max(config.max_request_bytes),
                    ),
                    answer_memory: crate::memory::MemoryBudget::new(
                        config.answer_memory_bytes.max(config.fetch_max_bytes),
                    ),
                    mesh: senders,
                    catalog_lock: Semaphore::new(1),
                    stopping: stopping.clone(),
                    counters: Default::default(),
                    stats: ShardStats::default(),
                    producer_ids: RefCell::new(None),
                    groups,
                    keyed: Default::default(),
                    registry: Default::default(),
                    writers: Default::default(),
                    sign_in_throttle: Default::default(),
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
                // From here the shard's tick beats its heart: one timer, not
                // two unaligned ones waking an idle shard.
                heartbeat.cancel().await;
                // Compaction runs beside the requests at a tenth of their
                // share of the core when both have work (glommio's shares),
                // yielding between batches: produce and fetch latency stay
                // as they were.
                let cleaner = {
                    let (shard, every) = (shard.clone(), config.compaction_check_interval);
                    let queue = glommio::executor().create_task_queue(
                        glommio::Shares::Static(100),
                        glommio::Latency::NotImportant,
                        "compaction",
                    );
                    glommio::spawn_local_into(
                        async move {
                            loop {
                                glommio::timer::sleep(every).await;
                                shard.compact_all().await;
                            }
                        },
                        queue,
                    )
                    .expect("the compaction queue")
                };
                // Keyed tables' rows are kept up to date and snapshotted
                // beside the cleaner, at its share of the core.
                let snapshots = {
                    let shard = shard.clone();
                    let every = config.compaction_check_interval.min(KEYED_SNAPSHOT_EVERY);
                    let queue = glommio::executor().create_task_queue(
                        glommio::Shares::Static(100),
                        glommio::Latency::NotImportant,
                        "keyed-snapshots",
                    );
                    glommio::spawn_local_into(
                        async move {
                            loop {
                                glommio::timer::sleep(every).await;
                                shard.snapshot_keyed(false).await;
                            }
                        },
                        queue,
                    )
                    .expect("the keyed snapshots' queue")
                };
                let mut ticks = 0u64;
                let tick = crate::watchdog::BEAT;
                let retention_every =
                    (config.retention_check_interval.as_millis() / tick.as_millis()).max(1) as u64;
                while !stopping.load(Ordering::Relaxed) {
                    glommio::timer::sleep(tick).await;
                    hearts.beat(id);
                    ticks += 1;
                    shard.groups.tick();
                    if ticks.is_multiple_of(TXN_EVERY) {
                        shard.txn_tick(ticks.is_multiple_of(TXN_EXPIRY_EVERY));
                    }
                    if ticks.is_multiple_of(retention_every) {
                        shard.enforce_retention();
                    }
                }
                // Stop taking requests, then sync what was appended and
                // answer its producers, then stop serving other shards.
                server.cancel().await;
                cleaner.cancel().await;
                snapshots.cancel().await;
                shard.snapshot_keyed(true).await;
                shard.close_all().await;
                shard.groups.close().await;
                for t in tasks {
                    t.cancel().await;
                }
                log::info!("shard {id} stopped");
                // Keep this executor until every shard has stopped. Reads
                // of cancelled tasks (a SQL scan's, a read-ahead) may still
                // be in the kernel: their buffers live while the executor
                // does, and once it is dropped the kernel may still write
                // into memory the allocator hands to another thread. After
                // every shard's last write, nothing such a read lands on
                // is written anywhere.
                stopped.fetch_add(1, Ordering::AcqRel);
                while stopped.load(Ordering::Acquire) < config.shards {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
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

/// Waits until `addr` is free to listen on, or says who holds it.
///
/// Shards bind with SO_REUSEPORT, which would also let them share a port
/// with another live process (say, a second node): a port another process
/// listens on is an error. A node just killed leaves its listening sockets
/// behind for a while: its io_uring instance holds them until the kernel
/// has torn the ring down, after the process is gone (5-15 ms here after a
/// SIGKILL under load, longer when requests are in flight). Joining their
/// SO_REUSEPORT group would hand some new connections to sockets nobody
/// will ever accept, so start-up waits for them to go, saying so once.
fn wait_for_port(what: &str, addr: std::net::SocketAddr) -> Result<(), String> {
    let mut probe = addr;
    if probe.ip().is_unspecified() {
        probe.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let answers =
        || std::net::TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_ok();
    let began = Instant::now();
    let mut said = false;
    // Since when a live process (as far as we can tell) answers there.
    let mut held_since: Option<Instant> = None;
    loop {
        match crate::listeners::on_port(addr.port()) {
            crate::listeners::Listeners::None => return Ok(()),
            // Past a bound, sockets no visible process holds are judged
            // like any other (a holder in another PID namespace sharing
            // this network namespace is invisible here).
            crate::listeners::Listeners::Orphaned(n) if began.elapsed() < ORPHANED_WAIT => {
                held_since = None;
                if !said {
                    log::warn!(
                        "waiting for {n} listening socket(s) on port {} left by a process that has exited (the kernel is still tearing down its io_uring instance)",
                        addr.port()
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            crate::listeners::Listeners::Held | crate::listeners::Listeners::Orphaned(_) => {
                // Taken if it keeps answering.
                if !answers() {
                    return Ok(());
                }
                let since = *held_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(3) {
                    return Err(format!(
                        "cannot listen for {what} on {addr}: another process is listening there"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// How long start-up waits for listening sockets a killed process left.
const ORPHANED_WAIT: Duration = Duration::from_secs(60);

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

/// Ticks between looks at transactions to complete or abort (a second).
const TXN_EVERY: u64 = 10;
/// Ticks between expiries of idle transactional ids (a minute).
const TXN_EXPIRY_EVERY: u64 = 600;

/// How often each keyed table partition's rows are brought up to date and
/// checked for a due snapshot (`table::keyed`): a restart after a kill reads
/// at most about this much of the log past the newest snapshot, besides
/// `TAIL_RECORDS`.
const KEYED_SNAPSHOT_EVERY: Duration = Duration::from_secs(1);
