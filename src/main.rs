//! The `weir` binary: `weir serve DATA_DIR [options]` runs a node;
//! `weir sql "SQL"` runs statements on one.

mod allocator;
mod config_file;
mod panics;
mod sql_client;
mod topic_default_flags;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use weir_core::NodeConfig;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A thread-per-core storage node that speaks Kafka"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node.
    Serve(Box<ServeArgs>),
    /// Run SQL statements on a node and print the result.
    Sql(SqlArgs),
}

#[derive(Parser)]
struct SqlArgs {
    /// The node's HTTP address (its `--addr`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Sign in with this token (a role's or a user's) when sign-in is on.
    #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Speak HTTPS, trusting the authority whose PEM certificate is in
    /// FILE (a node with --tls-cert).
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// Statements, separated by `;`: the last one's rows are printed.
    sql: String,
}

#[derive(Parser)]
struct ServeArgs {
    /// Directory for the catalog and partition logs (created if missing).
    #[arg(env = "WEIR_DATA_DIR")]
    data_dir: PathBuf,
    /// Address Kafka clients connect to.
    #[arg(env = "WEIR_KAFKA", long, default_value = "127.0.0.1:9092")]
    kafka: String,
    /// HTTP address (GET /health).
    #[arg(env = "WEIR_ADDR", long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// HOST:PORT clients are told to connect to. Default: the host of
    /// --addr and the port of --kafka.
    #[arg(env = "WEIR_KAFKA_ADVERTISE", long)]
    kafka_advertise: Option<String>,
    /// Shards (one pinned executor each). Default: the machine's cores.
    #[arg(env = "WEIR_CORES", long)]
    cores: Option<usize>,
    /// Shard i also listens for Kafka on port BASE+i (on the host of
    /// --kafka) and clients see every shard as a broker of its own (node
    /// id i, advertised on the --kafka-advertise host, port BASE+i) leading
    /// the partitions and groups it owns, so each request goes straight to
    /// the core that serves it. Clients must reach all these ports. Default:
    /// the node is one broker and requests hop between shards inside.
    #[arg(env = "WEIR_SHARD_PORTS", long, value_name = "BASE")]
    shard_ports: Option<u16>,
    /// The CPUs shards are pinned to, in order (`0,2-3`), or `none`
    /// (unpinned: several nodes sharing a machine's CPUs). Default: shard
    /// i on CPU i.
    #[arg(env = "WEIR_CPUS", long, value_name = "LIST|none")]
    cpus: Option<String>,
    /// This node's id: the broker id clients see, and its id in a cluster
    /// (needed with --voters or --join).
    #[arg(env = "WEIR_NODE_ID", long)]
    node_id: Option<i32>,
    /// The cluster's metadata quorum: every voter's id and peer address
    /// (`1@10.0.0.1:9093,2@10.0.0.2:9093,...`). Without it or --join the
    /// node is a single node.
    #[arg(
        env = "WEIR_VOTERS",
        long,
        value_name = "ID@HOST:PORT,...",
        conflicts_with = "join"
    )]
    voters: Option<String>,
    /// Join a cluster through a node's peer address, as a node that is
    /// not a voter (it follows the metadata quorum).
    #[arg(
        env = "WEIR_JOIN",
        long,
        value_name = "HOST:PORT",
        requires = "peer_addr"
    )]
    join: Option<String>,
    /// Where this node listens for the other nodes of its cluster
    /// (metadata, forwarded calls). Default: its own entry in --voters.
    #[arg(env = "WEIR_PEER_ADDR", long, value_name = "HOST:PORT")]
    peer_addr: Option<String>,
    /// This node's rack (clients see it in Metadata).
    #[arg(env = "WEIR_RACK", long)]
    rack: Option<String>,
    /// A node of a cluster not heard by the controller for this long is
    /// fenced: Metadata stops naming it (Kafka's broker.session.timeout.ms).
    #[arg(env = "WEIR_NODE_SESSION_TIMEOUT_MS", long, default_value_t = 1_500)]
    node_session_timeout_ms: u64,
    /// How often the controller gives leaderships back to preferred
    /// replicas that are live and in sync again (a node back from a
    /// restart); 0: never by itself (Kafka's
    /// auto.leader.rebalance.enable and
    /// leader.imbalance.check.interval.seconds).
    #[arg(
        env = "WEIR_LEADER_BALANCE_INTERVAL_MS",
        long,
        default_value_t = 30_000
    )]
    leader_balance_interval_ms: u64,
    /// How often the controller moves replicas from the nodes keeping the
    /// most to those keeping the fewest, a few partitions at a time (a
    /// node added fills up by itself, as Redpanda's partition
    /// autobalancing does); 0: never by itself (moves are then
    /// kafka-reassign-partitions.sh's).
    #[arg(env = "WEIR_REPLICA_BALANCE_INTERVAL_MS", long, default_value_t = 0)]
    replica_balance_interval_ms: u64,
    /// A follower that has not caught up with its leader for this long
    /// leaves the partition's in-sync replicas (Kafka's
    /// replica.lag.time.max.ms).
    #[arg(env = "WEIR_REPLICA_LAG_TIME_MAX_MS", long, default_value_t = 30_000)]
    replica_lag_time_max_ms: u64,
    /// Bytes per second this node copies for the replicas a reassignment
    /// adds to it, so a move does not starve produce (Kafka's
    /// follower.replication.throttled.rate, which
    /// `kafka-reassign-partitions.sh --throttle` sets at run time and
    /// which then takes precedence); 0: unbounded.
    #[arg(
        env = "WEIR_REPLICATION_THROTTLE_BYTES",
        long,
        default_value_t = 100 << 20
    )]
    replication_throttle_bytes: u64,
    /// Make a shard's flushes durable with one journal write for all its
    /// partitions (group commit across partitions) instead of each
    /// partition's own O_DSYNC write; segments are then written later in
    /// large pieces. Off by default: on this project's 2-core VM, whose
    /// device flush is cheap, it measured even (docs/durability.md).
    #[arg(env = "WEIR_JOURNAL", long)]
    journal: bool,
    /// Write each piece of a shard's work that took 0.5 ms or more (a
    /// flush, a roll, a produce request, the shard's own timer firing
    /// late) to this file with its wall-clock time, to lay beside a
    /// benchmark's slow records (`weir-bench e2e --timeline`,
    /// `bench/tails.py`). Costs a 1 ms timer per shard.
    #[arg(env = "WEIR_TIMELINE", long, value_name = "FILE")]
    timeline: Option<std::path::PathBuf>,
    /// Create a topic the first time a client asks for it in Metadata.
    #[arg(env = "WEIR_AUTO_CREATE_TOPICS", long)]
    auto_create_topics: bool,
    /// Partitions of an auto-created topic.
    #[arg(env = "WEIR_DEFAULT_PARTITIONS", long, default_value_t = 1)]
    default_partitions: i32,
    #[command(flatten)]
    topic_defaults: topic_default_flags::TopicDefaultFlags,
    /// Kafka connections served at once, split evenly between shards
    /// (Kafka's max.connections); past it new clients wait until one closes.
    #[arg(env = "WEIR_MAX_CONNECTIONS", long, default_value_t = 10_000)]
    max_connections: usize,
    /// The largest request frame accepted, in bytes.
    #[arg(env = "WEIR_MAX_REQUEST_BYTES", long, default_value_t = 100 << 20)]
    max_request_bytes: usize,
    /// The most a fetch response holds beyond its first batch, whatever the
    /// request asks (Kafka's fetch.max.bytes).
    #[arg(env = "WEIR_FETCH_MAX_BYTES", long, default_value_t = 55 << 20)]
    fetch_max_bytes: usize,
    /// Bytes of request frames each shard holds at once, from a frame's
    /// length until its answer (Kafka's queued.max.request.bytes); a frame
    /// that does not fit waits unread. At least --max-request-bytes.
    #[arg(env = "WEIR_REQUEST_MEMORY_BYTES", long, default_value_t = 256 << 20)]
    request_memory_bytes: usize,
    /// Bytes each shard's partitions let fetches hold at once, from the read
    /// until sent; a read takes no more than is free (at least its first
    /// batch). At least --fetch-max-bytes.
    #[arg(env = "WEIR_ANSWER_MEMORY_BYTES", long, default_value_t = 128 << 20)]
    answer_memory_bytes: usize,
    /// How long a request's bytes may take to arrive (waiting for request
    /// memory included), and an answer's to be taken, before the node
    /// closes the connection.
    #[arg(
        env = "WEIR_SOCKET_TIMEOUT_MS",
        long,
        default_value_t = 60_000,
        value_name = "MS"
    )]
    socket_timeout_ms: u64,
    /// Bytes of recent batches each shard caches for tail reads.
    #[arg(env = "WEIR_CACHE_BYTES_PER_SHARD", long, default_value_t = 64 << 20)]
    cache_bytes_per_shard: usize,
    /// Give freed memory back to the OS this many milliseconds after it is
    /// freed (by default it is kept for reuse: re-faulting it cost 15–30%
    /// of the node's CPU under produce load).
    #[arg(env = "WEIR_RELEASE_FREED_MEMORY_MS", long, value_name = "MS")]
    release_freed_memory_ms: Option<u64>,
    /// Let the kernel back the node's memory with transparent huge pages
    /// where the system enables them. Off by default: a shard's first
    /// touch of each 2 MiB page stops it while the kernel clears the page,
    /// 30–80 ms on this project's VM (`allocator::huge_pages`).
    #[arg(env = "WEIR_TRANSPARENT_HUGE_PAGES", long)]
    transparent_huge_pages: bool,
    /// Bytes of rows one SQL SELECT may gather from a table (estimated),
    /// split between its partitions; past it the statement is refused.
    #[arg(env = "WEIR_SQL_MAX_SCAN_BYTES", long, default_value_t = 1 << 30)]
    sql_max_scan_bytes: usize,
    /// Microseconds an idle shard spins before parking (0: park at once).
    /// Spinning saves the wake-up cost under load but takes CPU from
    /// clients on the same machine; measured worse on 2 shared cores.
    #[arg(env = "WEIR_SPIN_BEFORE_PARK_US", long, default_value_t = 0)]
    spin_before_park_us: u64,
    /// Flushes each partition keeps in flight: a batch that arrives during
    /// a flush is written at once, beside it (1: each flush waits for the
    /// previous one).
    #[arg(env = "WEIR_FLUSHES_IN_FLIGHT", long, default_value_t = 2)]
    flushes_in_flight: usize,
    /// How often retention runs, in milliseconds.
    #[arg(env = "WEIR_RETENTION_CHECK_MS", long, default_value_t = 30_000)]
    retention_check_ms: u64,
    /// How often each shard looks for compacted partitions due a cleaning
    /// pass, in milliseconds (Kafka's log.cleaner.backoff.ms).
    #[arg(env = "WEIR_COMPACTION_CHECK_MS", long, default_value_t = 15_000)]
    compaction_check_ms: u64,
    /// Bytes of keys one cleaning pass maps at most, per shard (Kafka's
    /// log.cleaner.dedupe.buffer.size); a larger dirty section is cleaned
    /// over several passes.
    #[arg(env = "WEIR_COMPACTION_MAP_BYTES", long, default_value_t = 64 << 20)]
    compaction_map_bytes: usize,
    /// The shortest session timeout a group member may ask for (Kafka's
    /// group.min.session.timeout.ms).
    #[arg(
        env = "WEIR_GROUP_MIN_SESSION_TIMEOUT_MS",
        long,
        default_value_t = 6_000
    )]
    group_min_session_timeout_ms: u64,
    /// The longest session timeout a group member may ask for (Kafka's
    /// group.max.session.timeout.ms).
    #[arg(
        env = "WEIR_GROUP_MAX_SESSION_TIMEOUT_MS",
        long,
        default_value_t = 1_800_000
    )]
    group_max_session_timeout_ms: u64,
    /// How long the first rebalance of an empty group waits for more
    /// members (Kafka's group.initial.rebalance.delay.ms).
    #[arg(
        env = "WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS",
        long,
        default_value_t = 3_000
    )]
    group_initial_rebalance_delay_ms: u64,
    /// How often a member of a consumer group of the new protocol
    /// (KIP-848, `group.protocol=consumer`) heartbeats (Kafka's
    /// group.consumer.heartbeat.interval.ms).
    #[arg(
        env = "WEIR_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS",
        long,
        default_value_t = 5_000
    )]
    group_consumer_heartbeat_interval_ms: u64,
    /// How long such a member may stay silent before it is removed
    /// (Kafka's group.consumer.session.timeout.ms).
    #[arg(
        env = "WEIR_GROUP_CONSUMER_SESSION_TIMEOUT_MS",
        long,
        default_value_t = 45_000
    )]
    group_consumer_session_timeout_ms: u64,
    /// A file holding the admin role's token (else WEIR_ADMIN_TOKEN). A
    /// client signs in with SASL/PLAIN as `admin` and this token; setting
    /// any role token turns sign-in on. The nodes of a cluster sign in to
    /// each other with it too: give every node the same.
    #[arg(env = "WEIR_ADMIN_TOKEN_FILE", long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// SASL/OAUTHBEARER: the identity provider's JSON Web Key set, a path,
    /// file:// or https:// URL (Kafka's
    /// sasl.oauthbearer.jwks.endpoint.url). Clients sign in with JWTs it
    /// signed; setting it turns sign-in on.
    #[arg(env = "WEIR_OAUTH_JWKS", long, value_name = "PATH|URL")]
    oauth_jwks: Option<String>,
    /// The issuer (`iss`) a token must name (Kafka's
    /// sasl.oauthbearer.expected.issuer).
    #[arg(env = "WEIR_OAUTH_ISSUER", long, requires = "oauth_jwks")]
    oauth_issuer: Option<String>,
    /// Audiences a token's `aud` must name one of, comma-separated
    /// (Kafka's sasl.oauthbearer.expected.audience).
    #[arg(
        env = "WEIR_OAUTH_AUDIENCE",
        long,
        value_delimiter = ',',
        requires = "oauth_jwks"
    )]
    oauth_audience: Vec<String>,
    /// The claim a token's principal is taken from (Kafka's
    /// sasl.oauthbearer.sub.claim.name).
    #[arg(env = "WEIR_OAUTH_PRINCIPAL_CLAIM", long, default_value = "sub")]
    oauth_principal_claim: String,
    /// Seconds of leeway on a token's exp and nbf (Kafka's
    /// sasl.oauthbearer.clock.skew.seconds).
    #[arg(env = "WEIR_OAUTH_CLOCK_SKEW_S", long, default_value_t = 30)]
    oauth_clock_skew_s: u64,
    /// The longest a client's SASL session lasts before it must sign in
    /// again on its connection (Kafka's connections.max.reauth.ms,
    /// KIP-368); 0: until its token expires (OAUTHBEARER), or for ever.
    #[arg(env = "WEIR_MAX_REAUTH_MS", long, default_value_t = 0)]
    max_reauth_ms: u64,
    /// A file holding the writer role's token (else WEIR_WRITER_TOKEN).
    #[arg(env = "WEIR_WRITER_TOKEN_FILE", long, value_name = "FILE")]
    writer_token_file: Option<PathBuf>,
    /// A file holding the reader role's token (else WEIR_READER_TOKEN).
    #[arg(env = "WEIR_READER_TOKEN_FILE", long, value_name = "FILE")]
    reader_token_file: Option<PathBuf>,
    /// A PEM certificate chain: the Kafka port (and --shard-ports) speaks
    /// TLS 1.2/1.3 with it (clients use SSL or SASL_SSL), and --addr is
    /// HTTPS. Needs --tls-key.
    #[arg(env = "WEIR_TLS_CERT", long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(env = "WEIR_TLS_KEY", long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM certificates of the authority that signs client certificates:
    /// a client that presents one it signed is signed in as the
    /// certificate's subject CN (`User:CN`); one that presents none signs
    /// in with SASL.
    #[arg(
        env = "WEIR_TLS_CLIENT_CA",
        long,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_client_ca: Option<PathBuf>,
    /// PEM certificates of the authority that signs the other nodes'
    /// certificates: a cluster node whose Kafka port speaks TLS reaches
    /// the others' over TLS too (its replica fetcher), trusting this.
    /// Default: --tls-client-ca.
    #[arg(
        env = "WEIR_TLS_PEER_CA",
        long,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_peer_ca: Option<PathBuf>,
    /// Read settings from this TOML file: its keys are these flags' names
    /// (`max_connections = 20000`, `data_dir = "/var/lib/weir"`); a flag
    /// or a WEIR_* variable overrides it, and an unknown key is refused.
    #[arg(long, value_name = "FILE", env = "WEIR_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective settings (TOML, each with where it came from:
    /// flag, environment, file or default) and exit.
    #[arg(long)]
    print_config: bool,
    /// Log lines as text, or as JSON objects one a line (ts, level,
    /// target, msg).
    #[arg(env = "WEIR_LOG_FORMAT", long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Refuse to start unless the Kafka port speaks TLS (--tls-cert).
    #[arg(env = "WEIR_REQUIRE_CLIENT_TLS", long)]
    require_client_tls: bool,
}

