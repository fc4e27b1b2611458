//! The cluster's control plane: one metadata quorum (openraft) whose state
//! machine is the catalog, run on a control thread of its own with a
//! current-thread Tokio runtime, beside the shards and off their cores'
//! hot loops. Shards reach it through `Control` (every call is a task
//! spawned on the control runtime, answered by a oneshot the calling
//! shard awaits); the catalog shard installs each catalog the quorum
//! applies on every shard, as it does a single node's changes.
//!
//! Parts: `types` (the log's commands), `log_store` (the Raft log and
//! vote in files), `state_machine` (the catalog), `peer` (the inter-node
//! wire), `network` (Raft over it), `server` (answering other nodes),
//! `liveness` (registration, heartbeats, fencing, joins).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft};
use tokio::sync::watch;

use crate::catalog::{Catalog, ClusterNode};
use crate::error::{ErrorCode, KafkaError};

mod liveness;
mod log_store;
mod network;
pub mod peer;
mod server;
pub(crate) mod state_machine;
pub mod types;

use types::{Applied, Command, Meta};

/// How long a proposal may wait for a controller before it fails.
const PROPOSE_WITHIN: Duration = Duration::from_secs(15);

/// A service one node asks another's shards for (the other node leads
/// what it needs: the registry's topic).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub enum Service {
    /// A schema registry request (`registry::api::Request` as JSON,
    /// answered with its `Answer`).
    Registry,
    /// A statement's work on partitions this node leads
    /// (`sql::leaders`).
    Sql,
    /// Writer schemas for another node's Avro tables, from the registry
    /// this node serves (`registry::SchemaQuery`).
    Schemas,
    /// A transaction coordinator's markers and offsets for partitions and
    /// groups this node has (`txn::remote`).
    Txn,
}

/// A request another node forwarded here, for this node's shards to
/// answer (`node/run.rs` takes them on shard 0).
pub struct Forwarded {
    pub service: Service,
    /// The catalog version the asking node had: the request is answered
    /// on this one or a newer one.
    pub catalog_version: u64,
    pub body: Vec<u8>,
    pub answer: futures::channel::oneshot::Sender<Result<Vec<u8>, String>>,
}

/// Forwarded requests waiting for shard 0, at most.
const FORWARDED_QUEUE: usize = 256;

/// The metadata quorum as its leader sees it (DescribeQuorum).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct QuorumView {
    pub leader: i32,
    /// The leader's term.
    pub epoch: i32,
    /// The last index the leader applied (committed).
    pub high_watermark: i64,
    pub voters: Vec<ReplicaView>,
    /// Members that do not vote (nodes that joined).
    pub observers: Vec<ReplicaView>,
}

/// One member of the quorum.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReplicaView {
    pub id: i32,
    /// The index after the last entry it holds (-1: unknown).
    pub log_end: i64,
    /// Whether it holds everything the leader does.
    pub caught_up: bool,
}

/// A node's place in a cluster (`weir serve --node-id … --voters …`).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub node_id: i32,
    /// The voters: id and peer address. Empty for a node that joins.
    pub voters: BTreeMap<u64, String>,
    /// A node to ask to join through (a node that is not a voter).
    pub join: Option<String>,
    /// Where this node listens for the others.
    pub peer_addr: SocketAddr,
    /// The address the others reach it at (`peer_addr` unless given).
    pub peer_advertised: String,
    pub rack: Option<String>,
    /// A node silent this long is fenced.
    pub session_timeout: Duration,
    /// How often the controller moves leaderships back to preferred
    /// replicas (`None`: only when asked, by ElectLeaders).
    pub leader_balance_interval: Option<Duration>,
    /// How often the controller moves replicas from the nodes keeping the
    /// most to those keeping the fewest (`None`: only by reassignments).
    pub replica_balance_interval: Option<Duration>,
}

