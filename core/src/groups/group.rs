//! One consumer group and Kafka's classic group protocol:
//! Empty → PreparingRebalance → CompletingRebalance → Stable (→ Dead when
//! deleted). Everything here is synchronous and takes the time as an
//! argument; waiting members hold the receiving end of a oneshot that the
//! state machine completes when the rebalance moves on.
//!
//! The rules follow Kafka's GroupCoordinator: a join completes when every
//! member has rejoined (and no member id handed out is still pending) or when
//! the rebalance timeout passes, whichever is first; members that did not
//! rejoin are dropped (static members stay until their session expires); the
//! protocol is the one every member supports that most members prefer; the
//! leader's SyncGroup assignment is handed to every member.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::channel::oneshot;

use super::store::Committed;
use crate::error::ErrorCode;
use crate::topic_partition::TopicPartition;

mod join;
mod protocol;
#[cfg(test)]
mod tests;
pub use protocol::*;

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<oneshot::Sender<JoinResult>>,
    sync_waiter: Option<oneshot::Sender<SyncResult>>,
    heartbeat_deadline: Instant,
}

impl Member {
    /// This member's metadata for `protocol`.
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

pub struct Group {
    pub id: String,
    /// The protocol type as last written to the group log (`Some("")`: the
    /// group is stored without one); `None`: not stored yet.
    pub stored_type: Option<String>,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// In join order (the first becomes leader when there is none).
    pub members: Vec<Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until their holder
    /// joins with them or the session timeout passes.
    pending: HashMap<String, Instant>,
    /// group.instance.id → member id.
    statics: HashMap<String, String>,
    pub offsets: BTreeMap<TopicPartition, Committed>,
    /// A rebalance completes no earlier than this (initial delay)…
    join_not_before: Instant,
    /// …and no later than this (rebalance timeout).
    join_deadline: Instant,
    /// A KIP-848 consumer group's members and assignment (the group's
    /// offsets stay in `offsets`); `None` for a classic group.
    pub consumer: Option<super::consumer::ConsumerGroup>,
    /// Where the initial delay stops being extended.
    initial_delay_limit: Instant,
}

/// Kafka's limit on group ids is only that they are not empty.
pub fn valid_group_id(id: &str) -> bool {
    !id.is_empty()
}

impl Group {
    pub fn new(id: &str, now: Instant) -> Group {
        Group {
            id: id.to_string(),
            stored_type: None,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: Vec::new(),
            pending: HashMap::new(),
            statics: HashMap::new(),
            offsets: BTreeMap::new(),
            join_not_before: now,
            join_deadline: now,
            initial_delay_limit: now,
            consumer: None,
        }
    }

    fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    fn member_mut(&mut self, id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    pub fn has_member(&self, id: &str) -> bool {
        self.member(id).is_some()
    }

    fn new_member_id(&mut self, prefix: &str) -> String {
        format!("{prefix}-{}", uuid::Uuid::new_v4())
    }

    /// A static member whose instance id now belongs to another member id.
    fn fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        match instance_id.and_then(|i| self.statics.get(i)) {
            Some(current) => current != member_id,
            None => false,
        }
    }