/// The TLS the ports speak, if any (`--tls-*`).
fn tls(args: &ServeArgs) -> Result<Option<weir_net::tls::TlsAcceptor>, String> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => weir_net::tls::load(&weir_net::tls::TlsFiles {
            cert,
            key,
            client_ca: args.tls_client_ca.as_deref(),
        })
        .map(Some),
        _ if args.require_client_tls => Err(
            "--require-client-tls: the Kafka port would be in the clear: give --tls-cert and --tls-key"
                .into(),
        ),
        _ => Ok(None),
    }
}

/// The TLS a cluster node speaks to the others' Kafka ports: theirs speak
/// it when its own does (`--tls-cert`), trusting `--tls-peer-ca`, else
/// `--tls-client-ca`; `None` on a single node or in the clear.
fn peer_tls(args: &ServeArgs) -> Result<Option<weir_net::tls::TlsConnector>, String> {
    let clustered = args.voters.is_some() || args.join.is_some();
    if !clustered || args.tls_cert.is_none() {
        return Ok(None);
    }
    match (&args.tls_peer_ca, &args.tls_client_ca) {
        (Some(ca), _) => weir_net::tls::peer_connector(ca, "--tls-peer-ca").map(Some),
        (None, Some(ca)) => weir_net::tls::peer_connector(ca, "--tls-client-ca").map(Some),
        (None, None) => Err(
            "--tls-cert in a cluster needs --tls-peer-ca (or --tls-client-ca): the authority \
             this node trusts in the other nodes' certificates when it copies from them"
                .into(),
        ),
    }
}