/// The shards' handle on the control plane. Cheap to clone, usable from
/// any thread.
#[derive(Clone)]
pub struct Control {
    inner: Arc<Inner>,
}

struct Inner {
    rt: tokio::runtime::Handle,
    raft: Raft<Meta>,
    id: u64,
    config: ClusterConfig,
    catalogs: watch::Receiver<Arc<Catalog>>,
    /// The controller's view: when each node was last heard.
    heard: Mutex<BTreeMap<i32, Instant>>,
    /// Requests other nodes forward to this node's shards.
    forwarded: futures::channel::mpsc::Sender<Forwarded>,
    /// Their receiving end, until shard 0 takes it.
    forwarded_rx: Mutex<Option<futures::channel::mpsc::Receiver<Forwarded>>>,
}

impl Control {
    /// Where this node's calls to the other nodes leave from (port 0:
    /// any): its peer address, unless it listens on every address. The
    /// replica fetcher's connections leave from it too.
    pub fn source_addr(&self) -> Option<std::net::SocketAddr> {
        let ip = self.inner.config.peer_addr.ip();
        (!ip.is_unspecified()).then(|| std::net::SocketAddr::new(ip, 0))
    }

    pub fn node_id(&self) -> i32 {
        self.inner.id as i32
    }

    /// The node leading the quorum (the controller), if one is known.
    pub fn controller(&self) -> Option<i32> {
        self.inner
            .raft
            .metrics()
            .borrow()
            .current_leader
            .map(|l| l as i32)
    }

    /// The quorum as this node sees it.
    pub fn metrics(&self) -> openraft::RaftMetrics<u64, BasicNode> {
        self.inner.raft.metrics().borrow().clone()
    }

    /// The newest catalog the quorum applied here.
    pub fn latest(&self) -> Arc<Catalog> {
        self.inner.catalogs.borrow().clone()
    }

    /// A receiver of each catalog the quorum applies here.
    pub fn catalogs(&self) -> watch::Receiver<Arc<Catalog>> {
        self.inner.catalogs.clone()
    }

    /// The requests other nodes forward here (once: shard 0 serves them).
    pub fn take_forwarded(&self) -> Option<futures::channel::mpsc::Receiver<Forwarded>> {
        self.inner.forwarded_rx.lock().expect("not poisoned").take()
    }

