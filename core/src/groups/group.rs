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

mod join;
mod protocol;
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
    pub offsets: BTreeMap<(String, i32), Committed>,
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