fn resolve(what: &str, addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("{what} address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{what} address {addr:?} resolves to nothing"))
}

fn config(args: ServeArgs) -> Result<NodeConfig, String> {
    let kafka = resolve("--kafka", &args.kafka)?;
    let http = resolve("--addr", &args.addr)?;
    // Each shard listens with SO_REUSEPORT, so the kernel would let both
    // listeners share one port and hand each other's clients to them.
    let same_host =
        kafka.ip() == http.ip() || kafka.ip().is_unspecified() || http.ip().is_unspecified();
    if kafka.port() == http.port() && same_host {
        return Err(format!(
            "--kafka {kafka} and --addr {http} are the same port: Kafka clients and HTTP need one each"
        ));
    }
    let cluster = cluster_config(&args)?;
    let mut cfg = NodeConfig::new(args.data_dir, kafka, http);
    let (host, port) = match &args.kafka_advertise {
        Some(a) => {
            let (h, p) = a
                .rsplit_once(':')
                .ok_or_else(|| format!("--kafka-advertise {a:?} is not HOST:PORT"))?;
            let p: u16 = p
                .parse()
                .map_err(|_| format!("--kafka-advertise {a:?}: bad port"))?;
            (h.to_string(), p)
        }
        None => (http.ip().to_string(), kafka.port()),
    };
    if host == "0.0.0.0" || host == "::" {
        log::warn!("advertising {host}: clients cannot connect there; set --kafka-advertise");
    }
    cfg.advertised_host = host;
    cfg.advertised_port = port;
    cfg.shards = args
        .cores
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    if let Some(base) = args.shard_ports {
        if base as usize + cfg.shards > u16::MAX as usize + 1 || base == 0 {
            return Err(format!(
                "--shard-ports {base}: {} shards need ports {base}..{} (1..=65535)",
                cfg.shards,
                base as usize + cfg.shards - 1
            ));
        }
        let overlaps = |p: u16| (base as usize..base as usize + cfg.shards).contains(&(p as usize));
        if overlaps(kafka.port()) || (http.ip() == kafka.ip() && overlaps(http.port())) {
            return Err(format!(
                "--shard-ports {base}: ports {base}..{} overlap --kafka or --addr",
                base as usize + cfg.shards - 1
            ));
        }
        cfg.shard_port_base = Some(base);
    }
    if let Some(cpus) = &args.cpus {
        cfg.cpus = weir_core::config::Cpus::parse(cpus)?;
    }
    if let Some(id) = args.node_id {
        cfg.node_id = id;
    }
    cfg.cluster = cluster;
    if cfg.cluster.is_some()
        && cfg.shard_port_base.is_some()
        && !(1..=weir_core::catalog::MAX_SHARD_PORTS_NODE).contains(&cfg.node_id)
    {
        return Err(format!(
            "--shard-ports in a cluster: node {}'s shards would be brokers {} x {} + shard; \
             node ids 1 to {} can serve it",
            cfg.node_id,
            cfg.node_id,
            weir_core::catalog::SHARD_BROKERS,
            weir_core::catalog::MAX_SHARD_PORTS_NODE
        ));
    }
    cfg.flushes_in_flight = args.flushes_in_flight.max(1);
    cfg.auto_create_topics = args.auto_create_topics;
    cfg.default_partitions = args.default_partitions.max(1);
    weir_core::catalog::check_static_defaults(&args.topic_defaults.0)?;
    cfg.topic_defaults = args.topic_defaults.0.clone();
    cfg.max_request_bytes = args.max_request_bytes;
    cfg.fetch_max_bytes = args.fetch_max_bytes.max(1);
    cfg.request_memory_bytes = args.request_memory_bytes;
    cfg.answer_memory_bytes = args.answer_memory_bytes;
    cfg.socket_timeout = std::time::Duration::from_millis(args.socket_timeout_ms.max(1));
    cfg.max_connections = args.max_connections.max(1);
    cfg.cache_bytes_per_shard = args.cache_bytes_per_shard;
    cfg.sql_max_scan_bytes = args.sql_max_scan_bytes;
    cfg.spin_before_park = Duration::from_micros(args.spin_before_park_us);
    cfg.retention_check_interval = Duration::from_millis(args.retention_check_ms.max(100));
    cfg.compaction_check_interval = Duration::from_millis(args.compaction_check_ms.max(100));
    cfg.compaction_map_bytes = args.compaction_map_bytes.max(1 << 20);
    cfg.replica_lag_time_max = Duration::from_millis(args.replica_lag_time_max_ms.max(100));
    cfg.replication_throttle_bytes = args.replication_throttle_bytes;
    cfg.journal = args.journal;
    cfg.timeline = args.timeline.clone();
    cfg.groups.min_session_timeout = Duration::from_millis(args.group_min_session_timeout_ms);
    cfg.groups.max_session_timeout = Duration::from_millis(args.group_max_session_timeout_ms);
    cfg.groups.initial_rebalance_delay =
        Duration::from_millis(args.group_initial_rebalance_delay_ms);
    cfg.groups.consumer_heartbeat_interval =
        Duration::from_millis(args.group_consumer_heartbeat_interval_ms.max(100));
    cfg.groups.consumer_session_timeout =
        Duration::from_millis(args.group_consumer_session_timeout_ms.max(1_000));
    use weir_core::auth::{Role, RoleTokens};
    cfg.role_tokens = RoleTokens::load(&[
        (Role::Admin, args.admin_token_file.as_deref()),
        (Role::Writer, args.writer_token_file.as_deref()),
        (Role::Reader, args.reader_token_file.as_deref()),
    ])?;
    if let Some(jwks) = &args.oauth_jwks {
        let oauth = weir_core::auth::oauth::OAuth::load(weir_core::auth::oauth::OAuthConfig {
            jwks: jwks.clone(),
            issuer: args.oauth_issuer.clone(),
            audience: args.oauth_audience.clone(),
            principal_claim: args.oauth_principal_claim.clone(),
            clock_skew: Duration::from_secs(args.oauth_clock_skew_s),
        })?;
        cfg.oauth = Some(oauth);
        cfg.role_tokens.issuer = true;
    }
    cfg.max_reauth = Duration::from_millis(args.max_reauth_ms);
    cfg.node_sign_in = weir_core::auth::read_token(Role::Admin, args.admin_token_file.as_deref())?
        .map(|password| weir_core::auth::NodeSignIn {
            user: Role::Admin.name().to_string(),
            password,
        });
    Ok(cfg)
}

