//! Kafka transactions: exactly-once produce and consume-transform-produce.
//!
//! - [`state`]: one transactional id's state machine, I/O-free.
//! - [`coordinator`]: its durable half, on the shard owning the id's
//!   group-log partition (ids and groups share those partitions).
//! - [`routed`]: the requests across shards: markers to the partitions'
//!   owners, offsets to the groups' owners, timeouts and recovery.
//! - [`remote`]: in a cluster, the markers and offsets of partitions and
//!   groups on other nodes, carried to them.
//!
//! The partitions' side (open transactions, the last stable offset, the
//! aborted transactions a read_committed reader skips) is the log's:
//! `weir_storage::producer_state`.

pub mod coordinator;
pub mod remote;
pub mod routed;
pub mod state;
