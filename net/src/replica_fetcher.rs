//! The replica fetcher: on each shard, the partitions it follows fetched
//! from their leaders with Kafka's own replication protocol, as a Kafka
//! broker's follower does: one session per leader broker (the node, or
//! its shard with `--shard-ports`), each a connection to the leader's
//! Kafka port carrying one Fetch at a time for all the partitions this
//! shard follows from it (`replica_id` set to this node).
//!
//! A partition entering a new leader epoch is first reconciled with its
//! leader by OffsetForLeaderEpoch (KIP-101, KIP-279): the follower asks
//! where its latest epoch ends on the leader and truncates what the
//! leader's log does not have, never below the high watermark. Then each
//! fetch answer is appended as the leader stored it and made durable here
//! before the next fetch tells the leader its new end: the leader counts
//! a record toward the high watermark only once a follower has it on disk.

use std::collections::{BTreeMap, HashMap};
use std::net::ToSocketAddrs;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::{join_all, select, Either};
use futures::{AsyncReadExt, AsyncWriteExt};
use futures_rustls::TlsConnector;
use glommio::net::TcpStream;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use weir_core::auth::NodeSignIn;
use weir_core::config::Broker;
use weir_core::shard::Followed;
use weir_core::{ErrorCode, Shard};

/// Fetch v12: the last version naming the replica in `replica_id` and
/// topics by name.
const FETCH_VERSION: i16 = 12;
const EPOCH_VERSION: i16 = 4;
/// ListOffsets v4: the first with `current_leader_epoch`.
const LIST_OFFSETS_VERSION: i16 = 4;
/// ListOffsets' timestamp for the log start.
const EARLIEST: i64 = -2;
/// How long a leader holds a fetch that finds nothing new.
const MAX_WAIT: Duration = Duration::from_millis(500);
/// Bytes asked per partition and per fetch.
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const FETCH_MAX_BYTES: i32 = 16 << 20;
/// The largest answer frame taken from a leader.
const MAX_FRAME: usize = 64 << 20;
/// A call not answered within this is abandoned and its connection
/// dropped.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause after a failed connection or call before the next attempt.
const BACKOFF: Duration = Duration::from_millis(100);

/// Runs on a shard of a cluster node for the node's life: keeps one
/// session per leader this shard follows partitions from, each given the
/// current list at every catalog installed.
pub async fn run(shard: Rc<Shard>, tls: Option<TlsConnector>) {
    type Session = Rc<std::cell::RefCell<Vec<Followed>>>;
    let throttle = Rc::new(std::cell::RefCell::new(Throttle::new()));
    let mut sessions: HashMap<(i32, String, u16), Session> = HashMap::new();
    while !shard.is_stopping() {
        let changed = shard.catalog_changed();
        let mut wanted: BTreeMap<(i32, String, u16), Vec<Followed>> = BTreeMap::new();
        for f in shard.followed() {
            let key = (f.broker.id, f.broker.host.clone(), f.broker.port);
            wanted.entry(key).or_default().push(f);
        }
        // A session no longer wanted is given nothing to fetch and ends at
        // its next step: never cancelled, since it may be copying or
        // truncating.
        sessions.retain(|key, parts| {
            let keep = wanted.contains_key(key);
            if !keep {
                parts.borrow_mut().clear();
            }
            keep
        });
        for (key, list) in wanted {
            match sessions.get(&key) {
                Some(parts) => *parts.borrow_mut() = list,
                None => {
                    let broker = list[0].broker.clone();
                    let parts = Rc::new(std::cell::RefCell::new(list));
                    let s = session(
                        shard.clone(),
                        broker,
                        parts.clone(),
                        tls.clone(),
                        throttle.clone(),
                    );
                    glommio::spawn_local(s).detach();
                    sessions.insert(key, parts);
                }
            }
        }
        // A catalog, or a look every second (a stop, a missed wake-up).
        let tick = Box::pin(glommio::timer::sleep(Duration::from_secs(1)));
        let _ = select(changed, tick).await;
    }
    for (_, parts) in sessions {
        parts.borrow_mut().clear();
    }
}