/// The node's place in a cluster from --node-id, --voters, --join,
/// --peer-addr and --rack; `None` for a single node.
fn cluster_config(args: &ServeArgs) -> Result<Option<weir_core::cluster::ClusterConfig>, String> {
    if args.voters.is_none() && args.join.is_none() {
        return Ok(None);
    }
    let id = args
        .node_id
        .ok_or("--voters and --join need --node-id (this node's id in the cluster)")?;
    if id < 0 {
        return Err(format!("--node-id {id}: a node id is 0 or more"));
    }
    let mut voters = std::collections::BTreeMap::new();
    for v in args.voters.iter().flat_map(|v| v.split(',')).map(str::trim) {
        let (vid, addr) = v
            .split_once('@')
            .ok_or_else(|| format!("--voters: {v:?} is not ID@HOST:PORT"))?;
        let vid: u64 = vid
            .parse()
            .map_err(|_| format!("--voters: {vid:?} in {v:?} is not a node id"))?;
        if voters.insert(vid, addr.to_string()).is_some() {
            return Err(format!("--voters names node {vid} twice"));
        }
    }
    let own = voters.get(&(id as u64)).cloned();
    if args.voters.is_some() && own.is_none() {
        return Err(format!(
            "--node-id {id} is not among --voters: a voter lists itself (a node that is not a voter joins with --join and --peer-addr)"
        ));
    }
    // Where to listen; the others reach a voter at its --voters entry.
    let listen = args
        .peer_addr
        .clone()
        .or(own.clone())
        .ok_or("--peer-addr is needed: where this node listens for the others")?;
    let peer_addr = resolve("--peer-addr", &listen)?;
    let peer = own.unwrap_or(listen);
    Ok(Some(weir_core::cluster::ClusterConfig {
        node_id: id,
        voters,
        join: args.join.clone(),
        peer_addr,
        peer_advertised: peer,
        rack: args.rack.clone(),
        session_timeout: Duration::from_millis(args.node_session_timeout_ms.max(500)),
        leader_balance_interval: (args.leader_balance_interval_ms > 0)
            .then(|| Duration::from_millis(args.leader_balance_interval_ms)),
        replica_balance_interval: (args.replica_balance_interval_ms > 0)
            .then(|| Duration::from_millis(args.replica_balance_interval_ms)),
    }))
}