    /// Asks node `node`'s shards for `service` (the body and answer are
    /// the service's). Callable from a shard.
    pub async fn forward(
        &self,
        node: i32,
        service: Service,
        catalog_version: u64,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, KafkaError> {
        let body = String::from_utf8(body)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                serde_json::value::RawValue::from_string(text).map_err(|e| e.to_string())
            })
            .map_err(|why| {
                KafkaError::new(
                    ErrorCode::InvalidRequest,
                    format!("a request for node {node} is not JSON: {why}"),
                )
            })?;
        let call = peer::Call::Forward {
            service,
            catalog_version,
            body,
        };
        self.on_control(move |inner| async move { inner.forward(node, call).await })
            .await
    }

    /// `forward` with the request and its answer as JSON: `request`
    /// serialised, the answer parsed as a `T`.
    pub async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        node: i32,
        service: Service,
        catalog_version: u64,
        request: &impl serde::Serialize,
    ) -> Result<T, KafkaError> {
        let body = serde_json::to_vec(request).expect("requests serialise");
        let answer = self.forward(node, service, catalog_version, body).await?;
        serde_json::from_slice(&answer).map_err(|e| {
            KafkaError::new(
                ErrorCode::UnknownServerError,
                format!("node {node} answered a {service:?} request with no answer: {e}"),
            )
        })
    }

    /// Waits until this node's quorum has applied catalog `version` (or
    /// a newer one); false if the control plane stopped first.
    pub async fn applied(&self, version: u64) -> bool {
        self.inner.applied(version).await
    }

    /// The quorum as the controller sees it (asked of it if it is
    /// another node). Callable from a shard.
    pub async fn describe_quorum(&self) -> Result<QuorumView, KafkaError> {
        self.on_control(|inner| async move { inner.describe_quorum().await })
            .await
    }

    /// Proposes `cmd` to the controller (wherever it is) and waits until
    /// this node has applied it. Callable from a shard.
    pub async fn propose(&self, cmd: Command) -> Result<Applied, KafkaError> {
        self.on_control(|inner| async move { inner.propose(cmd).await })
            .await
    }

    /// Kafka's controlled shutdown, for a node about to stop: asks the
    /// quorum to fence this node and move its leaderships to other
    /// in-sync replicas, and waits until this node has applied that, at
    /// most `within`. Answers how many of its partitions are left without
    /// a leader (no other replica in sync). Blocking: for the signal
    /// thread, never a shard.
    pub fn shut_down(&self, within: Duration) -> Result<usize, String> {
        let me = self.inner.id as i32;
        // The last node of a cluster stopping (the others stopped before
        // it) has nobody to hand over to, and no quorum to ask.
        if !self.latest().live_nodes().any(|n| n.id != me) {
            return Err("no other node is live to take them".into());
        }
        let inner = self.inner.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        self.inner.rt.spawn(async move {
            let cmd = Command::ShutDown {
                node: inner.id as i32,
                incarnation: crate::config::incarnation(),
            };
            let answer = match tokio::time::timeout(within, inner.propose(cmd)).await {
                Ok(Ok(Applied::Version(_))) => {
                    let me = inner.id as i32;
                    let cat = inner.catalogs.borrow().clone();
                    Ok(cat
                        .replicated()
                        .filter(|(_, _, leader, r)| {
                            *leader == crate::catalog::NO_LEADER && r.replicas.contains(&me)
                        })
                        .count())
                }
                Ok(Ok(other)) => Err(format!("the quorum did not take it: {other:?}")),
                Ok(Err(e)) => Err(e.message),
                Err(_) => Err(format!("not applied within {} s", within.as_secs())),
            };
            let _ = tx.send(answer);
        });
        rx.recv_timeout(within + Duration::from_secs(1))
            .unwrap_or_else(|e| Err(format!("the control plane did not answer: {e}")))
    }

    /// Runs `work` on the control runtime and waits for its answer (from
    /// a shard: the oneshot's waker is woken from the control thread).
    async fn on_control<T, F, Fut>(&self, work: F) -> Result<T, KafkaError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, KafkaError>> + Send + 'static,
    {
        let inner = self.inner.clone();
        let (tx, rx) = futures::channel::oneshot::channel();
        self.inner.rt.spawn(async move {
            let _ = tx.send(work(inner).await);
        });
        rx.await
            .map_err(|_| KafkaError::new(ErrorCode::NotController, "the control plane stopped"))?
    }
}

impl Inner {
    /// Waits until this node's quorum has applied catalog `version` (or
    /// a newer one); false if the control plane stopped first.
    async fn applied(&self, version: u64) -> bool {
        let mut catalogs = self.catalogs.clone();
        loop {
            if catalogs.borrow_and_update().version >= version {
                return true;
            }
            if catalogs.changed().await.is_err() {
                return false;
            }
        }
    }