/// Fetches `parts` from `leader` until it is given none: connects (again after
/// any failure), reconciles partitions new to an epoch, then fetches.
async fn session(
    shard: Rc<Shard>,
    leader: Broker,
    parts: Rc<std::cell::RefCell<Vec<Followed>>>,
    tls: Option<TlsConnector>,
    throttle: Rc<std::cell::RefCell<Throttle>>,
) {
    // The epoch each partition was last reconciled in.
    let mut reconciled: HashMap<(String, i32), i32> = HashMap::new();
    let me = shard.config.node_id;
    let from = shard.cluster.as_ref().and_then(|c| c.source_addr());
    let sign_in = shard.config.node_sign_in.clone();
    // A refused sign-in is told once (until it changes), not every retry.
    let mut refused: Option<String> = None;
    while !shard.is_stopping() {
        let mut conn = match Conn::open(&leader, from, tls.as_ref(), sign_in.as_ref()).await {
            Ok(c) => c,
            Err(OpenError::Connect(e)) => {
                log::debug!("replica fetcher: connecting to broker {}: {e}", leader.id);
                glommio::timer::sleep(BACKOFF).await;
                continue;
            }
            Err(OpenError::SignIn(e)) => {
                if refused.as_ref() != Some(&e) {
                    log::warn!("replica fetcher: signing in to broker {}: {e}", leader.id);
                    refused = Some(e);
                }
                glommio::timer::sleep(BACKOFF).await;
                continue;
            }
        };
        refused = None;
        loop {
            if shard.is_stopping() {
                return;
            }
            let list = parts.borrow().clone();
            if list.is_empty() {
                // No longer wanted: its partitions follow elsewhere now.
                return;
            }
            let pending: Vec<&Followed> = list
                .iter()
                .filter(|f| reconciled.get(&key(f)) != Some(&f.epoch))
                .collect();
            if !pending.is_empty() {
                if let Err(e) = reconcile(&mut conn, me, &pending, &mut reconciled).await {
                    log::warn!(
                        "replica fetcher: reconciling with broker {}: {e}",
                        leader.id
                    );
                    break;
                }
            }
            let ready: Vec<&Followed> = list
                .iter()
                .filter(|f| reconciled.get(&key(f)) == Some(&f.epoch))
                .collect();
            if ready.is_empty() {
                glommio::timer::sleep(BACKOFF).await;
                continue;
            }
            // Replicas a reassignment adds wait while the move throttle is
            // spent (Kafka's follower.replication.throttled.rate leaves
            // them out of the fetch likewise).
            let rate = shard.move_throttle();
            let budget = throttle.borrow_mut().budget(rate);
            let ready: Vec<&Followed> = match budget {
                Some(0) => ready.into_iter().filter(|f| !f.throttled).collect(),
                _ => ready,
            };
            if ready.is_empty() {
                let wait = throttle.borrow().wait(rate);
                glommio::timer::sleep(wait).await;
                continue;
            }
            let fetched = fetch_once(&mut conn, me, &ready, &mut reconciled, budget).await;
            match fetched {
                Ok(copied) => throttle.borrow_mut().spend(copied),
                Err(e) => {
                    log::warn!("replica fetcher: fetching from broker {}: {e}", leader.id);
                    break;
                }
            }
        }
        glommio::timer::sleep(BACKOFF).await;
    }
}

/// One shard's move throttle (a token bucket over every session): the
/// bytes copied for replicas a reassignment adds, at most `rate` per
/// second, in bursts of at most a second's worth.
pub(crate) struct Throttle {
    credit: f64,
    at: std::time::Instant,
}

impl Throttle {
    fn new() -> Throttle {
        Throttle {
            credit: 0.0,
            at: std::time::Instant::now(),
        }
    }

    /// The bytes throttled replicas may fetch now at `rate` (0: any,
    /// `None`); `Some(0)` while the credit is spent.
    fn budget(&mut self, rate: u64) -> Option<u64> {
        if rate == 0 {
            self.credit = 0.0;
            return None;
        }
        let now = std::time::Instant::now();
        let earned = now.duration_since(self.at).as_secs_f64() * rate as f64;
        self.credit = (self.credit + earned).min(rate as f64);
        self.at = now;
        Some(self.credit.max(0.0) as u64)
    }

