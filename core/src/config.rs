//! Node settings, fixed at start-up. Every queue, cache and buffer has its
//! limit here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub data_dir: PathBuf,
    /// Where Kafka clients connect (every shard listens here, SO_REUSEPORT).
    pub kafka_addr: SocketAddr,
    /// The address Metadata tells clients to connect to.
    pub advertised_host: String,
    pub advertised_port: u16,
    /// HTTP: `/health`, `/stats` and `POST /sql`.
    pub http_addr: SocketAddr,
    /// Number of shards (one glommio executor each, pinned).
    pub shards: usize,
    /// Create a topic the first time Metadata names it.
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic, or a CreateTopics with -1.
    pub default_partitions: i32,
    /// This node's own defaults of topic configs (`--default-retention-ms`
    /// and the like, Kafka's `server.properties`), by topic config name,
    /// each value checked: what a topic that does not set a config has,
    /// unless a default set at run time overrides it
    /// (`catalog::topic_defaults`).
    pub topic_defaults: BTreeMap<String, String>,
    /// The largest Kafka request frame accepted; larger closes the connection.
    pub max_request_bytes: usize,
    /// The most a fetch response holds (beyond its first batch), whatever
    /// the request asks: Kafka's broker `fetch.max.bytes`. It also bounds
    /// the memory one fetch's reads take.
    pub fetch_max_bytes: usize,
    /// Kafka connections the node serves at once (split evenly between
    /// shards); past it, new clients wait in the listen backlog.
    pub max_connections: usize,
    /// Requests one connection may have in flight before reading pauses.
    pub max_in_flight_per_connection: usize,
    /// Bytes of request frames each shard holds at once, from the moment
    /// a frame's length arrives until its request is answered (Kafka's
    /// `queued.max.request.bytes`); a frame that does not fit waits unread.
    /// At least `max_request_bytes`.
    pub request_memory_bytes: usize,
    /// Bytes each shard's partitions let fetches hold at once, from the
    /// read until the last byte is sent; a read takes no more than is free
    /// (but at least its first batch), and a fetch waiting for data holds
    /// none. At least `fetch_max_bytes`.
    pub answer_memory_bytes: usize,
    /// How long a request's bytes may take to arrive (waiting for request
    /// memory included) and an answer's to be taken by the client before
    /// the node closes the connection (librdkafka's `socket.timeout.ms`).
    pub socket_timeout: Duration,
    /// Bytes of recent batches each shard keeps for tail fetches.
    pub cache_bytes_per_shard: usize,
    /// Bytes of rows one SELECT may gather from a table (an estimate: text
    /// lengths plus a fixed cost per value), split evenly between its
    /// partitions; past it the statement fails saying so.
    pub sql_max_scan_bytes: usize,
    /// Capacity of each cross-shard channel (messages).
    pub mesh_capacity: usize,
    /// Flushes a partition keeps in flight: their durable writes may go to
    /// the device together (`weir_storage::log`'s flush).
    pub flushes_in_flight: usize,
    /// How often each shard applies retention.
    pub retention_check_interval: Duration,
    /// How often each shard looks for compacted partitions due a cleaning
    /// pass (Kafka's `log.cleaner.backoff.ms`).
    pub compaction_check_interval: Duration,
    /// Bytes of keys a cleaning pass maps at most (one pass at a time per
    /// shard; a larger dirty section is cleaned over several passes).
    pub compaction_map_bytes: usize,
    /// The node id clients see (the one broker, unless `shard_port_base`).
    pub node_id: i32,
    /// `--shard-ports BASE`: shard `i` also listens on port `BASE + i` and
    /// Metadata presents every shard as a broker of its own (node id `i`,
    /// advertised at `advertised_host:BASE + i`) leading the partitions it
    /// owns, and FindCoordinator names the shard that owns the group. Clients
    /// then send each request to the core that serves it, with no hop
    /// between shards. `None`: the node is one broker on `kafka_addr`.
    pub shard_port_base: Option<u16>,
    /// How long an idle shard spins before it parks. Parking costs a
    /// membarrier (an IPI to every core) and a wake-up; a short spin avoids
    /// both under load, but on a machine shared with clients it takes their
    /// CPU (measured worse at 20k records/s on 2 cores), so it is off.
    pub spin_before_park: Duration,
    /// Idle idempotent producers are forgotten after this long (Kafka's
    /// `transactional.id.expiration.ms`/`producer.id.expiration.ms`: a day).
    pub producer_expiry: Duration,
    /// A follower behind its leader this long leaves the ISR (Kafka's
    /// `replica.lag.time.max.ms`).
    pub replica_lag_time_max: Duration,
    /// Bytes per second copied for the replicas a reassignment adds here,
    /// unless set at run time (`Catalog::move_throttle`); 0: unbounded.
    pub replication_throttle_bytes: u64,
    /// Each shard makes its partitions' flushes durable with one journal
    /// write for all of them (`weir_storage::journal`); off (the
    /// default), each flush is its own O_DSYNC write.
    pub journal: bool,
    /// Where the shards write down their slow work (`crate::timeline`);
    /// `None`: nowhere.
    pub timeline: Option<std::path::PathBuf>,
    /// Consumer group settings (session timeout bounds, initial delay).
    pub groups: crate::groups::group::GroupConfig,
    /// The role tokens (`auth`); none set and no user: sign-in is off.
    pub role_tokens: crate::auth::RoleTokens,
    /// SASL/OAUTHBEARER's token checker (`--oauth-jwks`); `None`: the
    /// mechanism is not offered.
    pub oauth: Option<std::sync::Arc<crate::auth::oauth::OAuth>>,
    /// The longest a SASL session lasts before the client must sign in
    /// again on its connection (Kafka's `connections.max.reauth.ms`,
    /// KIP-368); zero: until its credential expires (an OAUTHBEARER
    /// token's `exp`), or for ever for passwords.
    pub max_reauth: Duration,
    /// How this node signs in to the others (`None`: no admin token, it
    /// does not sign in).
    pub node_sign_in: Option<crate::auth::NodeSignIn>,
    /// The CPUs shards run on.
    pub cpus: Cpus,
    /// This node's place in a cluster; `None`: a single node.
    pub cluster: Option<crate::cluster::ClusterConfig>,
}

