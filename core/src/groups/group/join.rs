//! JoinGroup: members joining (new, known, static ones replacing their
//! old member id), the rebalance they start, and its completion when every
//! member has rejoined or the rebalance timeout passes.

use std::time::Instant;

use super::*;

impl Group {
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

    pub(super) fn prepare_rebalance(&mut self, now: Instant, cfg: &GroupConfig) {
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
}