    /// Counts `bytes` copied for throttled replicas.
    fn spend(&mut self, bytes: u64) {
        self.credit -= bytes as f64;
    }

    /// How long until the credit is positive again at `rate`.
    fn wait(&self, rate: u64) -> Duration {
        if rate == 0 || self.credit > 0.0 {
            return BACKOFF;
        }
        Duration::from_secs_f64((-self.credit + 1.0) / rate as f64).clamp(BACKOFF, MAX_WAIT)
    }
}

fn key(f: &Followed) -> (String, i32) {
    (f.partition.topic.clone(), f.partition.index)
}

/// KIP-279's truncation: asks the leader where each partition's latest
/// local epoch ends; a partition whose log goes further than the leader's
/// in that epoch is truncated there; one that does not know the epoch
/// the leader answers with is truncated to its own end of that epoch and
/// asked again next round. A partition with no epoch yet (an empty log)
/// has nothing to reconcile.
async fn reconcile(
    conn: &mut Conn,
    me: i32,
    pending: &[&Followed],
    reconciled: &mut HashMap<(String, i32), i32>,
) -> Result<(), String> {
    let mut asked = Vec::new();
    for f in pending {
        match f.partition.log.latest_epoch() {
            None => {
                reconciled.insert(key(f), f.epoch);
            }
            Some(epoch) => asked.push((*f, epoch)),
        }
    }
    if asked.is_empty() {
        return Ok(());
    }
    let mut topics: BTreeMap<String, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
    for (f, epoch) in &asked {
        topics.entry(f.partition.topic.clone()).or_default().push(
            OffsetForLeaderPartition::default()
                .with_partition(f.partition.index)
                .with_current_leader_epoch(f.epoch)
                .with_leader_epoch(*epoch),
        );
    }
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(me))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, parts)| {
                    OffsetForLeaderTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t)))
                        .with_partitions(parts)
                })
                .collect(),
        );
    let resp: OffsetForLeaderEpochResponse = conn
        .call(ApiKey::OffsetForLeaderEpoch, EPOCH_VERSION, &req)
        .await?;
    let mut answers: HashMap<(String, i32), (i16, i32, i64)> = HashMap::new();
    for t in resp.topics {
        for p in t.partitions {
            answers.insert(
                (t.topic.0.to_string(), p.partition),
                (p.error_code, p.leader_epoch, p.end_offset),
            );
        }
    }
    for (f, _) in asked {
        let Some(&(code, leader_epoch, leader_end)) = answers.get(&key(f)) else {
            continue;
        };
        if code != 0 {
            log::debug!(
                "{}-{}: OffsetForLeaderEpoch answered error {code}",
                f.partition.topic,
                f.partition.index
            );
            continue;
        }
        let log = &f.partition.log;
        let end = log.log_end();
        let (cut, done) = if leader_epoch < 0 {
            // The leader has no such epoch or older: nothing above the
            // high watermark is known to be in its log.
            (log.high_watermark(), true)
        } else {
            // Kafka's AbstractFetcherThread: the follower's own end of
            // the leader's epoch bounds the cut too (its log may go on in a
            // later epoch of its own the leader never had).
            let (mine, my_end) = log.end_offset_for(leader_epoch);
            match mine == leader_epoch {
                true => (leader_end.min(my_end).min(end), true),
                false => (my_end.min(end), false),
            }
        };
        let hw = log.high_watermark();
        if cut < hw {
            // Every in-sync replica holds the log below the high
            // watermark, the new leader among them: this is a bug.
            log::error!(
                "{}-{}: the leader's log ends at {cut} in epoch {leader_epoch}, below this follower's high watermark {hw}; keeping the log to {hw}",
                f.partition.topic,
                f.partition.index
            );
        }
        let cut = cut.max(hw);
        if cut < end {
            // In a task of its own: a session stopped midway must not leave
            // a truncation half done.
            let (part, epoch) = (f.partition.clone(), f.epoch);
            glommio::spawn_local(async move { part.truncate_to(cut, epoch).await })
                .detach()
                .await
                .ok_or("the truncation's task was lost")?
                .map_err(|e| format!("truncating: {e}"))?;
        }
        if done {
            reconciled.insert(key(f), f.epoch);
        }
    }
    Ok(())
}