    /// Writes `cmd` through this node if it leads, else through the
    /// leader; then waits until this node has applied it.
    async fn propose(&self, cmd: Command) -> Result<Applied, KafkaError> {
        let began = Instant::now();
        let mut last_why = String::from("no controller is elected");
        // A carried proposal whose answer was lost may have been applied:
        // a later try of a change then meets its own effect.
        let mut maybe_applied = false;
        while began.elapsed() < PROPOSE_WITHIN {
            // A controller cut off from the others never commits: bounded.
            let left = PROPOSE_WITHIN.saturating_sub(began.elapsed());
            let written =
                match tokio::time::timeout(left, self.raft.client_write(cmd.clone())).await {
                    Ok(w) => w,
                    Err(_) => break,
                };
            let (applied, index) = match written {
                Ok(r) => (r.data, r.log_id.index),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    let Some(node) = f.leader_node else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let mut link = peer::Link::new(self.caller(), node.addr.clone());
                    match link
                        .call(peer::Call::Write(cmd.clone()), Duration::from_secs(5))
                        .await
                    {
                        Ok(peer::Reply::Written(Ok(r))) => r,
                        Ok(peer::Reply::Written(Err(refusal))) => {
                            last_why = refusal.why;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        Ok(other) => {
                            last_why = format!("the controller answered {other:?}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        Err(e) => {
                            last_why = e;
                            maybe_applied = true;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    }
                }
                Err(e) => {
                    return Err(KafkaError::new(
                        ErrorCode::NotController,
                        format!("the metadata quorum refused the change: {e}"),
                    ))
                }
            };
            let left = PROPOSE_WITHIN.saturating_sub(began.elapsed());
            self.raft
                .wait(Some(left.max(Duration::from_secs(1))))
                .applied_index_at_least(Some(index), "a proposal applied here")
                .await
                .map_err(|e| {
                    KafkaError::new(
                        ErrorCode::RequestTimedOut,
                        format!("the change is committed but not yet applied here: {e}"),
                    )
                })?;
            if let (Applied::Conflict { .. }, true) = (&applied, maybe_applied) {
                if let Some(version) = self.already_applied(&cmd) {
                    return Ok(Applied::Version(version));
                }
            }
            return Ok(applied);
        }
        Err(KafkaError::new(
            ErrorCode::NotController,
            format!(
                "no controller took the change within {} s: {last_why}",
                PROPOSE_WITHIN.as_secs()
            ),
        ))
    }

    async fn forward(&self, node: i32, call: peer::Call) -> Result<Vec<u8>, KafkaError> {
        let unreachable = |why: String| {
            KafkaError::new(
                ErrorCode::LeaderNotAvailable,
                format!("node {node}, which serves this, cannot be reached: {why}"),
            )
        };
        let addr = self
            .member_addr(node as u64)
            .ok_or_else(|| unreachable("it is not a member".into()))?;
        let mut link = peer::Link::new(self.caller(), addr);
        match link.call(call, Duration::from_secs(30)).await {
            Ok(peer::Reply::Forwarded(Ok(answer))) => Ok(answer.get().as_bytes().to_vec()),
            Ok(peer::Reply::Forwarded(Err(why))) => Err(KafkaError::new(
                ErrorCode::UnknownServerError,
                format!("node {node} could not answer: {why}"),
            )),
            Ok(other) => Err(unreachable(format!("it answered {other:?}"))),
            Err(e) => Err(unreachable(e)),
        }
    }

    /// Hands a forwarded request to this node's shards and waits for
    /// their answer.
    async fn forwarded(
        &self,
        service: Service,
        catalog_version: u64,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        use futures::SinkExt;
        let (answer, rx) = futures::channel::oneshot::channel();
        let mut queue = self.forwarded.clone();
        queue
            .send(Forwarded {
                service,
                catalog_version,
                body,
                answer,
            })
            .await
            .map_err(|_| "this node is stopping".to_string())?;
        rx.await
            .map_err(|_| "this node's shards did not answer".to_string())?
    }

    async fn describe_quorum(&self) -> Result<QuorumView, KafkaError> {
        let refusal = match self.quorum_here() {
            Ok(v) => return Ok(v),
            Err(r) => r,
        };
        let unknown = |why: String| KafkaError::new(ErrorCode::NotController, why);
        let Some((_, addr)) = refusal.leader else {
            return Err(unknown("no controller is elected".into()));
        };
        let mut link = peer::Link::new(self.caller(), addr);
        match link.call(peer::Call::Quorum, Duration::from_secs(5)).await {
            Ok(peer::Reply::Quorum(Ok(v))) => Ok(v),
            Ok(peer::Reply::Quorum(Err(r))) => Err(unknown(r.why)),
            Ok(other) => Err(unknown(format!("the controller answered {other:?}"))),
            Err(e) => Err(unknown(e)),
        }
    }

    /// Where a member of the quorum listens for the others.
    fn member_addr(&self, node: u64) -> Option<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .nodes()
            .find(|(id, _)| **id == node)
            .map(|(_, n)| n.addr.clone())
    }

    fn caller(&self) -> peer::Caller {
        peer::Caller::new(self.id, self.config.peer_addr)
    }

    /// The quorum, if this node leads it.
    fn quorum_here(&self) -> Result<QuorumView, peer::Refusal> {
        let m = self.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Err(self.not_controller());
        }
        let last = m.last_log_index.map_or(0, |i| i as i64 + 1);
        let matched = m.replication.unwrap_or_default();
        let view = |id: u64| {
            let log_end = match id == self.id {
                true => last,
                false => matched
                    .get(&id)
                    .copied()
                    .flatten()
                    .map_or(-1, |l| l.index as i64 + 1),
            };
            ReplicaView {
                id: id as i32,
                log_end,
                caught_up: log_end == last,
            }
        };
        let membership = m.membership_config.membership();
        let voters: Vec<u64> = membership.voter_ids().collect();
        Ok(QuorumView {
            leader: self.id as i32,
            epoch: m.current_term as i32,
            high_watermark: m.last_applied.map_or(0, |l| l.index as i64 + 1),
            voters: voters.iter().map(|id| view(*id)).collect(),
            observers: membership
                .learner_ids()
                .filter(|id| !voters.contains(id))
                .map(view)
                .collect(),
        })
    }