/// How long a clean stop may take before the process exits anyway.
const STOP_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// Blocks SIGINT and SIGTERM in every thread (executors inherit the mask)
/// and returns a thread that waits for either and sets the stop flag.
/// Descriptors kept for segment and index files, the data directory and
/// the HTTP side beside the Kafka connections (one each).
const FILES_BESIDE_CONNECTIONS: u64 = 4096;

/// Raises the soft limit on open descriptors to the hard one, as a node
/// holding a descriptor per connection and per open segment needs (Kafka's
/// guide asks for 100,000). Says what the limit is, and warns (`Err`) when
/// it cannot hold `max_connections` beside the files.
fn raise_open_files_limit(max_connections: usize) -> Result<String, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or fill the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(format!(
                "open files: cannot read the limit: {}",
                std::io::Error::last_os_error()
            ));
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    let need = max_connections as u64 + FILES_BESIDE_CONNECTIONS;
    if lim.rlim_cur < need {
        Err(format!(
            "open files: the limit is {}, under the {need} that --max-connections {max_connections} and the node's files may need (each connection and each partition's open segment takes one): raise it (LimitNOFILE, ulimit -n) or lower --max-connections",
            lim.rlim_cur
        ))
    } else {
        Ok(format!("open files: the limit is {}", lim.rlim_cur))
    }
}

fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain libc signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Logs to stderr, at `RUST_LOG` (default info), as text or JSON lines.
fn init_logging(json: bool) {
    let mut b = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if json {
        b.format(|buf, record| {
            use std::io::Write;
            let line = serde_json::json!({
                "ts": buf.timestamp_micros().to_string(),
                "level": record.level().as_str(),
                "target": record.target(),
                "msg": record.args().to_string(),
            });
            writeln!(buf, "{line}")
        });
    }
    b.init();
}

fn main() {
    panics::abort_on_panic();
    // A config file's settings become the defaults of their WEIR_*
    // variables before the flags are parsed (flag > environment > file).
    let argv: Vec<String> = std::env::args().collect();
    let serve_command = Cli::command()
        .find_subcommand("serve")
        .expect("the serve command")
        .clone();
    let from_file = match config_file::path(&argv) {
        Some(file) => config_file::apply(&file, &serve_command).unwrap_or_else(|e| {
            eprintln!("weir: {e}");
            std::process::exit(2);
        }),
        None => Default::default(),
    };
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Serve(args) = &cli.command {
        if args.print_config {
            let serve = matches
                .subcommand_matches("serve")
                .expect("serve's matches");
            print!("{}", config_file::print(&serve_command, serve, &from_file));
            return;
        }
    }
    init_logging(matches!(&cli.command, Command::Serve(a) if a.log_format == "json"));
    match cli.command {
        Command::Sql(args) => run_sql(args),
        Command::Serve(args) => serve(*args),
    }
}

