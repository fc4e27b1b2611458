//! A topic's configs: every name Kafka 4.1 accepts (`TOPIC_CONFIGS`, its
//! `LogConfig`), each checked as Kafka's `ConfigDef` checks it (type,
//! range, choices), kept in the catalog and reported with its source.
//!
//! The configs that change what weir does have typed fields read on the
//! hot paths (retention, segments, compaction, `max.message.bytes`,
//! `compression.type`, the timestamp bounds, `min.insync.replicas`,
//! `unclean.leader.election.enable`). The others are kept as set and
//! reported (`kept`): weir meets `flush.messages` and `flush.ms` by design
//! (it syncs before every ack), and has no index interval, preallocation,
//! delete delay or tiered storage to tune (docs/kafka-api.md says why for
//! each).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{ErrorCode, KafkaError};

/// What values a config takes, as Kafka's `ConfigDef` defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A LONG of at least this.
    Long(i64),
    /// An INT from the first to the second.
    Int(i32, i32),
    /// gzip's level: an INT from 1 to 9, or -1 (the codec's default).
    GzipLevel,
    /// A DOUBLE from 0 to 1.
    Ratio,
    Boolean,
    /// A STRING, one of these.
    OneOf(&'static [&'static str]),
    /// `cleanup.policy`'s LIST of `compact` and `delete`.
    Policy,
    /// A throttled-replicas LIST: `*`, or `partition:broker` pairs.
    Replicas,
}

impl Kind {
    /// Kafka's ConfigType number (DescribeConfigs v3+).
    pub fn type_code(self) -> i8 {
        match self {
            Kind::Boolean => 1,
            Kind::OneOf(_) => 2,
            Kind::Int(..) | Kind::GzipLevel => 3,
            Kind::Long(_) => 5,
            Kind::Ratio => 6,
            Kind::Policy | Kind::Replicas => 7,
        }
    }

    /// Whether Kafka's APPEND and SUBTRACT apply (a LIST).
    pub fn is_list(self) -> bool {
        matches!(self, Kind::Policy | Kind::Replicas)
    }
}

/// One topic config.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    /// Kafka 4.1's default, as DescribeConfigs reports it.
    pub kafka_default: &'static str,
    /// This node's default where it differs from Kafka's
    /// (`min.insync.replicas`: 2, so losing a node loses nothing): reported
    /// as the node's own (STATIC_BROKER_CONFIG).
    pub node_default: Option<&'static str>,
    /// Kafka's testing-only configs (`internal.segment.bytes`): accepted,
    /// reported only when set.
    pub internal: bool,
}

impl Spec {
    const fn new(name: &'static str, kind: Kind, kafka_default: &'static str) -> Spec {
        Spec {
            name,
            kind,
            kafka_default,
            node_default: None,
            internal: false,
        }
    }

    /// The value a topic that does not set it has.
    pub fn default(&self) -> &'static str {
        self.node_default.unwrap_or(self.kafka_default)
    }
}

const MAX: &str = "9223372036854775807";

