//! Start-up and the running node: the executors, the channel mesh, the
//! data directory lock, the start gate that releases every shard together.
//! Each shard's own life (open, serve, background work, tick, stop) is
//! `run`'s. This is where the runtime (`shard`) and the features meet.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::{Full, MeshBuilder};

use crate::catalog::Catalog;
use crate::config::NodeConfig;
use crate::shard::{Shard, ShardJob};
use crate::watchdog::Hearts;

mod run;

/// What the network layer starts on each shard once its partitions are
/// open: it binds at once (an error there fails start-up) and returns the
/// future that serves until the shard stops.
pub type ServeFn = Arc<dyn Fn(Rc<Shard>) -> Result<Serving, String> + Send + Sync>;

/// The future that serves a shard's clients until it stops.
pub type Serving = Pin<Box<dyn Future<Output = Result<(), String>>>>;

/// What every shard is started with: the node's shared pieces.
#[derive(Clone)]
struct Launch {
    config: Arc<NodeConfig>,
    catalog: Arc<Catalog>,
    /// Set to stop every shard.
    stopping: Arc<AtomicBool>,
    /// Set once every shard is ready: only then do shards accept clients.
    all_ready: Arc<AtomicBool>,
    /// How many shards have stopped (each keeps its executor until all have).
    stopped: Arc<AtomicUsize>,
    mesh: MeshBuilder<ShardJob, Full>,
    serve: ServeFn,
    /// Each shard says here that it is ready, or why it cannot start.
    ready: Sender<Result<usize, String>>,
    hearts: Arc<Hearts>,
    /// The cluster's control plane; `None` on a single node.
    cluster: Option<crate::cluster::Control>,
    /// Where the shards' journals start counting (above what replay saw).
    journal_seq: u64,
    /// Where each shard writes down its slow work (`--timeline`).
    timeline: Option<crate::timeline::Sink>,
}

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
    // Before any log opens: what the journal made durable goes back into
    // the segments (also when the journal is off now: it may have been on).
    let replayed = weir_storage::journal::replay(&config.data_dir)?;
    if replayed.records > 0 {
        log::info!(
            "journal replayed: {} records ({} bytes) from {} files written back into their \
             segments, {} no longer needed",
            replayed.records,
            replayed.bytes,
            replayed.files,
            replayed.skipped
        );
    }
    let first_seq = replayed.next_seq;
    let mut catalog = Catalog::load_or_create(&config.data_dir, config.shards)?;
    // Topics follow the defaults this start gives (its flags may differ
    // from the last start's).
    catalog.follow_topic_defaults(&config);
    let catalog = Arc::new(catalog);
    let control = match &config.cluster {
        Some(c) => Some(crate::cluster::start(
            c.clone(),
            config.cluster_node(),
            catalog.clone(),
            &config.data_dir,
        )?),
        None => None,
    };
    let (ready, ready_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
    crate::watchdog::install()?;
    let hearts = Hearts::new(config.shards);
    let stopping = Arc::new(AtomicBool::new(false));
    let watchdog = crate::watchdog::spawn(hearts.clone(), stopping.clone())?;
    let timeline = match &config.timeline {
        Some(path) => Some(crate::timeline::Sink::open(path)?),
        None => None,
    };
    let launch = Launch {
        mesh: MeshBuilder::full(config.shards, config.mesh_capacity),
        config: Arc::new(config),
        catalog,
        stopping: stopping.clone(),
        all_ready: Arc::new(AtomicBool::new(false)),
        stopped: Arc::new(AtomicUsize::new(0)),
        serve,
        ready,
        hearts: hearts.clone(),
        cluster: control.clone(),
        journal_seq: first_seq,
        timeline,
    };
    // What a crash left of deleted topics goes now, off every shard.
    weir_storage::trash::empty_soon(&launch.config.data_dir);
    let mut handles = Vec::new();
    for id in 0..launch.config.shards {
        let shard = launch.clone();
        let builder = glommio::LocalExecutorBuilder::new(launch.config.cpus.placement(id))
            .name(&format!("weir-shard-{id}"))
            .spin_before_park(shard.config.spin_before_park);
        let handle = builder.spawn(move || run::run(id, shard)).map_err(|e| {
            format!("cannot start shard {id} (is `ulimit -l` at least 512 KiB?): {e}")
        })?;
        handles.push(handle);
    }
    // Every shard holds its own sender now: a shard that ends before it is
    // ready disconnects the channel.
    let all_ready = launch.all_ready.clone();
    drop(launch);
    let handles = wait_until_ready(handles, ready_rx, &stopping, &hearts)?;
    all_ready.store(true, Ordering::Release);
    Ok(Node {
        handles,
        watchdog,
        stopping,
        cluster: control,
        _lock: lock,
    })
}

/// Waits until every shard is ready, saying meanwhile which it waits for;
/// the first shard's error (or an executor that could not be made) stops
/// the others and is the answer.
fn wait_until_ready(
    handles: Vec<glommio::ExecutorJoinHandle<()>>,
    ready: Receiver<Result<usize, String>>,
    stopping: &AtomicBool,
    hearts: &Hearts,
) -> Result<Vec<glommio::ExecutorJoinHandle<()>>, String> {
    let began = Instant::now();
    let mut starting: Vec<usize> = (0..handles.len()).collect();
    while !starting.is_empty() {
        match ready.recv_timeout(STARTUP_PROGRESS_EVERY) {
            Ok(Ok(id)) => starting.retain(|&s| s != id),
            Ok(Err(e)) => {
                stopping.store(true, Ordering::Relaxed);
                return Err(e);
            }
            Err(RecvTimeoutError::Timeout) => {
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
            Err(RecvTimeoutError::Disconnected) => {
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
    Ok(handles)
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
    /// The control plane, in a cluster (a controlled shutdown asks it).
    cluster: Option<crate::cluster::Control>,
    _lock: std::fs::File,
}

impl Node {
    /// The flag that stops every shard when set.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stopping.clone()
    }

    /// The cluster's control plane, if this node is in one.
    pub fn control(&self) -> Option<crate::cluster::Control> {
        self.cluster.clone()
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
