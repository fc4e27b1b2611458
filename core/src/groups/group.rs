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
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout: Duration::from_millis(6_000),
            max_session_timeout: Duration::from_millis(1_800_000),
            initial_rebalance_delay: Duration::from_millis(3_000),
            log_checkpoint_bytes: 8 << 20,
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
    pub offsets: BTreeMap<(String, i32), Committed>,
    /// A rebalance completes no earlier than this (initial delay)…
    join_not_before: Instant,
    /// …and no later than this (rebalance timeout).
    join_deadline: Instant,
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

    // ---- JoinGroup -----------------------------------------------------

    pub fn join(
        &mut self,
        req: JoinRequest,
        now: Instant,
        cfg: &GroupConfig,
    ) -> Answer<JoinResult> {
        let fail = |e: ErrorCode| Answer::Now(JoinResult::error(e, &req.member_id));
        let session = req.session_timeout_ms;
        if session < cfg.min_session_timeout.as_millis() as i32
            || session as i64 > cfg.max_session_timeout.as_millis() as i64
        {
            return fail(ErrorCode::InvalidSessionTimeout);
        }
        if self.state == GroupState::Dead {
            return fail(ErrorCode::CoordinatorNotAvailable);
        }
        if !self.supports(&req.protocol_type, &req.protocols) {
            return fail(ErrorCode::InconsistentGroupProtocol);
        }
        if req.member_id.is_empty() {
            self.join_unknown(req, now, cfg)
        } else {
            self.join_known(req, now, cfg)
        }
    }

    fn join_unknown(
        &mut self,
        req: JoinRequest,
        now: Instant,
        cfg: &GroupConfig,
    ) -> Answer<JoinResult> {
        if let Some(instance) = req.instance_id.clone() {
            let id = self.new_member_id(&instance);
            if let Some(old) = self.statics.get(&instance).cloned() {
                return self.replace_static(old, id, req, now, cfg);
            }
            self.statics.insert(instance, id.clone());
            return self.add_member(id, req, now, cfg);
        }
        let id = self.new_member_id(&req.client_id);
        if req.require_known_member_id {
            // The member must come back with this id; until then it counts
            // as pending (a rebalance waits for it).
            let deadline = now + Duration::from_millis(req.session_timeout_ms as u64);
            self.pending.insert(id.clone(), deadline);
            return Answer::Now(JoinResult::error(ErrorCode::MemberIdRequired, &id));
        }
        self.add_member(id, req, now, cfg)
    }

    fn join_known(
        &mut self,
        req: JoinRequest,
        now: Instant,
        cfg: &GroupConfig,
    ) -> Answer<JoinResult> {
        let id = req.member_id.clone();
        if self.pending.remove(&id).is_some() {
            return self.add_member(id, req, now, cfg);
        }
        if self.fenced(&id, req.instance_id.as_deref()) {
            return Answer::Now(JoinResult::error(ErrorCode::FencedInstanceId, &id));
        }
        if !self.has_member(&id) {
            return Answer::Now(JoinResult::error(ErrorCode::UnknownMemberId, &id));
        }
        let changed = {
            let m = self.member_mut(&id).expect("member");
            let changed = m.protocols != req.protocols;
            m.protocols = req.protocols;
            m.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
            m.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
            m.client_id = req.client_id;
            m.client_host = req.client_host;
            m.heartbeat_deadline = now + m.session_timeout;
            changed
        };
        let (tx, rx) = oneshot::channel();
        match self.state {
            GroupState::PreparingRebalance => {
                self.member_mut(&id).expect("member").join_waiter = Some(tx);
                self.try_complete_join(now);
                Answer::Later(rx)
            }
            GroupState::CompletingRebalance if !changed => {
                // A rejoin that changes nothing: the answer it already had.
                Answer::Now(self.join_result_for(&id))
            }
            GroupState::Stable if !changed && self.leader.as_deref() != Some(&id) => {
                Answer::Now(self.join_result_for(&id))
            }
            _ => {
                self.member_mut(&id).expect("member").join_waiter = Some(tx);
                self.prepare_rebalance(now, cfg);
                self.try_complete_join(now);
                Answer::Later(rx)
            }
        }
    }

    fn add_member(
        &mut self,
        id: String,
        req: JoinRequest,
        now: Instant,
        cfg: &GroupConfig,
    ) -> Answer<JoinResult> {
        let (tx, rx) = oneshot::channel();
        let session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        self.members.push(Member {
            id,
            instance_id: req.instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout,
            rebalance_timeout: Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64),
            protocol_type: req.protocol_type,
            protocols: req.protocols,
            assignment: Bytes::new(),
            join_waiter: Some(tx),
            sync_waiter: None,
            heartbeat_deadline: now + session_timeout,
        });
        if self.state == GroupState::PreparingRebalance {
            // A member joining during the initial delay extends it.
            if cfg.initial_rebalance_delay > Duration::ZERO && now < self.join_not_before {
                self.join_not_before =
                    (now + cfg.initial_rebalance_delay).min(self.initial_delay_limit);
            }
            self.join_deadline = self.join_deadline.max(now + self.max_rebalance_timeout());
        } else {
            self.prepare_rebalance(now, cfg);
        }
        self.try_complete_join(now);
        Answer::Later(rx)
    }

    /// A static member came back with a new member id: the old id is fenced
    /// and the new one takes its place and its assignment.
    fn replace_static(
        &mut self,
        old: String,
        new: String,
        req: JoinRequest,
        now: Instant,
        cfg: &GroupConfig,
    ) -> Answer<JoinResult> {
        let instance = req.instance_id.clone().expect("static member");
        self.statics.insert(instance, new.clone());
        let Some(m) = self.member_mut(&old) else {
            return self.add_member(new, req, now, cfg);
        };
        if let Some(w) = m.join_waiter.take() {
            let _ = w.send(JoinResult::error(ErrorCode::FencedInstanceId, &old));
        }
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(SyncResult::error(ErrorCode::FencedInstanceId));
        }
        let changed = m.protocols != req.protocols;
        m.id = new.clone();
        m.protocols = req.protocols;
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        m.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
        m.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
        m.heartbeat_deadline = now + m.session_timeout;
        if self.leader.as_deref() == Some(&old) {
            self.leader = Some(new.clone());
        }
        match self.state {
            GroupState::Stable if !changed => {
                // Nothing to rebalance: the member resumes its assignment.
                let mut r = self.join_result_for(&new);
                r.skip_assignment = self.leader.as_deref() == Some(&new);
                Answer::Now(r)
            }
            _ => {
                let (tx, rx) = oneshot::channel();
                self.member_mut(&new).expect("member").join_waiter = Some(tx);
                if self.state != GroupState::PreparingRebalance {
                    self.prepare_rebalance(now, cfg);
                }
                self.try_complete_join(now);
                Answer::Later(rx)
            }
        }
    }

    /// The current generation as `member` sees it (the leader with members).
    fn join_result_for(&self, member: &str) -> JoinResult {
        let protocol = self.protocol.clone().unwrap_or_default();
        let is_leader = self.leader.as_deref() == Some(member);
        JoinResult {
            error: ErrorCode::None,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member.to_string(),
            members: if is_leader {
                self.members
                    .iter()
                    .map(|m| JoinedMember {
                        member_id: m.id.clone(),
                        instance_id: m.instance_id.clone(),
                        metadata: m.metadata(&protocol),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            skip_assignment: false,
        }
    }

    fn prepare_rebalance(&mut self, now: Instant, cfg: &GroupConfig) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_assignments(ErrorCode::RebalanceInProgress);
        }
        let timeout = self.max_rebalance_timeout();
        if self.state == GroupState::Empty && cfg.initial_rebalance_delay > Duration::ZERO {
            self.join_not_before = now + cfg.initial_rebalance_delay.min(timeout);
            self.initial_delay_limit = now + timeout;
        } else {
            self.join_not_before = now;
        }
        self.join_deadline = now + timeout;
        self.state = GroupState::PreparingRebalance;
    }

    /// Clears every assignment and fails the members waiting in SyncGroup.
    fn reset_assignments(&mut self, error: ErrorCode) {
        for m in &mut self.members {
            m.assignment = Bytes::new();
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(error));
            }
        }
    }

    fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.iter().all(|m| m.join_waiter.is_some())
    }

    /// Completes the rebalance if every member is in or its time is up.
    pub fn try_complete_join(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let ready = self.all_joined() && now >= self.join_not_before;
        if ready || now >= self.join_deadline {
            self.complete_join(now);
        }
    }

    fn complete_join(&mut self, now: Instant) {
        // Dynamic members that did not rejoin in time are dropped; static
        // ones stay until their session runs out.
        self.members
            .retain(|m| m.join_waiter.is_some() || m.instance_id.is_some());
        self.pending.clear();
        let statics: Vec<_> = self
            .members
            .iter()
            .filter_map(|m| m.instance_id.clone())
            .collect();
        self.statics.retain(|k, _| statics.contains(k));
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            return;
        }
        self.protocol = self.select_protocol();
        let leader_gone = match &self.leader {
            Some(l) => !self.has_member(l),
            None => true,
        };
        if leader_gone {
            let joined = self.members.iter().find(|m| m.join_waiter.is_some());
            self.leader = Some(joined.unwrap_or(&self.members[0]).id.clone());
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.iter().map(|m| m.id.clone()).collect();
        for id in ids {
            let result = self.join_result_for(&id);
            let m = self.member_mut(&id).expect("member");
            m.heartbeat_deadline = now + m.session_timeout;
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(result);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> GroupConfig {
        GroupConfig {
            min_session_timeout: Duration::from_millis(1),
            max_session_timeout: Duration::from_secs(3600),
            initial_rebalance_delay: Duration::ZERO,
            ..GroupConfig::default()
        }
    }

    fn req(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            member_id: member.into(),
            instance_id: instance.map(String::from),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(p.to_string())))
                .collect(),
            require_known_member_id: true,
        }
    }

    /// The answer, which must be there already (now or completed).
    fn sreq(
        member: &str,
        instance: Option<&str>,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncRequest {
        SyncRequest {
            member_id: member.into(),
            instance_id: instance.map(String::from),
            generation,
            protocol_type: None,
            protocol_name: None,
            assignments,
        }
    }

    fn now_answer<T>(a: Answer<T>) -> T {
        match a {
            Answer::Now(t) => t,
            Answer::Later(mut rx) => rx.try_recv().unwrap().expect("answered"),
        }
    }

    fn later<T>(a: Answer<T>) -> oneshot::Receiver<T> {
        match a {
            Answer::Later(rx) => rx,
            Answer::Now(_) => panic!("expected to wait"),
        }
    }

    /// Joins a new dynamic member through MEMBER_ID_REQUIRED.
    fn join_new(g: &mut Group, now: Instant) -> (String, oneshot::Receiver<JoinResult>) {
        let first = now_answer(g.join(req("", None, &["range"]), now, &cfg()));
        assert_eq!(first.error, ErrorCode::MemberIdRequired);
        let id = first.member_id.clone();
        (
            id.clone(),
            later(g.join(req(&id, None, &["range"]), now, &cfg())),
        )
    }

    #[test]
    fn one_member_becomes_stable() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (id, mut rx) = join_new(&mut g, now);
        let r = rx.try_recv().unwrap().expect("joined");
        assert_eq!(r.error, ErrorCode::None);
        assert_eq!(r.generation_id, 1);
        assert_eq!(r.leader, id);
        assert_eq!(r.members.len(), 1);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let mut rx = later(g.sync(
            sreq(&id, None, 1, vec![(id.clone(), Bytes::from("a"))]),
            now,
        ));
        let s = rx.try_recv().unwrap().expect("synced");
        assert_eq!(s.assignment, Bytes::from("a"));
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.heartbeat(&id, None, 1, now), ErrorCode::None);
        assert_eq!(g.heartbeat(&id, None, 0, now), ErrorCode::IllegalGeneration);
        assert_eq!(
            g.heartbeat("nobody", None, 1, now),
            ErrorCode::UnknownMemberId
        );
    }

    #[test]
    fn second_member_rebalances_and_leave_rebalances_again() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut rx) = join_new(&mut g, now);
        rx.try_recv().unwrap().unwrap();
        now_answer(g.sync(sreq(&a, None, 1, vec![]), now));
        let (b, mut rxb) = join_new(&mut g, now);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert!(rxb.try_recv().unwrap().is_none(), "waits for the leader");
        assert_eq!(
            g.heartbeat(&a, None, 1, now),
            ErrorCode::RebalanceInProgress
        );
        assert_eq!(g.check_commit(&a, None, 1), ErrorCode::None);
        let mut rxa = later(g.join(req(&a, None, &["range"]), now, &cfg()));
        let ra = rxa.try_recv().unwrap().unwrap();
        let rb = rxb.try_recv().unwrap().unwrap();
        assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
        assert_eq!(ra.leader, a);
        assert_eq!(ra.members.len(), 2);
        assert!(rb.members.is_empty());
        assert_eq!(g.check_commit(&a, None, 2), ErrorCode::RebalanceInProgress);
        let mut wait_b = later(g.sync(sreq(&b, None, 2, vec![]), now));
        let assign = vec![
            (a.clone(), Bytes::from("pa")),
            (b.clone(), Bytes::from("pb")),
        ];
        let mut wait_a = later(g.sync(sreq(&a, None, 2, assign), now));
        assert_eq!(
            wait_b.try_recv().unwrap().unwrap().assignment,
            Bytes::from("pb")
        );
        assert_eq!(
            wait_a.try_recv().unwrap().unwrap().assignment,
            Bytes::from("pa")
        );
        assert_eq!(g.leave(&b, None, now, &cfg()), ErrorCode::None);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        let mut rxa = later(g.join(req(&a, None, &["range"]), now, &cfg()));
        assert_eq!(rxa.try_recv().unwrap().unwrap().generation_id, 3);
        assert_eq!(g.leave(&b, None, now, &cfg()), ErrorCode::UnknownMemberId);
    }

    #[test]
    fn quiet_member_expires() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut rx) = join_new(&mut g, now);
        rx.try_recv().unwrap().unwrap();
        now_answer(g.sync(sreq(&a, None, 1, vec![]), now));
        g.tick(now + Duration::from_secs(5), &cfg());
        assert!(g.has_member(&a));
        g.tick(now + Duration::from_secs(11), &cfg());
        assert!(!g.has_member(&a));
        assert_eq!(g.state, GroupState::Empty);
        assert_eq!(g.generation, 2);
    }

    #[test]
    fn rebalance_timeout_drops_members_that_do_not_rejoin() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let (a, mut rx) = join_new(&mut g, now);
        rx.try_recv().unwrap().unwrap();
        now_answer(g.sync(sreq(&a, None, 1, vec![]), now));
        let (_b, mut rxb) = join_new(&mut g, now);
        // a keeps heartbeating but never rejoins.
        for t in (5..30).step_by(5) {
            let at = now + Duration::from_secs(t);
            assert_eq!(g.heartbeat(&a, None, 1, at), ErrorCode::RebalanceInProgress);
            g.tick(at, &cfg());
        }
        g.tick(now + Duration::from_secs(29), &cfg());
        assert!(rxb.try_recv().unwrap().is_none());
        g.tick(now + Duration::from_secs(31), &cfg());
        let rb = rxb.try_recv().unwrap().unwrap();
        assert_eq!(rb.generation_id, 2);
        assert_eq!(g.members.len(), 1);
        assert_eq!(rb.leader, rb.member_id);
    }

    #[test]
    fn static_member_rejoins_without_rebalance_and_old_id_is_fenced() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let mut rx = later(g.join(req("", Some("i1"), &["range"]), now, &cfg()));
        let r = rx.try_recv().unwrap().unwrap();
        let old = r.member_id.clone();
        now_answer(g.sync(
            sreq(&old, Some("i1"), 1, vec![(old.clone(), Bytes::from("x"))]),
            now,
        ));
        // Restarted: same instance id, no member id.
        let r2 = now_answer(g.join(req("", Some("i1"), &["range"]), now, &cfg()));
        assert_eq!(r2.error, ErrorCode::None);
        assert_eq!(r2.generation_id, 1, "no rebalance");
        assert_ne!(r2.member_id, old);
        assert!(r2.skip_assignment, "the static leader keeps the assignment");
        let s = now_answer(g.sync(sreq(&r2.member_id, Some("i1"), 1, vec![]), now));
        assert_eq!(s.assignment, Bytes::from("x"));
        assert_eq!(
            g.heartbeat(&old, Some("i1"), 1, now),
            ErrorCode::FencedInstanceId
        );
        assert_eq!(g.state, GroupState::Stable);
    }

    #[test]
    fn protocols_must_overlap() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        let mut rx = later(g.join(req("", Some("i"), &["range", "roundrobin"]), now, &cfg()));
        rx.try_recv().unwrap().unwrap();
        let r = now_answer(g.join(req("", None, &["sticky"]), now, &cfg()));
        assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
        let mut other = req("", None, &["roundrobin"]);
        other.protocol_type = "connect".into();
        let r = now_answer(g.join(other, now, &cfg()));
        assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
    }

    #[test]
    fn protocol_chosen_by_votes() {
        let now = Instant::now();
        let mut g = Group::new("g", now);
        for (i, prefs) in [
            ["range", "roundrobin"],
            ["roundrobin", "range"],
            ["roundrobin", "range"],
        ]
        .iter()
        .enumerate()
        {
            let mut r = req("", Some(&format!("i{i}")), prefs);
            r.require_known_member_id = false;
            let _ = g.join(r, now, &cfg());
        }
        // The first member completed generation 1 alone; the others joined
        // a new rebalance, which completes when its time is up.
        g.tick(now + Duration::from_secs(31), &cfg());
        assert_eq!(g.protocol.as_deref(), Some("roundrobin"));
    }

    #[test]
    fn subscription_topics() {
        let mut b = vec![0, 1, 0, 0, 0, 2];
        for t in ["ab", "c"] {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
        }
        b.extend([0, 0, 0, 0]);
        assert_eq!(parse_subscription(&b), Some(vec!["ab".into(), "c".into()]));
        assert_eq!(parse_subscription(&b[..7]), None);
    }
}
