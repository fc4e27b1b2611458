//! What the group state machine takes and gives: its settings, states,
//! JoinGroup and SyncGroup requests and answers, and members.

use std::time::Duration;

use bytes::Bytes;
use futures::channel::oneshot;

use crate::error::ErrorCode;

/// Group settings (Kafka's `group.*` broker configs).
#[derive(Debug, Clone, Copy)]
pub struct GroupConfig {
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    /// How long a rebalance of an empty group waits for more members
    /// (`group.initial.rebalance.delay.ms`).
    pub initial_rebalance_delay: Duration,
    /// The group log is checkpointed when it grows past this (and past
    /// twice its size after the last checkpoint).
    pub log_checkpoint_bytes: u64,
    /// How often a KIP-848 consumer group member heartbeats
    /// (`group.consumer.heartbeat.interval.ms`).
    pub consumer_heartbeat_interval: Duration,
    /// How long such a member may stay silent
    /// (`group.consumer.session.timeout.ms`).
    pub consumer_session_timeout: Duration,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout: Duration::from_millis(6_000),
            max_session_timeout: Duration::from_millis(1_800_000),
            initial_rebalance_delay: Duration::from_millis(3_000),
            log_checkpoint_bytes: 8 << 20,
            consumer_heartbeat_interval: Duration::from_millis(5_000),
            consumer_session_timeout: Duration::from_millis(45_000),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, as the coordinator needs it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// JoinGroup v0 has none: the session timeout is used.
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a new dynamic member first gets MEMBER_ID_REQUIRED.
    pub require_known_member_id: bool,
}

/// A member as the leader sees it in its JoinGroup response.
#[derive(Debug, Clone)]
pub struct JoinedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup answer.
#[derive(Debug, Clone)]
pub struct JoinResult {
    pub error: ErrorCode,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinedMember>,
    /// A static leader rejoining a stable group keeps the current assignment.
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(error: ErrorCode, member_id: &str) -> JoinResult {
        JoinResult {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup request, as the coordinator needs it.
#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub generation: i32,
    /// v5: checked against the group's when given.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's assignment: (member id, assignment).
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup answer.
#[derive(Debug, Clone)]
pub struct SyncResult {
    pub error: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ErrorCode) -> SyncResult {
        SyncResult {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// What waiting for a join or sync gives: the answer now, or later.
pub enum Answer<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}
