//! The catalog: every topic, its id, configs and the shard that owns each of
//! its partitions.
//!
//! Shard 0 owns the catalog: it alone changes it, writes it to
//! `DATA/catalog.json` (write, fsync, rename, fsync the directory) and then
//! hands every shard an immutable snapshot (`Arc<Catalog>`) over the message
//! channels. Other shards only read their snapshot.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, KafkaError};
pub use topic_config::{CleanupPolicy, TopicConfig, THROTTLE_CONFIGS};

pub mod schema;
#[cfg(test)]
mod tests;
pub mod topic_config;
mod topic_defaults;
pub use topic_defaults::{check_static_defaults, DefaultFrom, CLUSTER_ONLY};

/// Kafka's limit on topic name length.
pub const MAX_TOPIC_NAME_LEN: usize = 249;
/// The most partitions one topic may have (a named limit, as every queue).
pub const MAX_PARTITIONS: i32 = 10_000;

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    /// The topic id (Fetch v13+ and Metadata v10+ carry it).
    pub id: [u8; 16],
    /// `shards[p]` owns partition `p` (a shard of the node leading it).
    pub shards: Vec<usize>,
    /// In a cluster, `nodes[p]` leads partition `p` (`NO_LEADER` while
    /// none of its in-sync replicas lives); empty on a single node, which
    /// leads every partition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<i32>,
    /// A replicated topic's partitions (a replication factor above 1):
    /// `replication[p]` names partition `p`'s replicas, in-sync replicas
    /// and leader epoch. Empty when each partition has one replica, its
    /// leader (`nodes`), in epoch 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replication: Vec<Replicas>,
    pub config: TopicConfig,
    /// A typed table's schema (CREATE TABLE); `None`: a raw topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<schema::TableSchema>,
    /// The reassignment throttle's lists (`THROTTLE_CONFIGS`) as Kafka's
    /// tools set them: kept and reported; the throttle itself applies to
    /// every replica a reassignment adds (`Catalog::move_throttle`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub throttled_replicas: BTreeMap<String, String>,
}

/// `TopicMeta::nodes`' entry for a partition none of whose in-sync
/// replicas lives (Kafka's leader -1): it waits for one to come back.
pub const NO_LEADER: i32 = -1;

/// A replicated partition as the metadata quorum keeps it (Kafka's
/// `PartitionRecord`): where its copies are, which of them are in sync,
/// and the epochs that fence its old leaders and stale ISR changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicas {
    /// The nodes keeping a copy, the preferred leader first.
    pub replicas: Vec<i32>,
    /// The replicas holding every record below the high watermark
    /// durably (the leader among them): only these may become leader.
    pub isr: Vec<i32>,
    /// Bumped at every change of leader.
    pub leader_epoch: i32,
    /// Bumped at every change of leader or ISR (Kafka's partition
    /// epoch): an ISR change made on an older one is refused.
    pub partition_epoch: i32,
    /// While a reassignment moves the partition (KIP-455): the replicas
    /// being added (in `replicas`, catching up, not yet in sync) ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    /// ... and those to be removed once every target replica is in sync
    /// (`replication::reassign`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
}

impl Replicas {
    /// Whether a reassignment is moving this partition.
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas a reassignment under way moves to (all of them when
    /// none is).
    pub fn target(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|n| !self.removing.contains(n))
            .collect()
    }
}

impl TopicMeta {
    /// Sets one config by its Kafka name (CreateTopics, the config
    /// calls): the throttled-replicas lists on the topic, every other in
    /// its `TopicConfig`.
    pub fn set_config(&mut self, name: &str, value: &str) -> Result<(), KafkaError> {
        match THROTTLE_CONFIGS.contains(&name) {
            true => {
                let v = topic_config::check(name, value)?;
                self.throttled_replicas.insert(name.to_string(), v);
                Ok(())
            }
            false => self.config.set(name, value),
        }
    }

    /// Puts one config back to its default.
    pub fn reset_config(&mut self, name: &str) -> Result<(), KafkaError> {
        match THROTTLE_CONFIGS.contains(&name) {
            true => {
                self.throttled_replicas.remove(name);
                Ok(())
            }
            false => self.config.reset(name),
        }
    }