/// Every topic config Kafka 4.1 accepts (its `LogConfig.configNames()`;
/// the Java test checks this list against the jar's).
pub const TOPIC_CONFIGS: &[Spec] = &[
    Spec::new("cleanup.policy", Kind::Policy, "delete"),
    Spec::new("compression.gzip.level", Kind::GzipLevel, "-1"),
    Spec::new("compression.lz4.level", Kind::Int(1, 17), "9"),
    Spec::new(
        "compression.type",
        Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        "producer",
    ),
    Spec::new("compression.zstd.level", Kind::Int(-131072, 22), "3"),
    Spec::new("delete.retention.ms", Kind::Long(0), "86400000"),
    Spec::new("file.delete.delay.ms", Kind::Long(0), "60000"),
    Spec::new("flush.messages", Kind::Long(1), MAX),
    Spec::new("flush.ms", Kind::Long(0), MAX),
    Spec::new(
        "follower.replication.throttled.replicas",
        Kind::Replicas,
        "",
    ),
    Spec::new("index.interval.bytes", Kind::Int(0, i32::MAX), "4096"),
    Spec {
        internal: true,
        ..Spec::new("internal.segment.bytes", Kind::Int(14, i32::MAX), "")
    },
    Spec::new("leader.replication.throttled.replicas", Kind::Replicas, ""),
    Spec::new("local.retention.bytes", Kind::Long(-2), "-2"),
    Spec::new("local.retention.ms", Kind::Long(-2), "-2"),
    Spec::new("max.compaction.lag.ms", Kind::Long(1), MAX),
    Spec::new("max.message.bytes", Kind::Int(0, i32::MAX), "1048588"),
    Spec::new("message.timestamp.after.max.ms", Kind::Long(0), "3600000"),
    Spec::new("message.timestamp.before.max.ms", Kind::Long(0), MAX),
    Spec::new(
        "message.timestamp.type",
        Kind::OneOf(&["CreateTime", "LogAppendTime"]),
        "CreateTime",
    ),
    Spec::new("min.cleanable.dirty.ratio", Kind::Ratio, "0.5"),
    Spec::new("min.compaction.lag.ms", Kind::Long(0), "0"),
    Spec {
        node_default: Some("2"),
        ..Spec::new("min.insync.replicas", Kind::Int(1, i32::MAX), "1")
    },
    Spec::new("preallocate", Kind::Boolean, "false"),
    Spec::new("remote.log.copy.disable", Kind::Boolean, "false"),
    Spec::new("remote.log.delete.on.disable", Kind::Boolean, "false"),
    Spec::new("remote.storage.enable", Kind::Boolean, "false"),
    Spec::new("retention.bytes", Kind::Long(i64::MIN), "-1"),
    Spec::new("retention.ms", Kind::Long(-1), "604800000"),
    Spec::new("segment.bytes", Kind::Int(1 << 20, i32::MAX), "1073741824"),
    Spec::new("segment.index.bytes", Kind::Int(4, i32::MAX), "10485760"),
    Spec::new("segment.jitter.ms", Kind::Long(0), "0"),
    Spec::new("segment.ms", Kind::Long(1), "604800000"),
    Spec::new("unclean.leader.election.enable", Kind::Boolean, "false"),
];

/// The topic configs `kafka-reassign-partitions.sh --throttle` sets (and
/// `--verify` deletes): which replicas the throttle applies to. Kept on
/// the topic (`TopicMeta::throttled_replicas`), not in its `TopicConfig`.
pub const THROTTLE_CONFIGS: [&str; 2] = [
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
];

/// Kafka's node config for each topic config's default (its
/// `ServerTopicConfigSynonyms`): set at run time on a BROKER resource, or
/// by the node's flag for it, it is the default of every topic that does
/// not set its own (`catalog::topic_defaults` ranks the sources).
pub const NODE_SYNONYMS: &[(&str, &str)] = &[
    ("cleanup.policy", "log.cleanup.policy"),
    ("compression.gzip.level", "compression.gzip.level"),
    ("compression.lz4.level", "compression.lz4.level"),
    ("compression.type", "compression.type"),
    ("compression.zstd.level", "compression.zstd.level"),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    ("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    ("flush.messages", "log.flush.interval.messages"),
    ("flush.ms", "log.flush.interval.ms"),
    ("index.interval.bytes", "log.index.interval.bytes"),
    ("local.retention.bytes", "log.local.retention.bytes"),
    ("local.retention.ms", "log.local.retention.ms"),
    ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("max.message.bytes", "message.max.bytes"),
    (
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
    ),
    (
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
    ),
    ("message.timestamp.type", "log.message.timestamp.type"),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
    ),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    ("min.insync.replicas", "min.insync.replicas"),
    ("preallocate", "log.preallocate"),
    ("retention.bytes", "log.retention.bytes"),
    ("retention.ms", "log.retention.ms"),
    ("segment.bytes", "log.segment.bytes"),
    ("segment.index.bytes", "log.index.size.max.bytes"),
    ("segment.jitter.ms", "log.roll.jitter.ms"),
    ("segment.ms", "log.roll.ms"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
];

/// The node config that sets `topic_config`'s default, if any.
pub fn node_synonym(topic_config: &str) -> Option<&'static str> {
    NODE_SYNONYMS
        .iter()
        .find(|(t, _)| *t == topic_config)
        .map(|(_, n)| *n)
}