    /// The protocols every member supports.
    fn common_protocols(&self) -> Vec<String> {
        let Some(first) = self.members.first() else {
            return Vec::new();
        };
        first
            .protocols
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| {
                self.members
                    .iter()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == n))
            })
            .collect()
    }

    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let common = self.common_protocols();
        protocols.iter().any(|(n, _)| common.contains(n))
    }

    /// Kafka's choice: among the protocols all members support, the one
    /// most members list first (ties go to the first member's order).
    fn select_protocol(&self) -> Option<String> {
        let common = self.common_protocols();
        let mut votes: Vec<(String, usize)> = common.iter().map(|c| (c.clone(), 0)).collect();
        for m in &self.members {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| common.contains(n)) {
                if let Some(v) = votes.iter_mut().find(|(c, _)| c == name) {
                    v.1 += 1;
                }
            }
        }
        let best = votes.iter().map(|(_, n)| *n).max()?;
        votes.into_iter().find(|(_, n)| *n == best).map(|(c, _)| c)
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members
            .iter()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default()
    }

    // ---- SyncGroup -----------------------------------------------------

    pub fn sync(&mut self, req: SyncRequest, now: Instant) -> Answer<SyncResult> {
        let SyncRequest {
            member_id,
            instance_id,
            generation,
            protocol_type,
            protocol_name,
            assignments,
        } = req;
        let (member_id, instance_id) = (member_id.as_str(), instance_id.as_deref());
        let (protocol_type, protocol_name) = (protocol_type.as_deref(), protocol_name.as_deref());
        let fail = |e| Answer::Now(SyncResult::error(e));
        if self.state == GroupState::Dead {
            return fail(ErrorCode::CoordinatorNotAvailable);
        }
        if self.fenced(member_id, instance_id) {
            return fail(ErrorCode::FencedInstanceId);
        }
        if !self.has_member(member_id) {
            return fail(ErrorCode::UnknownMemberId);
        }
        if generation != self.generation {
            return fail(ErrorCode::IllegalGeneration);
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|n| Some(n) != self.protocol.as_deref())
        {
            return fail(ErrorCode::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => fail(ErrorCode::UnknownMemberId),
            GroupState::PreparingRebalance => fail(ErrorCode::RebalanceInProgress),
            GroupState::Stable => {
                let m = self.member_mut(member_id).expect("member");
                m.heartbeat_deadline = now + m.session_timeout;
                let assignment = m.assignment.clone();
                Answer::Now(self.sync_result(assignment))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                {
                    let m = self.member_mut(member_id).expect("member");
                    m.heartbeat_deadline = now + m.session_timeout;
                    m.sync_waiter = Some(tx);
                }
                if self.leader.as_deref() == Some(member_id) {
                    let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in &mut self.members {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    self.propagate_assignments();
                }
                Answer::Later(rx)
            }
        }
    }

    fn sync_result(&self, assignment: Bytes) -> SyncResult {
        SyncResult {
            error: ErrorCode::None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment,
        }
    }

    fn propagate_assignments(&mut self) {
        let (pt, pn) = (self.protocol_type.clone(), self.protocol.clone());
        for m in &mut self.members {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult {
                    error: ErrorCode::None,
                    protocol_type: pt.clone(),
                    protocol_name: pn.clone(),
                    assignment: m.assignment.clone(),
                });
            }
        }
    }

    // ---- Heartbeat, LeaveGroup, expiry ------------------------------------

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> ErrorCode {
        if self.state == GroupState::Dead {
            return ErrorCode::CoordinatorNotAvailable;
        }
        if self.fenced(member_id, instance_id) {
            return ErrorCode::FencedInstanceId;
        }
        let state = self.state;
        let current = self.generation;
        let Some(m) = self.member_mut(member_id) else {
            return ErrorCode::UnknownMemberId;
        };
        if generation != current {
            return ErrorCode::IllegalGeneration;
        }
        m.heartbeat_deadline = now + m.session_timeout;
        match state {
            GroupState::Empty | GroupState::Dead => ErrorCode::UnknownMemberId,
            GroupState::PreparingRebalance => ErrorCode::RebalanceInProgress,
            GroupState::CompletingRebalance | GroupState::Stable => ErrorCode::None,
        }
    }

    /// LeaveGroup for one member (by member id, or by instance id for a
    /// static member).
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
        cfg: &GroupConfig,
    ) -> ErrorCode {
        if self.state == GroupState::Dead {
            return ErrorCode::CoordinatorNotAvailable;
        }
        let id = match instance_id {
            Some(instance) => match self.statics.get(instance) {
                None => return ErrorCode::UnknownMemberId,
                Some(current) if !member_id.is_empty() && current != member_id => {
                    return ErrorCode::FencedInstanceId
                }
                Some(current) => current.clone(),
            },
            None => {
                if self.pending.remove(member_id).is_some() {
                    self.try_complete_join(now);
                    return ErrorCode::None;
                }
                member_id.to_string()
            }
        };
        if !self.has_member(&id) {
            return ErrorCode::UnknownMemberId;
        }
        self.remove_member(&id, now, cfg);
        ErrorCode::None
    }

    fn remove_member(&mut self, id: &str, now: Instant, cfg: &GroupConfig) {
        let Some(at) = self.members.iter().position(|m| m.id == id) else {
            return;
        };
        let m = self.members.remove(at);
        if let Some(i) = &m.instance_id {
            if self.statics.get(i).map(String::as_str) == Some(id) {
                self.statics.remove(i);
            }
        }
        if let Some(w) = m.join_waiter {
            let _ = w.send(JoinResult::error(ErrorCode::UnknownMemberId, id));
        }
        if let Some(w) = m.sync_waiter {
            let _ = w.send(SyncResult::error(ErrorCode::UnknownMemberId));
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now, cfg);
                self.try_complete_join(now);
            }
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Drops members whose session ran out and completes a rebalance whose
    /// time is up. Members waiting in a join or sync are alive.
    pub fn tick(&mut self, now: Instant, cfg: &GroupConfig) {
        self.pending.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|m| {
                m.join_waiter.is_none() && m.sync_waiter.is_none() && m.heartbeat_deadline <= now
            })
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            log::info!(
                "group {}: member {id} left: no heartbeat within its session timeout",
                self.id
            );
            self.remove_member(&id, now, cfg);
        }
        self.try_complete_join(now);
    }

    // ---- offsets -----------------------------------------------------------

    /// Whether a commit with this generation and member may be written.
    pub fn check_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> ErrorCode {
        if self.state == GroupState::Dead {
            return ErrorCode::CoordinatorNotAvailable;
        }
        if generation < 0 && self.state == GroupState::Empty {
            // A consumer that manages its own partitions (no group membership).
            return ErrorCode::None;
        }
        if self.fenced(member_id, instance_id) {
            return ErrorCode::FencedInstanceId;
        }
        if (generation >= 0 || !member_id.is_empty() || instance_id.is_some())
            && !self.has_member(member_id)
        {
            return ErrorCode::UnknownMemberId;
        }
        if generation != self.generation {
            return ErrorCode::IllegalGeneration;
        }
        if self.state == GroupState::CompletingRebalance {
            return ErrorCode::RebalanceInProgress;
        }
        ErrorCode::None
    }

    /// Whether a member reads `topic`, by the consumer protocol's
    /// subscription metadata (for OffsetDelete). Metadata that does not
    /// parse counts as subscribed to everything, as Kafka does.
    pub fn subscribed_to(&self, topic: &str) -> bool {
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members.iter().any(|m| {
            parse_subscription(&m.metadata(&protocol))
                .is_none_or(|topics| topics.iter().any(|t| t == topic))
        })
    }

    /// Cancels every waiter (the group is deleted or the node stops).
    pub fn kill(&mut self) {
        self.state = GroupState::Dead;
        for m in &mut self.members {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult::error(ErrorCode::CoordinatorNotAvailable, &m.id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(ErrorCode::CoordinatorNotAvailable));
            }
        }
        self.members.clear();
    }
}

/// The topics of a ConsumerProtocolSubscription (every version starts with
/// the version and the topic array; none is flexible).
pub fn parse_subscription(b: &[u8]) -> Option<Vec<String>> {
    let n = i32::from_be_bytes(b.get(2..6)?.try_into().ok()?);
    let mut at = 6;
    let mut topics = Vec::new();
    for _ in 0..n.max(0) {
        let len = i16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?);
        at += 2;
        let len = usize::try_from(len).ok()?;
        topics.push(std::str::from_utf8(b.get(at..at + len)?).ok()?.to_string());
        at += len;
    }
    Some(topics)
}