    /// A config's value and whether the topic set it itself (`None`: no
    /// such config, or an internal one not set).
    pub fn config_value(&self, name: &str) -> Option<(String, bool)> {
        match THROTTLE_CONFIGS.contains(&name) {
            true => Some(match self.throttled_replicas.get(name) {
                Some(v) => (v.clone(), true),
                None => (String::new(), false),
            }),
            false => Some((self.config.get(name)?, self.config.is_set(name))),
        }
    }

    pub fn partitions(&self) -> i32 {
        self.shards.len() as i32
    }

    /// Partition `p`'s replication, if the topic is replicated.
    pub fn replicas_of(&self, p: i32) -> Option<&Replicas> {
        self.replication.get(usize::try_from(p).ok()?)
    }

    /// The replication factor (1 for a topic that is not replicated).
    pub fn replication_factor(&self) -> usize {
        // A move under way keeps old and new replicas both: its target
        // is the partition's factor.
        self.replication.first().map_or(1, |r| r.target().len())
    }

    /// Partition `p`'s leader epoch (0 for a partition not replicated).
    pub fn leader_epoch(&self, p: i32) -> i32 {
        self.replicas_of(p).map_or(0, |r| r.leader_epoch)
    }

    /// Whether node `node` keeps a copy of partition `p` (a cluster's
    /// leader or replica; on a single node, every partition).
    pub fn hosted_by(&self, p: i32, node: i32) -> bool {
        match (self.replicas_of(p), self.nodes.get(p as usize)) {
            (Some(r), _) => r.replicas.contains(&node),
            (None, Some(&leader)) => leader == node,
            (None, None) => true,
        }
    }

    /// Where partition `p` lives: the node leading it (`None` on a single
    /// node) and that node's shard; `None` if there is no such partition.
    pub fn place(&self, p: i32) -> Option<(Option<i32>, usize)> {
        let i = usize::try_from(p).ok()?;
        let shard = *self.shards.get(i)?;
        Some((self.nodes.get(i).copied(), shard))
    }

    /// Where the partition's log lives, relative to the data directory.
    /// The id is in the name so a topic deleted and made again never meets
    /// the old files.
    pub fn partition_dir(&self, data_dir: &Path, partition: i32) -> std::path::PathBuf {
        data_dir
            .join("topics")
            .join(format!("{}~{}", self.name, hex(&self.id)))
            .join(partition.to_string())
    }

    pub fn topic_dir(&self, data_dir: &Path) -> std::path::PathBuf {
        data_dir
            .join("topics")
            .join(format!("{}~{}", self.name, hex(&self.id)))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The whole catalog. Immutable once shared: a change makes a new one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub cluster_id: String,
    /// Bumped by every change.
    pub version: u64,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Users who sign in (`auth::users`); none: sign-in is off unless a
    /// role token is set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, crate::auth::users::User>,
    /// Kafka ACLs, SQL grants among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<crate::auth::acl::Acl>,
    /// A cluster's nodes (`cluster`), by id; empty on a single node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<i32, ClusterNode>,
    /// Node configs changed at run time (Kafka's dynamic broker configs,
    /// IncrementalAlterConfigs on a BROKER resource): by the resource's
    /// name (a node id, or empty for the cluster-wide default), each
    /// config's value (`NODE_CONFIGS`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Client quotas (AlterClientQuotas): each entity's limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<crate::quota::ClientQuota>,
    /// Nodes removed by UnregisterBroker (until one registers again): a
    /// node still running after its removal no longer names itself to
    /// clients as it does before its first registration.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub unregistered: std::collections::BTreeSet<i32>,
    /// The `version` of the last change to topics, users or ACLs: a
    /// cluster applies a change only to the catalog it was made on.
    #[serde(default)]
    pub admin_version: u64,
    /// A cluster's next producer id not yet given to a node.
    #[serde(default)]
    pub next_producer_id: i64,
    /// In a cluster, the node coordinating each group slot: a group or
    /// transactional id belongs to slot `stable_hash(key) % len`. Dealt
    /// over the live nodes when first asked for (as Kafka makes its
    /// `__consumer_offsets` partitions), or all to the node whose single
    /// node catalog seeded the cluster (its groups' offsets are there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_nodes: Vec<i32>,
    /// The topic defaults (`topic_defaults`) the topics' configs follow:
    /// those of the node that last made them follow its own. `None`: not
    /// known (a catalog written before this was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub followed_defaults: Option<BTreeMap<String, String>>,
}

/// Group slots of a cluster (Kafka's `offsets.topic.num.partitions`).
pub const GROUP_SLOTS: usize = 50;

/// A cluster's replicated group logs (Kafka's `__consumer_offsets`, with
/// weir's own records): partition `s` holds the groups' offsets and the
/// transactional ids of slot `s`, and its leader coordinates them. Made
/// at the first FindCoordinator; clients cannot write or delete it.
pub const GROUPS_TOPIC: &str = "__weir_groups";

/// The group slot of a group or transactional id.
pub fn group_slot(key: &str) -> usize {
    (stable_hash(key) % GROUP_SLOTS as u64) as usize
}

/// One node of a cluster, as it registered with the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub id: i32,
    /// Where Kafka clients reach it.
    pub kafka_host: String,
    pub kafka_port: u16,
    /// Its HTTP address (`/sql`, the registry).
    pub http: String,
    /// Where the other nodes reach it.
    pub peer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// Its shard count: a partition placed there goes to one of them.
    pub shards: usize,
    /// With `--shard-ports`: shard `s` has a Kafka port of its own, this
    /// one plus `s`, and is a broker of its own (`broker_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_port_base: Option<u16>,
    /// Silent past its session timeout: not named in Metadata, given no
    /// new partitions.
    #[serde(default)]
    pub fenced: bool,
    /// The run of the node's process it registered from (new at each
    /// start, `config::incarnation`): a registration in a new incarnation
    /// is a restart, which the quorum takes fenced, as Kafka's controller
    /// takes a broker's registration (`cluster::state_machine`).
    #[serde(default)]
    pub incarnation: u64,
    /// Stopping on purpose (a controlled shutdown): fenced, its
    /// leaderships moved, and its fence kept until it registers again in
    /// a new incarnation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
}