    /// The catalog version holding exactly what change `cmd` makes, if
    /// the applied catalog does (a change applied once already).
    fn already_applied(&self, cmd: &Command) -> Option<u64> {
        let Command::Change { catalog, .. } = cmd else {
            return None;
        };
        let now = self.catalogs.borrow().clone();
        let same = now.topics == catalog.topics
            && now.users == catalog.users
            && now.acls == catalog.acls
            && now.group_nodes == catalog.group_nodes;
        same.then_some(now.version)
    }

    /// Writes `cmd` if this node is the controller (a proposal carried
    /// here from another node).
    async fn write_here(&self, cmd: Command) -> Result<(Applied, u64), peer::Refusal> {
        let written = tokio::time::timeout(PROPOSE_WITHIN, self.raft.client_write(cmd)).await;
        let Ok(written) = written else {
            return Err(peer::Refusal {
                why: format!(
                    "not committed within {} s: this controller may be cut off from the others",
                    PROPOSE_WITHIN.as_secs()
                ),
                leader: None,
            });
        };
        match written {
            Ok(r) => Ok((r.data, r.log_id.index)),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(peer::Refusal {
                why: "this node is not the controller".into(),
                leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)),
            }),
            Err(e) => Err(peer::Refusal {
                why: e.to_string(),
                leader: None,
            }),
        }
    }

    /// Whether `node` may make Raft calls here: a member of the quorum
    /// (voter or learner) or one of the configured voters; anyone while
    /// this node joins and has no quorum yet.
    fn is_member(&self, node: u64) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        let mut members = metrics
            .membership_config
            .nodes()
            .map(|(id, _)| *id)
            .peekable();
        // A node that joins is in no quorum until the controller's first
        // entries arrive: it takes them from whoever leads.
        let joining = self.config.voters.is_empty() && members.peek().is_none();
        joining || self.config.voters.contains_key(&node) || members.any(|id| id == node)
    }
}