/// One fetch of every ready partition; each answer appended and made
/// durable before the next fetch. A partition answered with an epoch or
/// leadership error waits for the next catalog; out of range, it is
/// reconciled again. Throttled partitions (replicas a reassignment adds)
/// share `budget` bytes if bounded; answers the bytes copied for them.
async fn fetch_once(
    conn: &mut Conn,
    me: i32,
    ready: &[&Followed],
    reconciled: &mut HashMap<(String, i32), i32>,
    budget: Option<u64>,
) -> Result<u64, String> {
    let throttled = ready.iter().filter(|f| f.throttled).count().max(1) as u64;
    let throttled_max = budget.map_or(PARTITION_MAX_BYTES, |b| {
        (b / throttled).clamp(1, PARTITION_MAX_BYTES as u64) as i32
    });
    let mut topics: BTreeMap<String, Vec<FetchPartition>> = BTreeMap::new();
    let mut fetched = Vec::new();
    for f in ready {
        let log = &f.partition.log;
        // The fetch offset tells the leader everything below it is durable
        // here: a partition whose last copy is not yet waits for it.
        if log.durable_end() < log.log_end() {
            let _ = log.durable_past(log.log_end() - 1).await;
            if log.durable_end() < log.log_end() {
                continue;
            }
        }
        fetched.push(*f);
        topics.entry(f.partition.topic.clone()).or_default().push(
            FetchPartition::default()
                .with_partition(f.partition.index)
                .with_current_leader_epoch(f.epoch)
                .with_fetch_offset(log.log_end())
                .with_log_start_offset(log.log_start())
                .with_partition_max_bytes(match f.throttled {
                    true => throttled_max,
                    false => PARTITION_MAX_BYTES,
                }),
        );
    }
    if fetched.is_empty() {
        glommio::timer::sleep(BACKOFF).await;
        return Ok(0);
    }
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(me))
        .with_max_wait_ms(MAX_WAIT.as_millis() as i32)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, parts)| {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t)))
                        .with_partitions(parts)
                })
                .collect(),
        );
    let resp: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &req).await?;
    if resp.error_code != 0 {
        return Err(format!(
            "the leader refused the fetch: error {}",
            resp.error_code
        ));
    }
    let by_key: HashMap<(String, i32), &Followed> = fetched.iter().map(|f| (key(f), *f)).collect();
    let mut appends = Vec::new();
    let mut out_of_range = Vec::new();
    let mut waits = false;
    let mut copied = 0u64;
    for t in resp.responses {
        let topic = t.topic.0.to_string();
        for p in t.partitions {
            let Some(f) = by_key.get(&(topic.clone(), p.partition_index)) else {
                continue;
            };
            match p.error_code {
                0 => {
                    let records = p.records.unwrap_or_default();
                    if f.throttled {
                        copied += records.len() as u64;
                    }
                    let part = f.partition.clone();
                    let (hw, start, epoch) = (p.high_watermark, p.log_start_offset, f.epoch);
                    // In a task of its own, as truncation is.
                    let copy = glommio::spawn_local(async move {
                        part.append_from_leader(&records, epoch, hw, start).await
                    })
                    .detach();
                    let part = f.partition.clone();
                    appends.push(async move {
                        let r = copy.await.unwrap_or_else(|| {
                            Err(weir_core::KafkaError::new(
                                ErrorCode::UnknownServerError,
                                "the copy's task was lost",
                            ))
                        });
                        (part, r)
                    });
                }
                c if c == ErrorCode::OffsetOutOfRange.code() => {
                    log::warn!(
                        "{topic}-{}: offset {} is out of the leader's range",
                        p.partition_index,
                        f.partition.log.log_end()
                    );
                    out_of_range.push(*f);
                }
                c => {
                    log::debug!(
                        "{topic}-{}: the leader answered error {c}",
                        p.partition_index
                    );
                    waits = true;
                }
            }
        }
    }
    for (part, r) in join_all(appends).await {
        if let Err(e) = r {
            // Reconciled again before its next fetch: a copy that does not
            // continue the log means the logs diverged.
            log::warn!(
                "{}-{}: copying from the leader: {e}",
                part.topic,
                part.index
            );
            reconciled.remove(&(part.topic.clone(), part.index));
            waits = true;
        }
    }
    if !out_of_range.is_empty() {
        start_over_where_needed(conn, me, &out_of_range).await?;
        for f in out_of_range {
            reconciled.remove(&key(f));
        }
    }
    if waits {
        // Leadership or epochs moved: the catalog saying so is on its way.
        glommio::timer::sleep(BACKOFF).await;
    }
    Ok(copied)
}