/// Where shards run (`--cpus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cpus {
    /// Shard `i` pinned to CPU `i` (modulo the CPUs there are).
    EachShardItsOwn,
    /// Shard `i` pinned to the `i`-th CPU listed (modulo the list).
    List(Vec<usize>),
    /// Not pinned: the kernel places them (several nodes sharing CPUs).
    Unpinned,
}

impl Cpus {
    /// Parses `--cpus`: `none`, or CPU numbers and ranges (`0,2-3`).
    pub fn parse(s: &str) -> Result<Cpus, String> {
        if s.trim() == "none" {
            return Ok(Cpus::Unpinned);
        }
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let bad = || {
                format!(
                    "--cpus {s:?}: {part:?} is not a CPU number or range (say `none` for unpinned)"
                )
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (usize, usize) =
                        (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                    if a > b {
                        return Err(bad());
                    }
                    out.extend(a..=b);
                }
                None => out.push(part.parse().map_err(|_| bad())?),
            }
        }
        Ok(Cpus::List(out))
    }

    /// Where shard `id` runs.
    pub fn placement(&self, id: usize) -> glommio::Placement {
        match self {
            Cpus::EachShardItsOwn => {
                let n = std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1);
                glommio::Placement::Fixed(id % n)
            }
            Cpus::List(l) => glommio::Placement::Fixed(l[id % l.len()]),
            Cpus::Unpinned => glommio::Placement::Unbound,
        }
    }
}

/// One broker as clients see it: a node id and where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