/// In a cluster with `--shard-ports`, node `n`'s shard `s` is broker
/// `n × SHARD_BROKERS + s` (node 2's shard 1: broker 2000001): ids no
/// node of the cluster has, and each shard's node readable in it.
pub const SHARD_BROKERS: i32 = 1_000_000;

/// The highest node id that can serve `--shard-ports` in a cluster (its
/// shards' broker ids stay within an i32).
pub const MAX_SHARD_PORTS_NODE: i32 = i32::MAX / SHARD_BROKERS - 1;

impl ClusterNode {
    /// Whether `other` registers what this one did (fenced, stopping or
    /// not).
    pub fn same_registration(&self, other: &ClusterNode) -> bool {
        let mut other = other.clone();
        other.fenced = self.fenced;
        other.stopping = self.stopping;
        *self == other
    }

    /// The broker that serves what this node's shard `placed` owns (a
    /// placement's shard, taken modulo the node's shards as it does): the
    /// node, or with `--shard-ports` that shard.
    pub fn broker_of(&self, placed: usize) -> crate::config::Broker {
        let (id, port) = match self.shard_port_base {
            None => (self.id, self.kafka_port),
            Some(base) => {
                let s = placed % self.shards.max(1);
                (self.id * SHARD_BROKERS + s as i32, base + s as u16)
            }
        };
        crate::config::Broker {
            id,
            host: self.kafka_host.clone(),
            port,
            rack: self.rack.clone(),
        }
    }

    /// Every broker clients see of this node: the node, or each shard.
    pub fn brokers(&self) -> Vec<crate::config::Broker> {
        match self.shard_port_base {
            None => vec![self.broker_of(0)],
            Some(_) => (0..self.shards).map(|s| self.broker_of(s)).collect(),
        }
    }
}

