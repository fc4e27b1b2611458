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

pub mod schema;
#[cfg(test)]
mod tests;

/// Kafka's limit on topic name length.
pub const MAX_TOPIC_NAME_LEN: usize = 249;
/// The most partitions one topic may have (a named limit, as every queue).
pub const MAX_PARTITIONS: i32 = 10_000;

/// A topic's configs, as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub max_message_bytes: i32,
    pub segment_bytes: i64,
    pub segment_ms: i64,
    /// Absent from catalogs written before it existed: `delete`.
    #[serde(default)]
    pub cleanup_policy: CleanupPolicy,
    /// Kafka's `message.timestamp.type`: `LogAppendTime` stamps every batch
    /// with the time it is appended (absent from older catalogs: false,
    /// `CreateTime`).
    #[serde(default)]
    pub log_append_time: bool,
    /// Compaction's configs, as Kafka names them (absent from older
    /// catalogs: Kafka's defaults).
    #[serde(default = "default_delete_retention_ms")]
    pub delete_retention_ms: i64,
    #[serde(default)]
    pub min_compaction_lag_ms: i64,
    #[serde(default = "default_max_compaction_lag_ms")]
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`, in millionths.
    #[serde(default = "default_min_dirty_ratio_ppm")]
    pub min_cleanable_dirty_ratio_ppm: u32,
    /// Which configs the topic set itself (bit `i`: `CONFIG_NAMES[i]`),
    /// even to their default values: DescribeConfigs reports those as the
    /// topic's own, as Kafka does (absent from older catalogs: none).
    #[serde(default)]
    pub explicit: u16,
    /// `min.insync.replicas`: an acks=all produce is taken only while at
    /// least this many replicas (the leader among them) are in sync, and
    /// answered once they all have it durable. Capped by the partition's
    /// replicas, so a topic of one replica takes acks=all (absent from
    /// older catalogs: the default).
    #[serde(default = "default_min_insync_replicas")]
    pub min_insync_replicas: i32,
}

fn default_min_insync_replicas() -> i32 {
    2
}

fn default_delete_retention_ms() -> i64 {
    weir_storage::Compaction::default().delete_retention_ms
}
fn default_max_compaction_lag_ms() -> i64 {
    weir_storage::Compaction::default().max_lag_ms
}
fn default_min_dirty_ratio_ppm() -> u32 {
    weir_storage::Compaction::default().min_dirty_ratio_ppm
}

/// Kafka's `cleanup.policy`. Old segments go by retention under `delete`
/// (and `compact,delete`). Under `compact` (and `compact,delete`) the
/// log is compacted (`weir_storage::log` cleans it: the latest record per
/// key stays) and, under `compact` alone, retention deletes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupPolicy {
    #[default]
    Delete,
    Compact,
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether the topic is compacted (`compact` or `compact,delete`):
    /// every record needs a key.
    pub fn compacts(self) -> bool {
        self != CleanupPolicy::Delete
    }

    fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut parts: Vec<&str> = value.split(',').map(str::trim).collect();
        parts.sort_unstable();
        parts.dedup();
        match parts[..] {
            ["delete"] => Some(CleanupPolicy::Delete),
            ["compact"] => Some(CleanupPolicy::Compact),
            ["compact", "delete"] => Some(CleanupPolicy::CompactDelete),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            cleanup_policy: CleanupPolicy::Delete,
            log_append_time: false,
            delete_retention_ms: default_delete_retention_ms(),
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: default_max_compaction_lag_ms(),
            min_cleanable_dirty_ratio_ppm: default_min_dirty_ratio_ppm(),
            explicit: 0,
            min_insync_replicas: default_min_insync_replicas(),
        }
    }
}

/// The configs DescribeConfigs reports and CreateTopics accepts.
pub const CONFIG_NAMES: [&str; 12] = [
    "cleanup.policy",
    "message.timestamp.type",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "segment.bytes",
    "segment.ms",
    "delete.retention.ms",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
    "min.insync.replicas",
];

impl TopicConfig {
    /// Sets one config from its Kafka name and text value: the topic's own
    /// from then on.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), KafkaError> {
        self.assign(name, value)?;
        self.explicit |= Self::bit(name);
        Ok(())
    }

    /// Whether the topic set `name` itself (else it has the default).
    pub fn is_set(&self, name: &str) -> bool {
        self.explicit & Self::bit(name) != 0
    }

    fn bit(name: &str) -> u16 {
        CONFIG_NAMES
            .iter()
            .position(|n| *n == name)
            .map_or(0, |i| 1 << i)
    }

    fn assign(&mut self, name: &str, value: &str) -> Result<(), KafkaError> {
        let bad = || {
            KafkaError::new(
                ErrorCode::InvalidConfig,
                format!("invalid value {value:?} for config {name}"),
            )
        };
        if !CONFIG_NAMES.contains(&name) {
            return Err(KafkaError::new(
                ErrorCode::InvalidConfig,
                format!("unknown topic config {name}"),
            ));
        }
        // The configs whose values are words; the others are numbers.
        let expected = |what: &str| {
            KafkaError::new(
                ErrorCode::InvalidConfig,
                format!("invalid value {value:?} for config {name}: {what}"),
            )
        };
        if name == "cleanup.policy" {
            self.cleanup_policy = CleanupPolicy::parse(value)
                .ok_or_else(|| expected("delete, compact or compact,delete"))?;
            return Ok(());
        }
        if name == "message.timestamp.type" {
            self.log_append_time = match value.trim() {
                "CreateTime" => false,
                "LogAppendTime" => true,
                _ => return Err(expected("CreateTime or LogAppendTime")),
            };
            return Ok(());
        }
        if name == "min.cleanable.dirty.ratio" {
            let ratio: f64 = value.trim().parse().map_err(|_| bad())?;
            if !(0.0..=1.0).contains(&ratio) {
                return Err(expected("a ratio from 0 to 1"));
            }
            self.min_cleanable_dirty_ratio_ppm = (ratio * 1e6).round() as u32;
            return Ok(());
        }
        let n: i64 = value.trim().parse().map_err(|_| bad())?;
        match name {
            "retention.ms" if n >= -1 => self.retention_ms = n,
            "retention.bytes" if n >= -1 => self.retention_bytes = n,
            "max.message.bytes" if (0..=i32::MAX as i64).contains(&n) => {
                self.max_message_bytes = n as i32
            }
            "segment.bytes" if n >= 14 => self.segment_bytes = n,
            "segment.ms" if n >= 1 => self.segment_ms = n,
            "delete.retention.ms" if n >= 0 => self.delete_retention_ms = n,
            "min.compaction.lag.ms" if n >= 0 => self.min_compaction_lag_ms = n,
            "max.compaction.lag.ms" if n >= 1 => self.max_compaction_lag_ms = n,
            "min.insync.replicas" if (1..=i32::MAX as i64).contains(&n) => {
                self.min_insync_replicas = n as i32
            }
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// Puts one config back to its default (no longer the topic's own).
    pub fn reset(&mut self, name: &str) -> Result<(), KafkaError> {
        let default = TopicConfig::default().get(name).ok_or_else(|| {
            KafkaError::new(
                ErrorCode::InvalidConfig,
                format!("unknown topic config {name}"),
            )
        })?;
        self.assign(name, &default)?;
        self.explicit &= !Self::bit(name);
        Ok(())
    }

    /// The value of a config by its Kafka name.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            "min.cleanable.dirty.ratio" => {
                (self.min_cleanable_dirty_ratio_ppm as f64 / 1e6).to_string()
            }
            "cleanup.policy" => self.cleanup_policy.name().to_string(),
            "message.timestamp.type" => if self.log_append_time {
                "LogAppendTime"
            } else {
                "CreateTime"
            }
            .to_string(),
            _ => return None,
        })
    }

    pub fn log_config(&self) -> weir_storage::LogConfig {
        // Under `compact` alone retention deletes nothing (see CleanupPolicy).
        let keep_all = self.cleanup_policy == CleanupPolicy::Compact;
        let compaction = self
            .cleanup_policy
            .compacts()
            .then_some(weir_storage::Compaction {
                delete_retention_ms: self.delete_retention_ms,
                min_lag_ms: self.min_compaction_lag_ms,
                max_lag_ms: self.max_compaction_lag_ms,
                min_dirty_ratio_ppm: self.min_cleanable_dirty_ratio_ppm,
            });
        weir_storage::LogConfig {
            segment_bytes: self.segment_bytes.max(1) as u64,
            // As Kafka: the active segment is never cleaned, so a compacted
            // topic rolls it by `max.compaction.lag.ms` too.
            segment_ms: match compaction {
                Some(c) => self.segment_ms.min(c.max_lag_ms),
                None => self.segment_ms,
            },
            retention_ms: if keep_all { -1 } else { self.retention_ms },
            retention_bytes: if keep_all { -1 } else { self.retention_bytes },
            log_append_time: self.log_append_time,
            compaction,
        }
    }
}

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

/// The topic configs `kafka-reassign-partitions.sh --throttle` sets (and
/// `--verify` deletes): which replicas the throttle applies to, `*` or
/// `partition:broker,…`.
pub const THROTTLE_CONFIGS: [&str; 2] = [
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
];

/// Checks a throttled-replicas list: `*`, empty, or `partition:broker,…`.
pub fn check_throttled_replicas(name: &str, value: &str) -> Result<(), KafkaError> {
    let v = value.trim();
    let ok = v.is_empty()
        || v == "*"
        || v.split(',').all(|pair| {
            pair.trim().split_once(':').is_some_and(|(p, b)| {
                p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
            })
        });
    match ok {
        true => Ok(()),
        false => Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!("invalid value {value:?} for config {name}: *, or partition:broker pairs separated by commas"),
        )),
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

/// Checks a node config's name and value (`NODE_CONFIGS`).
pub fn check_node_config(name: &str, value: &str) -> Result<(), KafkaError> {
    if !NODE_CONFIGS.contains(&name) {
        return Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!(
                "{name} is not a node config changeable at run time (those are {})",
                NODE_CONFIGS.join(", ")
            ),
        ));
    }
    match value.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(()),
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