/// `weir sql`: one request to a node's `POST /sql`, printed as a table
/// (or JSON).
fn run_sql(args: SqlArgs) {
    let out = sql_client::request(
        &args.addr,
        &args.sql,
        args.token.as_deref(),
        args.ca.as_deref(),
    )
    .and_then(|body| {
        if args.json {
            Ok(body + "\n")
        } else {
            sql_client::table(&body)
        }
    });
    match out {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

/// `weir serve`: runs a node until a signal stops it.
fn serve(args: ServeArgs) {
    // Said once the node serves: a start-up failure is one line.
    let memory = allocator::release_freed_memory_after(args.release_freed_memory_ms);
    let huge_pages = allocator::huge_pages(args.transparent_huge_pages);
    let cfg = match tls(&args)
        .and_then(|tls| Ok((tls, peer_tls(&args)?)))
        .and_then(|tls| Ok((config(args)?, tls)))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir: {e}");
            std::process::exit(2);
        }
    };
    let set = block_stop_signals();
    let (cfg, (tls, peer_tls)) = cfg;
    let files = raise_open_files_limit(cfg.max_connections);
    let (kafka, http, shards) = (cfg.kafka_addr, cfg.http_addr, cfg.shards);
    let over = if tls.is_some() { " over TLS" } else { "" };
    let serve: weir_core::node::ServeFn =
        Arc::new(move |shard| weir_net::server::bind(shard, tls.clone(), peer_tls.clone()));
    let node = match weir_core::node::start(cfg, serve) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("weir: {e}");
            std::process::exit(1);
        }
    };
    log::info!("weir serving Kafka on {kafka} and HTTP on {http}{over} with {shards} shard(s)");
    log::info!("{memory}");
    log::info!("{huge_pages}");
    match files {
        Ok(line) => log::info!("{line}"),
        Err(line) => log::warn!("{line}"),
    }
    stop_on_signals(set, node.stop_flag(), node.control());
    node.join();
    log::info!("stopped");
}