/// The topic config whose default the node config `name` sets, if any.
pub fn of_node_synonym(name: &str) -> Option<&'static str> {
    NODE_SYNONYMS
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(t, _)| *t)
}

/// The spec of a topic config by its name.
pub fn spec(name: &str) -> Option<&'static Spec> {
    TOPIC_CONFIGS.iter().find(|s| s.name == name)
}

fn unknown(name: &str) -> KafkaError {
    KafkaError::new(
        ErrorCode::InvalidConfig,
        format!("Unknown topic config name: {name}"),
    )
}

/// Checks `value` for the config `name` as Kafka's `ConfigDef` does and
/// returns it as Kafka writes it (trimmed; a list's items without
/// spaces); the error says what was wrong and what is expected.
pub fn check(name: &str, value: &str) -> Result<String, KafkaError> {
    let spec = spec(name).ok_or_else(|| unknown(name))?;
    let v = value.trim();
    let invalid = |what: String| {
        KafkaError::new(
            ErrorCode::InvalidConfig,
            format!("Invalid value {value} for configuration {name}: {what}"),
        )
    };
    match spec.kind {
        Kind::Long(min) => match v.parse::<i64>() {
            Ok(n) if n >= min => Ok(n.to_string()),
            Ok(_) => Err(invalid(format!("Value must be at least {min}"))),
            Err(_) => Err(invalid("Not a number of type LONG".into())),
        },
        Kind::Int(min, max) => match v.parse::<i32>() {
            Ok(n) if n < min => Err(invalid(format!("Value must be at least {min}"))),
            Ok(n) if n > max => Err(invalid(format!("Value must be no more than {max}"))),
            Ok(n) => Ok(n.to_string()),
            Err(_) => Err(invalid("Not a number of type INT".into())),
        },
        Kind::GzipLevel => match v.parse::<i32>() {
            Ok(n) if n == -1 || (1..=9).contains(&n) => Ok(n.to_string()),
            Ok(_) => Err(invalid("Value must be between 1 and 9, or -1".into())),
            Err(_) => Err(invalid("Not a number of type INT".into())),
        },
        Kind::Ratio => match v.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r.to_string()),
            Ok(_) => Err(invalid("Value must be between 0 and 1".into())),
            Err(_) => Err(invalid("Not a number of type DOUBLE".into())),
        },
        Kind::Boolean => match v.to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => Ok(b.to_string()),
            _ => Err(invalid("Expected value to be either true or false".into())),
        },
        Kind::OneOf(choices) => match choices.iter().find(|c| **c == v) {
            Some(c) => Ok(c.to_string()),
            None => Err(invalid(format!(
                "String must be one of: {}",
                choices.join(", ")
            ))),
        },
        Kind::Policy => CleanupPolicy::parse(v)
            .map(|p| p.name().to_string())
            .ok_or_else(|| invalid("String must be one of: compact, delete".into())),
        Kind::Replicas => {
            let ok = v.is_empty()
                || v == "*"
                || v.split(',').all(|pair| {
                    pair.trim().split_once(':').is_some_and(|(p, b)| {
                        p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                    })
                });
            match ok {
                true => Ok(v.split(',').map(str::trim).collect::<Vec<_>>().join(",")),
                false => Err(invalid(
                    "*, or partition:broker pairs separated by commas".into(),
                )),
            }
        }
    }
}

/// Kafka's `cleanup.policy`. Old segments go by retention under `delete`
/// (and `compact,delete`). Under `compact` (and `compact,delete`) the
/// log is compacted (`weir_storage::log` cleans it: the latest record per
/// key stays) and, under `compact` alone, retention deletes nothing. An
/// empty policy (Kafka 4.1 takes one) neither deletes nor compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupPolicy {
    #[default]
    Delete,
    Compact,
    CompactDelete,
    KeepAll,
}

impl CleanupPolicy {
    /// Whether the topic is compacted (`compact` or `compact,delete`):
    /// every record needs a key.
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }

    /// Whether retention deletes old segments.
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }

    fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut parts: Vec<&str> = value.split(',').map(str::trim).collect();
        parts.sort_unstable();
        parts.dedup();
        match parts[..] {
            [""] => Some(CleanupPolicy::KeepAll),
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
            CleanupPolicy::KeepAll => "",
        }
    }
}