/// The node configs changeable at run time (IncrementalAlterConfigs on a
/// BROKER resource), each a rate in bytes per second: what
/// `kafka-reassign-partitions.sh --throttle` sets on every node.
/// `follower.replication.throttled.rate` bounds what this node copies for
/// replicas a reassignment adds here; the leader's and the log-directory
/// rates are kept and reported (the follower's bound is the move's; weir
/// has one log directory per node).
pub const NODE_CONFIGS: [&str; 3] = [
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

/// Checks a node config set at run time on the BROKER resource `node`
/// (a node id, or empty for the cluster-wide default) and returns its
/// value as kept: a rate of `NODE_CONFIGS`, or the default of a topic
/// config under Kafka's node name for it (`topic_config::NODE_SYNONYMS`,
/// `log.retention.ms` and the like; see `topic_defaults`), which
/// only the cluster-wide resource takes for those of `CLUSTER_ONLY`.
pub fn check_node_config(node: &str, name: &str, value: &str) -> Result<String, KafkaError> {
    if let Some(topic_config) = topic_config::of_node_synonym(name) {
        if !node.is_empty() && CLUSTER_ONLY.contains(&topic_config) {
            return Err(KafkaError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "{name} decides the quorum's elections, so no one node sets it: set it on \
                     the default broker resource (kafka-configs.sh --entity-type brokers \
                     --entity-default) or on the topic, not on node {node}"
                ),
            ));
        }
        return topic_config::check(topic_config, value)
            .map_err(|e| KafkaError::new(e.code, e.message.replace(topic_config, name)));
    }
    if !NODE_CONFIGS.contains(&name) {
        return Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!(
                "{name} is not a node config changeable at run time (those are {}, and the \
                 topic config defaults: {})",
                NODE_CONFIGS.join(", "),
                topic_config::NODE_SYNONYMS
                    .iter()
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    match value.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n.to_string()),
        _ => Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!("invalid value {value:?} for config {name}: bytes per second, 0 or more"),
        )),
    }
}

impl Catalog {
    /// A node config changed at run time: the node's own, else the
    /// cluster-wide default's.
    pub fn node_config(&self, node: i32, name: &str) -> Option<&str> {
        let own = self.node_configs.get(&node.to_string());
        let default = self.node_configs.get("");
        own.and_then(|c| c.get(name))
            .or_else(|| default.and_then(|c| c.get(name)))
            .map(String::as_str)
    }

    /// The bytes per second node `node` copies for the replicas a
    /// reassignment adds to it: `follower.replication.throttled.rate` if
    /// set at run time, else `flag` (`--replication-throttle-bytes`); 0:
    /// unbounded.
    pub fn move_throttle(&self, node: i32, flag: u64) -> u64 {
        self.node_config(node, "follower.replication.throttled.rate")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(flag)
    }

    /// Every replicated partition: its topic, index, leader (`NO_LEADER`
    /// if none) and replication.
    pub fn replicated(&self) -> impl Iterator<Item = (&TopicMeta, i32, i32, &Replicas)> {
        self.topics.values().flat_map(|t| {
            t.replication.iter().enumerate().map(move |(p, r)| {
                let leader = t.nodes.get(p).copied().unwrap_or(NO_LEADER);
                (t, p as i32, leader, r)
            })
        })
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &[u8; 16]) -> Option<&TopicMeta> {
        self.topics.values().find(|t| &t.id == id)
    }

    /// The shard owning a partition, if the partition exists (on this
    /// node's shards or another node's: see `place`).
    pub fn shard_for(&self, topic: &str, partition: i32) -> Option<usize> {
        Some(self.topics.get(topic)?.place(partition)?.1)
    }

    /// Where a partition lives, if it exists: its node (`None` on a
    /// single node) and shard.
    pub fn place(&self, topic: &str, partition: i32) -> Option<(Option<i32>, usize)> {
        self.topics.get(topic)?.place(partition)
    }

    /// The nodes that take new partitions: registered and not fenced.
    pub fn live_nodes(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.values().filter(|n| !n.fenced)
    }

