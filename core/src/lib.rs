//! weir-core: the shard runtime.
//!
//! - [`shard`]: one executor per core, the channel mesh between them, and the
//!   routed operations (produce, fetch, list offsets, catalog changes).
//! - [`partition`]: a partition as its owner holds it: log, acks, waiters.
//! - [`cache`]: the per-shard tail cache of recent batches.
//! - [`memory`]: the bytes a shard lets requests and answers hold at once.
//! - [`catalog`]: topics, ids, configs and placement; owned by shard 0.
//! - [`config`]: node settings and named limits.
//! - [`groups`]: consumer groups: membership, rebalances, durable offsets.
//! - [`refusals`]: refused requests in the log, a few per window.
//! - [`producer_ids`]: producer ids unique across restarts (catalog shard).
//! - [`error`]: Kafka error codes.
//! - [`latency`]: per-shard latency histograms (produce, flush write, sync).
//! - [`sql`]: SQL statements over the tables (`POST /sql`).
//! - [`table`]: typed tables: schemas, records to rows, scans for SQL.
//! - [`txn`]: transactions: the coordinator (state machine, durable state,
//!   markers across shards).
//! - [`crash_point`]: named points where a test makes the node abort.
//! - [`listeners`]: who listens on a port (a live process, or a killed one's
//!   leftovers).
//! - [`watchdog`]: wakes a shard that slept through its own wake-up.

pub mod auth;
pub mod by_partition;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod counters;
pub use weir_storage::crash_point;
pub use weir_storage::timeline;
pub mod error;
pub mod groups;
pub mod latency;
pub mod leader_epoch;
pub mod listeners;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod partitioner;
pub mod producer_ids;
pub mod quota;
pub mod refusals;
pub mod registry;
pub mod replication;
pub mod shard;
pub mod sql;
pub mod table;
pub mod topic_partition;
pub mod txn;
pub mod watchdog;

pub use by_partition::{ByPartition, PartitionWork};
pub use config::NodeConfig;
pub use error::{ErrorCode, KafkaError};
pub use node::Node;
pub use shard::Shard;
pub use topic_partition::{TopicPartition, TopicPartitionRef};
// What the Kafka front end needs of storage, so it depends on this crate
// alone: stored batches in shared pieces, and what an append answers.
pub use weir_storage::{Appended, Chunks};