/// This process's incarnation: chosen once per start (the clock's
/// nanoseconds and the process id), so that a restarted node registers
/// as new and the quorum fences it until it is heard (leaders it had move
/// in a new epoch; it leaves the ISRs until its fetches catch up).
pub fn incarnation() -> u64 {
    static INCARNATION: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *INCARNATION.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (nanos ^ ((std::process::id() as u64) << 32)).max(1)
    })
}

impl NodeConfig {
    /// How this node registers with its cluster.
    pub fn cluster_node(&self) -> crate::catalog::ClusterNode {
        let c = self.cluster.as_ref();
        crate::catalog::ClusterNode {
            id: self.node_id,
            kafka_host: self.advertised_host.clone(),
            kafka_port: self.advertised_port,
            http: self.http_addr.to_string(),
            peer: c.map(|c| c.peer_advertised.clone()).unwrap_or_default(),
            rack: c.and_then(|c| c.rack.clone()),
            shards: self.shards,
            shard_port_base: self.shard_port_base,
            fenced: false,
            incarnation: incarnation(),
            stopping: false,
        }
    }

    /// Every broker clients see: this node, or each shard with
    /// `shard_port_base`.
    pub fn brokers(&self) -> Vec<Broker> {
        match self.shard_port_base {
            None => vec![self.broker_of(0)],
            Some(_) => (0..self.shards).map(|s| self.broker_of(s)).collect(),
        }
    }

    /// The broker that serves what `shard` owns (partitions, groups).
    pub fn broker_of(&self, shard: usize) -> Broker {
        match self.shard_port_base {
            None => Broker {
                id: self.node_id,
                host: self.advertised_host.clone(),
                port: self.advertised_port,
                rack: None,
            },
            Some(base) => Broker {
                id: shard as i32,
                host: self.advertised_host.clone(),
                port: base + shard as u16,
                rack: None,
            },
        }
    }

    /// Each shard's share of `max_connections` (at least one).
    pub fn connections_per_shard(&self) -> usize {
        self.max_connections.div_ceil(self.shards.max(1)).max(1)
    }

    /// The address shard `shard` listens on besides `kafka_addr`, if any.
    pub fn shard_listen_addr(&self, shard: usize) -> Option<SocketAddr> {
        self.shard_port_base
            .map(|base| SocketAddr::new(self.kafka_addr.ip(), base + shard as u16))
    }

    pub fn new(data_dir: PathBuf, kafka_addr: SocketAddr, http_addr: SocketAddr) -> NodeConfig {
        NodeConfig {
            data_dir,
            kafka_addr,
            advertised_host: kafka_addr.ip().to_string(),
            advertised_port: kafka_addr.port(),
            http_addr,
            shards: 1,
            auto_create_topics: false,
            default_partitions: 1,
            topic_defaults: BTreeMap::new(),
            max_request_bytes: 100 << 20,
            fetch_max_bytes: 55 << 20,
            max_connections: 10_000,
            max_in_flight_per_connection: 64,
            request_memory_bytes: 256 << 20,
            answer_memory_bytes: 128 << 20,
            socket_timeout: Duration::from_secs(60),
            cache_bytes_per_shard: 64 << 20,
            sql_max_scan_bytes: 1 << 30,
            mesh_capacity: 1024,
            flushes_in_flight: 2,
            retention_check_interval: Duration::from_secs(30),
            compaction_check_interval: Duration::from_secs(15),
            compaction_map_bytes: 64 << 20,
            node_id: 0,
            shard_port_base: None,
            producer_expiry: Duration::from_secs(24 * 3600),
            replica_lag_time_max: Duration::from_secs(30),
            replication_throttle_bytes: 100 << 20,
            journal: false,
            timeline: None,
            spin_before_park: Duration::ZERO,
            groups: Default::default(),
            role_tokens: Default::default(),
            oauth: None,
            max_reauth: Duration::ZERO,
            node_sign_in: None,
            cpus: Cpus::EachShardItsOwn,
            cluster: None,
        }
    }
}