/// Starts the control plane on a thread of its own: the Raft log, state
/// machine and network, the peer listener, and (on the first voter of a
/// new cluster) the quorum's first membership and the seed catalog.
/// `local` is the catalog this node had (a single node's, seeding a new
/// cluster); `me` is how this node registers.
pub fn start(
    config: ClusterConfig,
    me: ClusterNode,
    local: Arc<Catalog>,
    data_dir: &std::path::Path,
) -> Result<Control, String> {
    let dir = data_dir.join("raft");
    let first_voter = config.voters.keys().next().copied();
    let new_to_clusters = !dir.join("log").exists() && !dir.join("snapshot.json").exists();
    if new_to_clusters
        && local.nodes.is_empty()
        && !local.topics.is_empty()
        && first_voter != Some(config.node_id as u64)
    {
        // The cluster's catalog would not name these topics, and
        // installing it would drop them: refuse rather than lose them.
        return Err(format!(
            "{} holds a single node's {} topic(s): only the first voter (node {}) brings its data into a new cluster; start node {} with an empty data directory",
            data_dir.display(),
            local.topics.len(),
            first_voter.map_or_else(|| "in --voters".into(), |v| v.to_string()),
            config.node_id
        ));
    }
    // A single node's producer ids carry over: the cluster gives none
    // below the last block it recorded.
    let mut local = (*local).clone();
    local.next_producer_id = crate::producer_ids::ProducerIds::load(data_dir)?.recorded_end();
    let local = Arc::new(local);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log = log_store::LogStore::open(&dir)?;
    let (publish, catalogs) = watch::channel(Arc::new(Catalog::default()));
    let publish = Arc::new(publish);
    let machine = state_machine::CatalogMachine::open(&dir, publish.clone())?;
    publish.send_replace(machine.catalog());
    let listener = std::net::TcpListener::bind(config.peer_addr).map_err(|e| {
        format!(
            "cannot listen for the other nodes on {}: {e}",
            config.peer_addr
        )
    })?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let (forwarded, forwarded_rx) = futures::channel::mpsc::channel(FORWARDED_QUEUE);
    let (tx, rx) = std::sync::mpsc::channel::<Result<Control, String>>();
    std::thread::Builder::new()
        .name("weir-control".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot start the control runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let raft_config = openraft::Config {
                    cluster_name: "weir".into(),
                    // openraft gives an append one heartbeat to be
                    // answered: room for a follower's fsync on a busy
                    // machine. A new controller within a few seconds.
                    heartbeat_interval: 250,
                    election_timeout_min: 1000,
                    election_timeout_max: 2000,
                    // Each entry may hold a whole catalog: few per append.
                    max_payload_entries: 16,
                    install_snapshot_timeout: 30_000,
                    snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(1000),
                    max_in_snapshot_log_to_keep: 100,
                    ..Default::default()
                };
                let raft_config = match raft_config.validate() {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        let _ = tx.send(Err(format!("Raft settings: {e}")));
                        return;
                    }
                };
                let id = config.node_id as u64;
                let raft = match Raft::new(
                    id,
                    raft_config,
                    network::Network {
                        from: peer::Caller::new(id, config.peer_addr),
                    },
                    log,
                    machine,
                )
                .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(format!("cannot start the metadata quorum: {e}")));
                        return;
                    }
                };
                let inner = Arc::new(Inner {
                    rt: tokio::runtime::Handle::current(),
                    raft,
                    id,
                    config,
                    catalogs,
                    heard: Mutex::new(BTreeMap::new()),
                    forwarded,
                    forwarded_rx: Mutex::new(Some(forwarded_rx)),
                });
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = tx.send(Ok(Control {
                    inner: inner.clone(),
                }));
                tokio::spawn(liveness::run(inner.clone(), me, local));
                server::serve(inner, listener).await;
            });
        })
        .map_err(|e| format!("cannot start the control thread: {e}"))?;
    rx.recv()
        .map_err(|_| "the control thread ended before it started".to_string())?
}