    /// Loads the catalog, or makes a new one. Placements recorded for more
    /// shards than run now are moved by the same hash, and the change saved.
    /// A damaged `catalog.json` (its CRC-32C trailer does not match, or it
    /// does not parse) gives way to `catalog.json.prev`, the catalog before
    /// the last change, with an error in the log; when both are damaged the
    /// node does not start, saying why.
    pub fn load_or_create(data_dir: &Path, nr_shards: usize) -> Result<Catalog, String> {
        let path = data_dir.join("catalog.json");
        let prev = data_dir.join("catalog.json.prev");
        let mut cat = match Self::read(&path)? {
            Some(Ok(cat)) => cat,
            found => {
                let damaged = match found {
                    Some(Err(why)) => Some(why),
                    _ => None,
                };
                match (Self::read(&prev)?, damaged) {
                    // A stop between setting the old catalog aside and
                    // writing the new one: the change was never answered.
                    (Some(Ok(cat)), None) => cat,
                    (Some(Ok(cat)), Some(why)) => {
                        let aside = data_dir.join("catalog.json.damaged");
                        log::error!(
                            "{why}; serving {} instead: the change made after it is lost \
                             (the data of a topic it made stays on disk, not served); the \
                             damaged file is kept as {}",
                            prev.display(),
                            aside.display()
                        );
                        std::fs::rename(&path, &aside)
                            .map_err(|e| format!("setting {} aside: {e}", path.display()))?;
                        cat
                    }
                    (Some(Err(prev_why)), Some(why)) => {
                        return Err(format!("{why}, and {prev_why}"))
                    }
                    (Some(Err(prev_why)), None) => return Err(prev_why),
                    (None, Some(why)) => return Err(why),
                    (None, None) => Catalog {
                        cluster_id: new_cluster_id(),
                        version: 0,
                        ..Catalog::default()
                    },
                }
            }
        };
        let mut moved = false;
        // A cluster's placements are its quorum's: never moved here (a
        // node running fewer shards serves them modulo its count).
        for t in cat.topics.values_mut().filter(|t| t.nodes.is_empty()) {
            for (p, shard) in t.shards.iter_mut().enumerate() {
                if *shard >= nr_shards {
                    *shard = placement(&t.name, p as i32, nr_shards);
                    moved = true;
                }
            }
        }
        if moved || cat.version == 0 || !path.exists() {
            cat.save(data_dir)?;
        }
        Ok(cat)
    }

    /// A catalog file: `None` when there is none, `Some(Err)` when it is
    /// damaged. Its JSON is followed by a line `crc32c XXXXXXXX` (files
    /// written before that line existed are taken as they are).
    fn read(path: &Path) -> Result<Option<Result<Catalog, String>>, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let damaged = |why: String| Ok(Some(Err(format!("{} is damaged: {why}", path.display()))));
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let last = trimmed
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let json = match trimmed[last..].strip_prefix(b"crc32c ") {
            Some(hex) => {
                let want = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok());
                if want != Some(crc32c::crc32c(&bytes[..last])) {
                    return damaged("its CRC-32C does not match".into());
                }
                &bytes[..last]
            }
            None => &bytes[..],
        };
        Ok(Some(serde_json::from_slice::<Catalog>(json).map_err(|e| {
            format!("{} is damaged: not a catalog: {e}", path.display())
        })))
    }

    /// Writes the catalog durably (`weir_storage::durable::replace`), the
    /// one it replaces kept as `catalog.json.prev`.
    pub fn save(&self, data_dir: &Path) -> Result<(), String> {
        let path = data_dir.join("catalog.json");
        let mut body = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        body.push(b'\n');
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(format!("crc32c {crc:08x}\n").as_bytes());
        match std::fs::rename(&path, data_dir.join("catalog.json.prev")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("setting {} aside: {e}", path.display())),
        }
        weir_storage::durable::replace(&path, &body)
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }
}

/// The shard a new partition goes to: a topic's partitions are spread
/// round-robin from a stable hash of its name.
pub fn placement(topic: &str, partition: i32, nr_shards: usize) -> usize {
    ((stable_hash(topic) as usize) + partition as usize) % nr_shards.max(1)
}

/// FNV-1a: stable across builds and platforms, unlike std's hasher, so
/// placements made before a restart hold after it.
pub fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Kafka's topic name rule: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), KafkaError> {
    let invalid = |why: &str| {
        KafkaError::new(
            ErrorCode::InvalidTopicException,
            format!("topic name {name:?} is invalid: {why}"),
        )
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name == "." || name == ".." {
        return Err(invalid("it cannot be . or .."));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(invalid("it is longer than 249 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(invalid(
            "only ASCII letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(())
}

fn new_cluster_id() -> String {
    let id = uuid::Uuid::new_v4();
    // Kafka cluster ids are 22-character URL-safe base64 of a UUID.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut n = u128::from_be_bytes(*id.as_bytes());
    let mut s = String::with_capacity(22);
    for _ in 0..22 {
        s.push(ALPHABET[(n & 63) as usize] as char);
        n >>= 6;
    }
    s
}

/// A fresh topic id (never all zeros: that means "no id" on the wire).
pub fn new_topic_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}
