//! Node settings, fixed at start-up. Every queue, cache and buffer has its
//! limit here.

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
    /// The largest Kafka request frame accepted; larger closes the connection.
    pub max_request_bytes: usize,
    /// Requests one connection may have in flight before reading pauses.
    pub max_in_flight_per_connection: usize,
    /// Bytes of recent batches each shard keeps for tail fetches.
    pub cache_bytes_per_shard: usize,
    /// Capacity of each cross-shard channel (messages).
    pub mesh_capacity: usize,
    /// How often each shard applies retention.
    pub retention_check_interval: Duration,
    /// The node id clients see.
    pub node_id: i32,
    /// How long an idle shard spins before it parks. Parking costs a
    /// membarrier (an IPI to every core) and a wake-up; a short spin avoids
    /// both under load, but on a machine shared with clients it takes their
    /// CPU (measured worse at 20k records/s on 2 cores), so it is off.
    pub spin_before_park: Duration,
    /// Idle idempotent producers are forgotten after this long (Kafka's
    /// `transactional.id.expiration.ms`/`producer.id.expiration.ms`: a day).
    pub producer_expiry: Duration,
    /// Consumer group settings (session timeout bounds, initial delay).
    pub groups: crate::groups::group::GroupConfig,
}

impl NodeConfig {
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
            max_request_bytes: 100 << 20,
            max_in_flight_per_connection: 64,
            cache_bytes_per_shard: 256 << 20,
            mesh_capacity: 1024,
            retention_check_interval: Duration::from_secs(30),
            node_id: 0,
            producer_expiry: Duration::from_secs(24 * 3600),
            spin_before_park: Duration::ZERO,
            groups: Default::default(),
        }
    }
}