/// Kafka's controlled shutdown: asks the quorum to move this node's
/// leaderships to other in-sync replicas, and says how it went.
fn hand_over(control: &weir_core::cluster::Control) {
    let began = std::time::Instant::now();
    match control.shut_down(HAND_OVER_BOUND) {
        Ok(0) => log::info!(
            "leaderships handed over in {} ms",
            began.elapsed().as_millis()
        ),
        Ok(n) => log::warn!(
            "leaderships handed over in {} ms; {n} partitions have no other replica in sync and wait for this node",
            began.elapsed().as_millis()
        ),
        Err(e) => log::warn!("stopping without handing leaderships over: {e}"),
    }
}

/// How long a node of a cluster waits, at a stop, for the quorum to move
/// its leaderships away (a controlled shutdown) before it stops anyway.
const HAND_OVER_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Stops the node at the first of the blocked signals `set`; a stop that
/// hangs past `STOP_BOUND`, or a second signal, exits without a clean stop.
/// A node of a cluster first hands its leaderships over (Kafka's
/// controlled shutdown), so its clients meet NOT_LEADER_OR_FOLLOWER and
/// a new leader rather than a leader gone silent.
fn stop_on_signals(
    set: libc::sigset_t,
    stop: Arc<std::sync::atomic::AtomicBool>,
    control: Option<weir_core::cluster::Control>,
) {
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: waits on the set blocked above.
        unsafe { libc::sigwait(&set, &mut sig) };
        log::info!(
            "signal {sig}: stopping (in-flight requests answered, appends synced; a second signal exits at once)"
        );
        // The hand-over and the stop run on a thread of their own, so a
        // second signal still exits at once meanwhile.
        std::thread::spawn(move || {
            if let Some(control) = control {
                hand_over(&control);
            }
            stop.store(true, Ordering::Relaxed);
            // A stop that hangs (a disk that no longer answers) must
            // not hold the process: past the bound, or at a second
            // signal, it exits without the clean-stop state, and the
            // next start recovers as after a crash.
            std::thread::sleep(STOP_BOUND);
            log::error!(
                "not stopped within {} s: exiting without a clean stop",
                STOP_BOUND.as_secs()
            );
            std::process::exit(1);
        });
        // SAFETY: as above.
        unsafe { libc::sigwait(&set, &mut sig) };
        log::warn!("signal {sig} again: exiting without a clean stop");
        std::process::exit(1);
    });
}