/// Kafka's `compression.type`: how the node stores what producers send.
/// `Producer` keeps each batch as sent; a codec (or `uncompressed`)
/// recompresses every batch not already in it, as Kafka's broker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionType {
    #[default]
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl CompressionType {
    fn parse(v: &str) -> CompressionType {
        match v {
            "uncompressed" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            _ => CompressionType::Producer,
        }
    }

    fn name(self) -> &'static str {
        match self {
            CompressionType::Producer => "producer",
            CompressionType::Uncompressed => "uncompressed",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
    }

    /// The batch codec (Kafka's attribute bits) stored batches must have;
    /// `None`: as produced.
    pub fn codec(self) -> Option<i16> {
        use weir_storage::compression as c;
        match self {
            CompressionType::Producer => None,
            CompressionType::Uncompressed => Some(c::NONE),
            CompressionType::Gzip => Some(c::GZIP),
            CompressionType::Snappy => Some(c::SNAPPY),
            CompressionType::Lz4 => Some(c::LZ4),
            CompressionType::Zstd => Some(c::ZSTD),
        }
    }
}

/// A topic's configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The configs the topic set itself, even to their default values:
    /// DescribeConfigs reports those as the topic's own, as Kafka does
    /// (older catalogs wrote a bit set over the first twelve names,
    /// `EXPLICIT_BITS`; absent: none).
    #[serde(default = "explicit_unknown", deserialize_with = "explicit_names")]
    pub explicit: BTreeSet<String>,
    /// `min.insync.replicas`: an acks=all produce is taken only while at
    /// least this many replicas (the leader among them) are in sync, and
    /// answered once they all have it durable. Capped by the partition's
    /// replicas, so a topic of one replica takes acks=all (absent from
    /// older catalogs: the default).
    #[serde(default = "default_min_insync_replicas")]
    pub min_insync_replicas: i32,
    /// `compression.type`, and the level of the codec it names.
    #[serde(default)]
    pub compression: CompressionType,
    #[serde(default = "default_gzip_level")]
    pub gzip_level: i32,
    #[serde(default = "default_zstd_level")]
    pub zstd_level: i32,
    /// `message.timestamp.before.max.ms` / `after.max.ms`: a CreateTime
    /// record further than this before or after the node's clock is
    /// refused (INVALID_TIMESTAMP).
    #[serde(default = "default_before_max_ms")]
    pub timestamp_before_max_ms: i64,
    #[serde(default = "default_after_max_ms")]
    pub timestamp_after_max_ms: i64,
    /// `unclean.leader.election.enable`: when no in-sync replica lives, a
    /// live replica out of sync may lead (losing what it lacks).
    #[serde(default)]
    pub unclean_leader_election: bool,
    /// The configs that change nothing here, as set (checked, as Kafka
    /// writes them); absent: the default.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kept: BTreeMap<String, String>,
}

fn default_value<T: std::str::FromStr>(name: &str) -> T {
    let v = spec(name).expect("a topic config").default();
    v.parse().ok().expect("a default of its own type")
}
fn default_min_insync_replicas() -> i32 {
    default_value("min.insync.replicas")
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
fn default_gzip_level() -> i32 {
    default_value("compression.gzip.level")
}
fn default_zstd_level() -> i32 {
    default_value("compression.zstd.level")
}
fn default_before_max_ms() -> i64 {
    default_value("message.timestamp.before.max.ms")
}
fn default_after_max_ms() -> i64 {
    default_value("message.timestamp.after.max.ms")
}

/// The names older catalogs' `explicit` bits stood for, bit `i` for name `i`.
const EXPLICIT_BITS: [&str; 12] = [
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

/// Catalogs written before `explicit` existed: which configs the topic set
/// is not known, so each whose value is not the default counts as set.
const EXPLICIT_UNKNOWN: &str = "?";

fn explicit_unknown() -> BTreeSet<String> {
    BTreeSet::from([EXPLICIT_UNKNOWN.to_string()])
}

fn explicit_names<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Explicit {
        Bits(u16),
        Names(BTreeSet<String>),
    }
    Ok(match Explicit::deserialize(d)? {
        Explicit::Names(n) => n,
        Explicit::Bits(bits) => EXPLICIT_BITS
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, n)| n.to_string())
            .collect(),
    })
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            retention_ms: default_value("retention.ms"),
            retention_bytes: default_value("retention.bytes"),
            max_message_bytes: default_value("max.message.bytes"),
            segment_bytes: default_value("segment.bytes"),
            segment_ms: default_value("segment.ms"),
            cleanup_policy: CleanupPolicy::Delete,
            log_append_time: false,
            delete_retention_ms: default_delete_retention_ms(),
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: default_max_compaction_lag_ms(),
            min_cleanable_dirty_ratio_ppm: default_min_dirty_ratio_ppm(),
            explicit: BTreeSet::new(),
            min_insync_replicas: default_min_insync_replicas(),
            compression: CompressionType::Producer,
            gzip_level: default_gzip_level(),
            zstd_level: default_zstd_level(),
            timestamp_before_max_ms: default_before_max_ms(),
            timestamp_after_max_ms: default_after_max_ms(),
            unclean_leader_election: false,
            kept: BTreeMap::new(),
        }
    }
}