/// Partitions whose fetch offset the leader finds out of range (Kafka's
/// AbstractFetcherThread.handleOutOfRangeError): the leader's log start
/// is asked (ListOffsets, earliest); a follower whose whole log lies below
/// it starts over there (truncateFullyAndStartAt: the leader deleted what
/// it missed). Every one of them is reconciled again before its next
/// fetch (a log that went past the leader's end is cut there).
async fn start_over_where_needed(
    conn: &mut Conn,
    me: i32,
    parts: &[&Followed],
) -> Result<(), String> {
    let mut topics: BTreeMap<String, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for f in parts {
        topics.entry(f.partition.topic.clone()).or_default().push(
            ListOffsetsPartition::default()
                .with_partition_index(f.partition.index)
                .with_current_leader_epoch(f.epoch)
                .with_timestamp(EARLIEST),
        );
    }
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(me))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, parts)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t)))
                        .with_partitions(parts)
                })
                .collect(),
        );
    let resp: ListOffsetsResponse = conn
        .call(ApiKey::ListOffsets, LIST_OFFSETS_VERSION, &req)
        .await?;
    let mut starts: HashMap<(String, i32), i64> = HashMap::new();
    for t in resp.topics {
        for p in t.partitions.into_iter().filter(|p| p.error_code == 0) {
            starts.insert((t.name.0.to_string(), p.partition_index), p.offset);
        }
    }
    for f in parts {
        let Some(&start) = starts.get(&key(f)) else {
            continue;
        };
        if start > f.partition.log.log_end() {
            let (part, epoch) = (f.partition.clone(), f.epoch);
            glommio::spawn_local(async move { part.start_over_at(start, epoch).await })
                .detach()
                .await
                .ok_or("the restart's task was lost")?
                .map_err(|e| format!("starting over at {start}: {e}"))?;
        }
    }
    Ok(())
}

/// A client connection to a leader's Kafka port: one call at a time.
struct Conn {
    stream: Box<dyn Duplex>,
    next_id: i32,
}

/// A byte stream both ways: a socket, or TLS over one.
trait Duplex: futures::AsyncRead + futures::AsyncWrite + Unpin {}
impl<T: futures::AsyncRead + futures::AsyncWrite + Unpin> Duplex for T {}

/// Why a connection to a leader was not made.
enum OpenError {
    /// It could not be reached (down, restarting): tried again quietly.
    Connect(String),
    /// It refused this node's sign-in or TLS handshake: a setting to
    /// fix, told.
    SignIn(String),
}

