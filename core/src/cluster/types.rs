//! The metadata quorum's types: what its log holds (`Command`), what
//! applying one answers (`Applied`), and the Raft type configuration.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, ClusterNode};

openraft::declare_raft_types!(
    /// The metadata quorum's Raft: node ids are weir's node ids (as u64),
    /// a node's Raft address is its `--peer-addr`.
    pub Meta:
        D = Command,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<Meta>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One change to the cluster's catalog, as the metadata log holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Command {
    /// The cluster's first catalog: the catalog of the node that started
    /// it (a single node's topics, users and offsets carry over). Applied
    /// only to a catalog nothing has seeded yet; the node leads the
    /// topics it brings.
    Seed { node: i32, catalog: Box<Catalog> },
    /// Topics, users and ACLs as a node changed them, made on the
    /// catalog whose `admin_version` was `base`: applied only if no other
    /// change came between (else `Applied::Conflict`).
    Change { base: u64, catalog: Box<Catalog> },
    /// A node says where it is (at every start).
    Register(ClusterNode),
    /// The controller fences a node silent past its session timeout, or
    /// lifts the fence when it is heard again.
    Fence { node: i32, fenced: bool },
    /// A block of `count` producer ids for one node.
    ProducerIds { count: i64 },
    /// A partition's leader changes its in-sync replicas (Kafka's
    /// AlterPartition): applied only while it still leads in
    /// `leader_epoch` and the partition is at `partition_epoch`.
    AlterIsr(IsrChange),
    /// A node stops on purpose (Kafka's controlled shutdown): it is
    /// fenced and its leaderships move to other in-sync replicas before
    /// it goes; applied only to the incarnation registered.
    ShutDown { node: i32, incarnation: u64 },
    /// Kafka's ElectLeaders: `partitions` (every replicated partition
    /// if `None`) get their preferred replica as leader, or with
    /// `unclean`, a leaderless one gets any live replica.
    ElectLeaders {
        partitions: Option<Vec<(String, i32)>>,
        unclean: bool,
    },
    /// Kafka's AlterPartitionReassignments: each partition moves to its
    /// target replicas (`None`: the move under way is cancelled).
    Reassign(Vec<crate::replication::reassign::Move>),
    /// Kafka's UnregisterBroker: the node leaves the cluster's nodes;
    /// refused while it still keeps a copy of a partition.
    Unregister { node: i32 },
}

/// One AlterPartition: the ISR a leader asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsrChange {
    pub topic: String,
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// What applying a command answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Applied {
    /// The catalog is at this version now.
    Version(u64),
    /// A change made on an older catalog than the current one.
    Conflict { admin_version: u64 },
    /// Nothing to do (a seed of a seeded catalog, a fence already so).
    Unchanged,
    /// The first id of the block given.
    ProducerIds { start: i64 },
    /// Not applied, and why (an ISR change from a deposed leader, or on
    /// an older partition epoch).
    Refused(String),
    /// What each election asked for did (with every partition asked for
    /// by name; of all partitions, only those it changed or could not).
    Elections(Vec<(String, i32, crate::replication::Election)>),
    /// What each reassignment asked for did.
    Reassignments(Vec<(String, i32, crate::replication::reassign::Reassignment)>),
}