impl TopicConfig {
    /// Sets one config from its Kafka name and text value: the topic's own
    /// from then on. The throttled-replicas lists are the topic's
    /// (`TopicMeta::set_config`), not this.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), KafkaError> {
        self.settle_explicit();
        if THROTTLE_CONFIGS.contains(&name) {
            return Err(unknown(name));
        }
        let value = check(name, value)?;
        self.assign(name, &value)?;
        self.explicit.insert(name.to_string());
        Ok(())
    }

    /// Whether the topic set `name` itself (else it has the default).
    pub fn is_set(&self, name: &str) -> bool {
        self.explicit.contains(name)
            || (self.explicit.contains(EXPLICIT_UNKNOWN)
                && spec(name).is_some_and(|s| self.get(name).is_some_and(|v| v != s.default())))
    }

    /// Resolves a catalog's unknown `explicit` (`EXPLICIT_UNKNOWN`) before
    /// anything changes: the configs whose values are not their defaults
    /// were set. After that the topic follows defaults like any other.
    fn settle_explicit(&mut self) {
        if self.explicit.remove(EXPLICIT_UNKNOWN) {
            self.explicit = TOPIC_CONFIGS
                .iter()
                .filter(|s| self.get(s.name).is_some_and(|v| v != s.default()))
                .map(|s| s.name.to_string())
                .collect();
        }
    }

    /// Gives every config the topic does not set itself its default:
    /// `defaults`' value (the node's, by topic config name,
    /// `Catalog::topic_defaults`), else the spec's.
    pub fn follow_defaults(&mut self, defaults: &BTreeMap<String, String>) {
        self.settle_explicit();
        for spec in TOPIC_CONFIGS {
            if THROTTLE_CONFIGS.contains(&spec.name) || self.is_set(spec.name) {
                continue;
            }
            self.kept.remove(spec.name);
            let value = defaults
                .get(spec.name)
                .map_or(spec.default(), String::as_str);
            if self.assign(spec.name, value).is_err() {
                // Defaults are checked when set: only a spec default here.
                let _ = self.assign(spec.name, spec.default());
            }
            if value == spec.default() || spec.internal {
                self.kept.remove(spec.name);
            }
        }
    }

    /// Puts one config back to its default (no longer the topic's own).
    pub fn reset(&mut self, name: &str) -> Result<(), KafkaError> {
        self.settle_explicit();
        let spec = spec(name)
            .filter(|s| !THROTTLE_CONFIGS.contains(&s.name))
            .ok_or_else(|| unknown(name))?;
        self.assign(name, spec.default())?;
        self.kept.remove(name);
        self.explicit.remove(name);
        Ok(())
    }

    /// Stores a checked value (`check`'s form).
    fn assign(&mut self, name: &str, v: &str) -> Result<(), KafkaError> {
        let n = || v.parse::<i64>().unwrap_or_default();
        match name {
            "cleanup.policy" => self.cleanup_policy = CleanupPolicy::parse(v).unwrap_or_default(),
            "message.timestamp.type" => self.log_append_time = v == "LogAppendTime",
            "min.cleanable.dirty.ratio" => {
                let ratio: f64 = v.parse().unwrap_or(0.5);
                self.min_cleanable_dirty_ratio_ppm = (ratio * 1e6).round() as u32;
            }
            "compression.type" => self.compression = CompressionType::parse(v),
            "unclean.leader.election.enable" => self.unclean_leader_election = v == "true",
            "retention.ms" => self.retention_ms = n(),
            "retention.bytes" => self.retention_bytes = n(),
            "max.message.bytes" => self.max_message_bytes = n() as i32,
            "segment.bytes" => self.segment_bytes = n(),
            "segment.ms" => self.segment_ms = n(),
            "delete.retention.ms" => self.delete_retention_ms = n(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = n(),
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = n(),
            "min.insync.replicas" => self.min_insync_replicas = n() as i32,
            "compression.gzip.level" => self.gzip_level = n() as i32,
            "compression.zstd.level" => self.zstd_level = n() as i32,
            "message.timestamp.before.max.ms" => self.timestamp_before_max_ms = n(),
            "message.timestamp.after.max.ms" => self.timestamp_after_max_ms = n(),
            "remote.storage.enable" if v == "true" => {
                return Err(KafkaError::new(
                    ErrorCode::InvalidConfig,
                    "Tiered Storage functionality is disabled in the broker. Topic cannot be \
                     configured with remote log storage (weir keeps every segment on its own disk)",
                ))
            }
            _ => {
                self.kept.insert(name.to_string(), v.to_string());
            }
        }
        Ok(())
    }

    /// Checks the configs together, once a change has set them all (as
    /// Kafka's `LogConfig.validateValues`).
    pub fn validate(&self) -> Result<(), KafkaError> {
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(KafkaError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "conflict topic config setting min.compaction.lag.ms ({}) > max.compaction.lag.ms ({})",
                    self.min_compaction_lag_ms, self.max_compaction_lag_ms
                ),
            ));
        }
        Ok(())
    }

    /// The value of a config by its Kafka name (`None`: no such config,
    /// or an internal one not set).
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
            "message.timestamp.type" => match self.log_append_time {
                true => "LogAppendTime",
                false => "CreateTime",
            }
            .to_string(),
            "compression.type" => self.compression.name().to_string(),
            "compression.gzip.level" => self.gzip_level.to_string(),
            "compression.zstd.level" => self.zstd_level.to_string(),
            "message.timestamp.before.max.ms" => self.timestamp_before_max_ms.to_string(),
            "message.timestamp.after.max.ms" => self.timestamp_after_max_ms.to_string(),
            "unclean.leader.election.enable" => self.unclean_leader_election.to_string(),
            other => {
                let spec = spec(other)?;
                match self.kept.get(other) {
                    Some(v) => v.clone(),
                    None if spec.internal => return None,
                    None => spec.default().to_string(),
                }
            }
        })
    }

    /// The compression level `codec` is recompressed at (the topic's
    /// `compression.*.level`; `None`: the codec's own default).
    pub fn level(&self, codec: i16) -> Option<i32> {
        use weir_storage::compression as c;
        match codec {
            c::GZIP if self.gzip_level >= 1 => Some(self.gzip_level),
            c::ZSTD => Some(self.zstd_level),
            _ => None,
        }
    }

    pub fn log_config(&self) -> weir_storage::LogConfig {
        // Under `compact` alone retention deletes nothing (see CleanupPolicy).
        let keep_all = !self.cleanup_policy.deletes();
        let compaction = self
            .cleanup_policy
            .compacts()
            .then_some(weir_storage::Compaction {
                delete_retention_ms: self.delete_retention_ms,
                min_lag_ms: self.min_compaction_lag_ms,
                max_lag_ms: self.max_compaction_lag_ms,
                min_dirty_ratio_ppm: self.min_cleanable_dirty_ratio_ppm,
            });
        // Kafka's testing-only `internal.segment.bytes` wins over
        // `segment.bytes` (whose least is 1 MiB), as in Kafka.
        let segment_bytes = self
            .kept
            .get("internal.segment.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.segment_bytes);
        weir_storage::LogConfig {
            segment_bytes: segment_bytes.max(1) as u64,
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