impl Conn {
    /// Connects to `broker`'s Kafka port from `from` (the node's own
    /// address, as its other calls to the nodes leave), over `tls` if
    /// given, and, with `sign_in`, signs in with SASL/PLAIN
    /// (SaslHandshake v1, then SaslAuthenticate v2), as a Kafka broker's
    /// follower signs in with its inter-broker credentials.
    async fn open(
        broker: &Broker,
        from: Option<std::net::SocketAddr>,
        tls: Option<&TlsConnector>,
        sign_in: Option<&NodeSignIn>,
    ) -> Result<Conn, OpenError> {
        let addr = (broker.host.as_str(), broker.port)
            .to_socket_addrs()
            .map_err(|e| format!("resolving {}:{}: {e}", broker.host, broker.port))
            .and_then(|mut a| {
                a.next()
                    .ok_or_else(|| format!("{}:{} resolves to nothing", broker.host, broker.port))
            })
            .map_err(OpenError::Connect)?;
        let stream = TcpStream::connect_timeout_from(from, addr, Duration::from_secs(3))
            .await
            .map_err(|e| OpenError::Connect(format!("connecting to {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let stream: Box<dyn Duplex> = match tls {
            None => Box::new(stream),
            Some(c) => Box::new(
                crate::tls::connect(c, &broker.host, stream)
                    .await
                    .map_err(OpenError::SignIn)?,
            ),
        };
        let mut conn = Conn { stream, next_id: 0 };
        if let Some(s) = sign_in {
            conn.sign_in(s).await?;
        }
        Ok(conn)
    }

    async fn sign_in(&mut self, s: &NodeSignIn) -> Result<(), OpenError> {
        let req =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        let hs: SaslHandshakeResponse = self
            .call(ApiKey::SaslHandshake, 1, &req)
            .await
            .map_err(OpenError::Connect)?;
        if hs.error_code != 0 {
            return Err(OpenError::SignIn(format!(
                "SASL/PLAIN refused (error {}); the leader offers {:?}",
                hs.error_code,
                hs.mechanisms.iter().map(|m| m.as_str()).collect::<Vec<_>>()
            )));
        }
        let mut plain = Vec::with_capacity(2 + s.user.len() + s.password.len());
        plain.push(0);
        plain.extend_from_slice(s.user.as_bytes());
        plain.push(0);
        plain.extend_from_slice(s.password.as_bytes());
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(plain));
        let auth: SaslAuthenticateResponse = self
            .call(ApiKey::SaslAuthenticate, 2, &req)
            .await
            .map_err(OpenError::Connect)?;
        if auth.error_code != 0 {
            return Err(OpenError::SignIn(format!(
                "as {} (error {}): {} (every node of a cluster needs the same admin token)",
                s.user,
                auth.error_code,
                auth.error_message.as_deref().unwrap_or("")
            )));
        }
        Ok(())
    }

    /// Sends one request and reads its answer, within `CALL_TIMEOUT`.
    async fn call<Q: Encodable, A: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Q,
    ) -> Result<A, String> {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str("weir-replica-fetcher")))
            .encode(&mut buf, key.request_header_version(version))
            .map_err(|e| format!("encoding a {key:?} header: {e}"))?;
        req.encode(&mut buf, version)
            .map_err(|e| format!("encoding {key:?}: {e}"))?;
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let exchange = async {
            self.stream
                .write_all(&buf)
                .await
                .map_err(|e| format!("sending {key:?}: {e}"))?;
            let mut len = [0u8; 4];
            self.stream
                .read_exact(&mut len)
                .await
                .map_err(|e| format!("reading {key:?}'s answer: {e}"))?;
            let len = u32::from_be_bytes(len) as usize;
            if len > MAX_FRAME {
                return Err(format!(
                    "a {len}-byte answer is over the {MAX_FRAME}-byte bound"
                ));
            }
            let mut frame = vec![0u8; len];
            self.stream
                .read_exact(&mut frame)
                .await
                .map_err(|e| format!("reading {key:?}'s answer: {e}"))?;
            Ok::<Bytes, String>(Bytes::from(frame))
        };
        let timer = Box::pin(glommio::timer::sleep(CALL_TIMEOUT));
        let mut frame = match select(Box::pin(exchange), timer).await {
            Either::Left((r, _)) => r?,
            Either::Right(_) => {
                return Err(format!("{key:?} not answered within {CALL_TIMEOUT:?}"))
            }
        };
        let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
            .map_err(|e| format!("decoding {key:?}'s answer header: {e}"))?;
        if header.correlation_id != id {
            return Err(format!(
                "answer {} to request {id}: the connection is out of step",
                header.correlation_id
            ));
        }
        A::decode(&mut frame, version).map_err(|e| format!("decoding {key:?}'s answer: {e}"))
    }
}
