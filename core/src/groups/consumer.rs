//! Consumer groups of KIP-848 (`group.protocol=consumer`): the coordinator
//! assigns, members only heartbeat. Kafka's `ConsumerGroup` and
//! `CurrentAssignmentBuilder`, I/O-free, with time passed in as ms so tests
//! use fake time (as `group.rs` for classic groups).
//!
//! - The **group epoch** goes up whenever what the assignment depends on
//!   changes: a member joins or leaves, a subscription or the server
//!   assignor changes, a subscribed topic gets partitions.
//! - The **target assignment** is recomputed by the group's assignor
//!   (`uniform`, sticky; or `range`) when it is older than the group epoch;
//!   its epoch is then the group epoch.
//! - Each **member** moves toward its target on its heartbeats: it first
//!   gives back (revokes) what is no longer its own, at its old epoch;
//!   once its heartbeat shows it no longer owns those, it takes the new
//!   epoch and every partition of its target that no other member still
//!   holds; partitions another member has yet to revoke come on a later
//!   heartbeat. A partition is never owned by two members at once.
//! - A member that misses its session timeout, or holds partitions it was
//!   asked to revoke past its rebalance timeout, is removed.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::ErrorCode;

/// A topic-partition by name.
pub type Tp = (String, i32);

/// The assignors a member may ask for (`group.remote.assignor`); the first
/// is the default.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// A member's epoch in a heartbeat that joins.
pub const JOIN: i32 = 0;
/// A member's epoch in a heartbeat that leaves.
pub const LEAVE: i32 = -1;
/// A static member's epoch in a heartbeat that leaves for now (it keeps
/// its partitions until its session times out).
pub const LEAVE_STATIC: i32 = -2;

/// Where a member is on its way to its target (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Owns its target.
    Stable,
    /// Must first give back partitions (at its old epoch).
    UnrevokedPartitions,
    /// At the new epoch, waiting for partitions others still hold.
    UnreleasedPartitions,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    /// The topics it subscribes to: those it names and those its regular
    /// expression matches now.
    pub subscribed: BTreeSet<String>,
    /// The topics it names.
    names: BTreeSet<String>,
    /// Its regular expression (KIP-848's `SubscribedTopicRegex`), whole
    /// topic names matched, as Kafka's RE2J `matches`.
    pub regex: Option<(String, regex::Regex)>,
    pub assignor: Option<String>,
    pub rebalance_timeout_ms: i64,
    /// What the member owns, as the coordinator sees it.
    pub assigned: BTreeSet<Tp>,
    /// What it was asked to give back and has not yet.
    pub revoking: BTreeSet<Tp>,
    /// The assignment last sent, so an unchanged one is not sent again.
    sent: Option<BTreeSet<Tp>>,
    last_heartbeat_ms: i64,
    /// When the member must have revoked by (rebalance timeout).
    revoke_deadline_ms: Option<i64>,
    /// A static member that left for now: its session still runs.
    away: bool,
}

/// The heartbeat as the group sees it (ConsumerGroupHeartbeat's fields;
/// `None` for a field the client left null: unchanged).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed: Option<Vec<String>>,
    /// `Some("")` drops the member's regular expression.
    pub regex: Option<String>,
    pub assignor: Option<String>,
    /// What the member says it owns.
    pub owned: Option<BTreeSet<Tp>>,
    pub client_id: String,
    pub client_host: String,
}

/// A heartbeat's answer: the member's id and epoch and, when it changed,
/// the partitions it should own now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub member_id: String,
    pub epoch: i32,
    pub assignment: Option<BTreeSet<Tp>>,
}

/// A refused heartbeat: the code and the message Kafka would send.
pub type Refusal = (ErrorCode, String);

#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    pub epoch: i32,
    pub target_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// Each member's target assignment (at `target_epoch`).
    pub target: BTreeMap<String, BTreeSet<Tp>>,
    /// The partition counts the target was computed from.
    topics_seen: BTreeMap<String, i32>,
    pub session_timeout_ms: i64,
}

impl ConsumerGroup {
    pub fn new(session_timeout_ms: i64) -> ConsumerGroup {
        ConsumerGroup {
            epoch: 0,
            target_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            topics_seen: BTreeMap::new(),
            session_timeout_ms,
        }
    }

    /// Kafka's state names: Empty, Assigning (the target is older than the
    /// group), Reconciling (some member is not at it yet), Stable.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.target_epoch < self.epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.target_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// The assignor the group uses: the one its members ask for most
    /// (ties: the first in `ASSIGNORS`).
    pub fn assignor(&self) -> &'static str {
        let mut best = ASSIGNORS[0];
        let mut most = 0;
        for a in ASSIGNORS {
            let n = self
                .members
                .values()
                .filter(|m| m.assignor.as_deref() == Some(a))
                .count();
            if n > most {
                most = n;
                best = a;
            }
        }
        best
    }

    /// Whether any member subscribes to `topic` (OffsetDelete refuses it).
    pub fn subscribed_to(&self, topic: &str) -> bool {
        self.members.values().any(|m| m.subscribed.contains(topic))
    }

    /// Checks an OffsetCommit's member and epoch (Kafka's
    /// `ConsumerGroup.validateOffsetCommit`): an admin's commit (no
    /// member, epoch -1) only to an empty group.
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> ErrorCode {
        if member_id.is_empty() && epoch < 0 {
            return if self.members.is_empty() {
                ErrorCode::None
            } else {
                ErrorCode::UnknownMemberId
            };
        }
        match self.members.get(member_id) {
            None => ErrorCode::UnknownMemberId,
            Some(m) if epoch != m.epoch => ErrorCode::StaleMemberEpoch,
            Some(_) => ErrorCode::None,
        }
    }

    /// One heartbeat. `topics`: every topic and its partition count;
    /// `new_member_id` is used when a v0 client joins without an id.
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topics: &BTreeMap<String, i32>,
        new_member_id: &mut dyn FnMut() -> String,
        now_ms: i64,
    ) -> Result<Answer, Refusal> {
        if hb.epoch == LEAVE || hb.epoch == LEAVE_STATIC {
            return self.leave(&hb, now_ms);
        }
        let member_id = if hb.member_id.is_empty() {
            if hb.epoch != JOIN {
                return Err((
                    ErrorCode::InvalidRequest,
                    "MemberId can't be empty.".to_string(),
                ));
            }
            new_member_id()
        } else {
            hb.member_id.clone()
        };
        let regex = match hb.regex.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(r) => match regex::Regex::new(&format!("^(?:{r})$")) {
                Ok(re) => Some(Some((r.to_string(), re))),
                Err(e) => {
                    return Err((
                        ErrorCode::InvalidRegularExpression,
                        format!("SubscribedTopicRegex {r} is not a valid regular expression: {e}"),
                    ))
                }
            },
        };
        if let Some(a) = hb.assignor.as_deref() {
            if !ASSIGNORS.contains(&a) {
                return Err((
                    ErrorCode::UnsupportedAssignor,
                    format!(
                        "ServerAssignor {a} is not supported. Supported assignors: uniform, range."
                    ),
                ));
            }
        }
        // Whether what the assignment depends on changed (one epoch per
        // heartbeat, however many things changed).
        let mut bump = false;
        if hb.epoch == JOIN {
            bump = self.join(member_id.clone(), &hb, now_ms)?;
        } else {
            let Some(m) = self.members.get(&member_id) else {
                return Err((
                    ErrorCode::UnknownMemberId,
                    format!("Member {member_id} is not a member of the group."),
                ));
            };
            let owned_fits = hb
                .owned
                .as_ref()
                .is_none_or(|o| o.is_subset(&m.assigned) || o.is_subset(&m.assigned_or_revoking()));
            let ok = hb.epoch == m.epoch || (hb.epoch == m.previous_epoch && owned_fits);
            if !ok {
                return Err((
                    ErrorCode::FencedMemberEpoch,
                    format!(
                        "The consumer group member has a smaller or larger member epoch ({}) than the one known by the group coordinator ({}).",
                        hb.epoch, m.epoch
                    ),
                ));
            }
            if hb.epoch == m.previous_epoch && hb.epoch != m.epoch {
                // It missed our last answer: send the assignment again.
                self.members.get_mut(&member_id).expect("member").sent = None;
            }
        }
        {
            let m = self.members.get_mut(&member_id).expect("member");
            m.last_heartbeat_ms = now_ms;
            m.away = false;
            if hb.rebalance_timeout_ms > 0 {
                m.rebalance_timeout_ms = hb.rebalance_timeout_ms as i64;
            }
            if let Some(s) = &hb.subscribed {
                m.names = s.iter().cloned().collect();
            }
            if let Some(r) = regex {
                m.regex = r;
            }
            if hb.assignor.is_some() && hb.assignor != m.assignor {
                m.assignor = hb.assignor.clone();
                bump = true;
            }
            if hb.rack_id.is_some() {
                m.rack_id = hb.rack_id.clone();
            }
        }
        // Subscriptions as the topics are now (a new topic may match a
        // member's regular expression).
        for m in self.members.values_mut() {
            let mut now: BTreeSet<String> = m.names.clone();
            if let Some((_, re)) = &m.regex {
                now.extend(topics.keys().filter(|t| re.is_match(t)).cloned());
            }
            if now != m.subscribed {
                m.subscribed = now;
                bump = true;
            }
        }
        let seen = self.subscribed_partitions(topics);
        if seen != self.topics_seen {
            bump = true;
        }
        if bump {
            self.epoch += 1;
        }
        if self.target_epoch < self.epoch {
            self.topics_seen = seen;
            self.compute_target();
        }
        self.reconcile(&member_id, hb.owned.as_ref(), now_ms);
        let m = self.members.get_mut(&member_id).expect("member");
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.sent = Some(m.assigned.clone());
        }
        Ok(Answer {
            member_id,
            epoch: m.epoch,
            assignment,
        })
    }

    /// A member joins (epoch 0); whether the group changed for it.
    fn join(&mut self, member_id: String, hb: &Heartbeat, now_ms: i64) -> Result<bool, Refusal> {
        if let Some(instance) = &hb.instance_id {
            let holder = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance))
                .map(|m| (m.id.clone(), m.away));
            match holder {
                // A static member back: it takes over the old member's
                // partitions and epoch, as Kafka replaces it.
                Some((old, true)) => {
                    let mut m = self.members.remove(&old).expect("member");
                    self.target
                        .remove(&old)
                        .map(|t| self.target.insert(member_id.clone(), t));
                    m.id = member_id.clone();
                    m.sent = None;
                    self.members.insert(member_id, m);
                    return Ok(false);
                }
                Some((old, false)) if old != member_id => {
                    return Err((
                        ErrorCode::UnreleasedInstanceId,
                        format!("Static member {old} with instance id {instance} cannot be replaced because it has not left the group."),
                    ))
                }
                _ => {}
            }
        }
        if let Some(m) = self.members.get_mut(&member_id) {
            // A member rejoining with its id: it owns nothing now.
            m.assigned.clear();
            m.revoking.clear();
            m.sent = None;
            m.epoch = 0;
            m.state = MemberState::Stable;
            return Ok(true);
        }
        self.members.insert(
            member_id.clone(),
            Member {
                id: member_id,
                instance_id: hb.instance_id.clone(),
                rack_id: hb.rack_id.clone(),
                client_id: hb.client_id.clone(),
                client_host: hb.client_host.clone(),
                epoch: 0,
                previous_epoch: -1,
                state: MemberState::Stable,
                subscribed: BTreeSet::new(),
                names: BTreeSet::new(),
                regex: None,
                assignor: None,
                rebalance_timeout_ms: hb.rebalance_timeout_ms.max(1) as i64,
                assigned: BTreeSet::new(),
                revoking: BTreeSet::new(),
                sent: None,
                last_heartbeat_ms: now_ms,
                revoke_deadline_ms: None,
                away: false,
            },
        );
        Ok(true)
    }

    fn leave(&mut self, hb: &Heartbeat, now_ms: i64) -> Result<Answer, Refusal> {
        let id = match (&hb.instance_id, hb.member_id.is_empty()) {
            (Some(i), _) => self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(i))
                .map(|m| m.id.clone()),
            (None, false) => Some(hb.member_id.clone()).filter(|m| self.members.contains_key(m)),
            (None, true) => None,
        };
        let Some(id) = id else {
            return Err((
                ErrorCode::UnknownMemberId,
                format!("Member {} is not a member of the group.", hb.member_id),
            ));
        };
        if hb.epoch == LEAVE_STATIC {
            // Keeps its partitions until it comes back or its session ends.
            let m = self.members.get_mut(&id).expect("member");
            m.away = true;
            m.last_heartbeat_ms = now_ms;
        } else {
            self.remove(&id);
        }
        Ok(Answer {
            member_id: hb.member_id.clone(),
            epoch: hb.epoch,
            assignment: None,
        })
    }

    fn remove(&mut self, id: &str) {
        if self.members.remove(id).is_some() {
            self.target.remove(id);
            self.epoch += 1;
        }
    }

    /// Members past their session, or past their rebalance timeout with
    /// partitions still to revoke, are removed. Returns who went.
    pub fn expire(&mut self, now_ms: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now_ms - m.last_heartbeat_ms > self.session_timeout_ms
                    || m.revoke_deadline_ms.is_some_and(|d| now_ms > d)
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        gone
    }

    /// Subscribed topics and their partition counts, as they are now.
    fn subscribed_partitions(&self, topics: &BTreeMap<String, i32>) -> BTreeMap<String, i32> {
        let mut out = BTreeMap::new();
        for m in self.members.values() {
            for t in &m.subscribed {
                if let Some(n) = topics.get(t) {
                    out.insert(t.clone(), *n);
                }
            }
        }
        out
    }

    /// The target assignment at the group epoch, by the group's assignor.
    fn compute_target(&mut self) {
        let target = match self.assignor() {
            "range" => range(&self.members, &self.topics_seen),
            _ => uniform(&self.members, &self.topics_seen, &self.target),
        };
        self.target = target;
        self.target_epoch = self.epoch;
    }

    /// Moves one member toward its target (Kafka's
    /// `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, id: &str, owned: Option<&BTreeSet<Tp>>, now_ms: i64) {
        let (state, epoch) = {
            let m = &self.members[id];
            (m.state, m.epoch)
        };
        if state == MemberState::UnrevokedPartitions {
            let still =
                owned.is_none_or(|o| o.iter().any(|tp| self.members[id].revoking.contains(tp)));
            if still {
                return;
            }
            let m = self.members.get_mut(id).expect("member");
            m.revoking.clear();
            m.revoke_deadline_ms = None;
        } else if epoch == self.target_epoch && state == MemberState::Stable {
            return;
        }
        let target = self.target.get(id).cloned().unwrap_or_default();
        let m = &self.members[id];
        let to_revoke: BTreeSet<Tp> = m.assigned.difference(&target).cloned().collect();
        if !to_revoke.is_empty() {
            let m = self.members.get_mut(id).expect("member");
            m.assigned = m.assigned.difference(&to_revoke).cloned().collect();
            m.revoking = to_revoke;
            m.state = MemberState::UnrevokedPartitions;
            m.revoke_deadline_ms = Some(now_ms + m.rebalance_timeout_ms);
            return;
        }
        // Free: not held (or still being given back) by anyone else.
        let held: BTreeSet<&Tp> = self
            .members
            .values()
            .filter(|o| o.id != id)
            .flat_map(|o| o.assigned.iter().chain(o.revoking.iter()))
            .collect();
        let free: BTreeSet<Tp> = target
            .iter()
            .filter(|tp| !held.contains(tp))
            .cloned()
            .collect();
        let target_epoch = self.target_epoch;
        let m = self.members.get_mut(id).expect("member");
        if m.epoch != target_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = target_epoch;
        }
        m.state = if free.len() == target.len() {
            MemberState::Stable
        } else {
            MemberState::UnreleasedPartitions
        };
        m.assigned = free;
    }
}

impl Member {
    fn assigned_or_revoking(&self) -> BTreeSet<Tp> {
        self.assigned.union(&self.revoking).cloned().collect()
    }
}

/// An empty assignment for every member.
fn nothing(members: &BTreeMap<String, Member>) -> BTreeMap<String, BTreeSet<Tp>> {
    members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect()
}

/// The members subscribing to `topic`, in member id order.
fn subscribers<'a>(members: &'a BTreeMap<String, Member>, topic: &str) -> Vec<&'a String> {
    members
        .values()
        .filter(|m| m.subscribed.contains(topic))
        .map(|m| &m.id)
        .collect()
}

/// Each topic's partitions spread evenly over the members subscribing to
/// it, each keeping what it had where the balance allows (Kafka's sticky
/// `uniform` assignor, in its simple form: balanced topic by topic).
fn uniform(
    members: &BTreeMap<String, Member>,
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, BTreeSet<Tp>>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out = nothing(members);
    for (topic, n) in topics {
        let subs = subscribers(members, topic);
        if subs.is_empty() {
            continue;
        }
        // A member's partitions of this topic.
        let count = |out: &BTreeMap<String, BTreeSet<Tp>>, m: &str| {
            out[m].iter().filter(|t| &t.0 == topic).count()
        };
        let quota = (*n as usize).div_ceil(subs.len());
        let mut unassigned = Vec::new();
        for p in 0..*n {
            let tp = (topic.clone(), p);
            let keeper = subs.iter().find(|m| {
                previous.get(m.as_str()).is_some_and(|s| s.contains(&tp))
                    && count(&out, m.as_str()) < quota
            });
            match keeper {
                Some(m) => {
                    out.get_mut(m.as_str()).expect("member").insert(tp);
                }
                None => unassigned.push(tp),
            }
        }
        for tp in unassigned {
            let least = subs
                .iter()
                .min_by_key(|m| (count(&out, m.as_str()), m.as_str()))
                .expect("a subscriber");
            out.get_mut(least.as_str()).expect("member").insert(tp);
        }
        // Even out what stickiness left uneven: the most loaded member
        // always holds a partition of this topic to give.
        loop {
            let most = *subs
                .iter()
                .max_by_key(|m| (count(&out, m.as_str()), m.as_str()))
                .expect("a subscriber");
            let least = *subs
                .iter()
                .min_by_key(|m| (count(&out, m.as_str()), m.as_str()))
                .expect("a subscriber");
            if count(&out, most) <= count(&out, least) + 1 {
                break;
            }
            let Some(moved) = out[most.as_str()].iter().rfind(|t| &t.0 == topic).cloned() else {
                break;
            };
            out.get_mut(most.as_str()).expect("member").remove(&moved);
            out.get_mut(least.as_str()).expect("member").insert(moved);
        }
    }
    out
}

/// Each topic's partitions in contiguous ranges over its subscribers in
/// member id order (Kafka's `range` assignor: co-partitioned topics land
/// together).
fn range(
    members: &BTreeMap<String, Member>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out = nothing(members);
    for (topic, n) in topics {
        let subs = subscribers(members, topic);
        if subs.is_empty() {
            continue;
        }
        let (per, extra) = (*n as usize / subs.len(), *n as usize % subs.len());
        let mut next = 0;
        for (i, m) in subs.iter().enumerate() {
            let take = per + usize::from(i < extra);
            for p in next..next + take {
                out.get_mut(m.as_str())
                    .expect("member")
                    .insert((topic.clone(), p as i32));
            }
            next += take;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics() -> BTreeMap<String, i32> {
        [
            ("t".to_string(), 4),
            ("u".to_string(), 2),
            ("other".to_string(), 1),
        ]
        .into()
    }

    fn join(g: &mut ConsumerGroup, id: &str, subs: &[&str], now: i64) -> Answer {
        g.heartbeat(
            Heartbeat {
                member_id: id.into(),
                epoch: JOIN,
                rebalance_timeout_ms: 10_000,
                subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
                owned: Some(BTreeSet::new()),
                ..Default::default()
            },
            &topics(),
            &mut || unreachable!("ids are the client's"),
            now,
        )
        .unwrap()
    }

    fn beat(
        g: &mut ConsumerGroup,
        id: &str,
        epoch: i32,
        owned: &BTreeSet<Tp>,
        now: i64,
    ) -> Result<Answer, Refusal> {
        g.heartbeat(
            Heartbeat {
                member_id: id.into(),
                epoch,
                owned: Some(owned.clone()),
                ..Default::default()
            },
            &topics(),
            &mut || unreachable!(),
            now,
        )
    }

    fn parts(ps: &[i32]) -> BTreeSet<Tp> {
        ps.iter().map(|p| ("t".to_string(), *p)).collect()
    }

    /// A second member joins: the first gives back half its partitions at
    /// its old epoch; the second gets them only once they are given back;
    /// no partition is ever owned twice; both end stable at the new epoch.
    #[test]
    fn a_joining_member_gets_partitions_only_once_they_are_revoked() {
        let mut g = ConsumerGroup::new(45_000);
        let a = join(&mut g, "a", &["t"], 0);
        assert_eq!(a.epoch, 1);
        assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3])));
        assert_eq!(g.state(), "Stable");
        let b = join(&mut g, "b", &["t"], 10);
        assert_eq!(b.epoch, 2);
        // Everything b is meant for is still a's.
        assert_eq!(b.assignment, Some(BTreeSet::new()));
        assert_eq!(g.state(), "Reconciling");
        // a is told to keep two (revoke two), still at epoch 1.
        let a = beat(&mut g, "a", 1, &parts(&[0, 1, 2, 3]), 20).unwrap();
        assert_eq!(a.epoch, 1);
        let kept = a.assignment.clone().unwrap();
        assert_eq!(kept.len(), 2);
        // b asks again before a has revoked: nothing yet.
        let b = beat(&mut g, "b", 2, &BTreeSet::new(), 30).unwrap();
        assert_eq!(b.assignment, None);
        // a has revoked: epoch 2; then b gets the other two.
        let a = beat(&mut g, "a", 1, &kept, 40).unwrap();
        assert_eq!((a.epoch, a.assignment), (2, None));
        let b = beat(&mut g, "b", 2, &BTreeSet::new(), 50).unwrap();
        let got = b.assignment.unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.is_disjoint(&kept));
        assert_eq!(g.state(), "Stable");
    }

    #[test]
    fn a_stale_or_unknown_member_is_refused() {
        let mut g = ConsumerGroup::new(45_000);
        join(&mut g, "a", &["t"], 0);
        assert_eq!(
            beat(&mut g, "a", 7, &BTreeSet::new(), 1).unwrap_err().0,
            ErrorCode::FencedMemberEpoch
        );
        assert_eq!(
            beat(&mut g, "x", 1, &BTreeSet::new(), 1).unwrap_err().0,
            ErrorCode::UnknownMemberId
        );
        assert_eq!(g.check_commit("a", 1), ErrorCode::None);
        assert_eq!(g.check_commit("a", 0), ErrorCode::StaleMemberEpoch);
        assert_eq!(g.check_commit("", -1), ErrorCode::UnknownMemberId);
    }

    #[test]
    fn a_silent_member_is_removed_and_its_partitions_move() {
        let mut g = ConsumerGroup::new(1_000);
        join(&mut g, "a", &["t"], 0);
        join(&mut g, "b", &["t"], 0);
        let a = beat(&mut g, "a", 1, &parts(&[0, 1, 2, 3]), 100).unwrap();
        let kept = a.assignment.unwrap();
        beat(&mut g, "a", 1, &kept, 200).unwrap();
        // b never heartbeats again.
        assert_eq!(g.expire(900), Vec::<String>::new());
        beat(&mut g, "a", 2, &kept, 1_100).unwrap();
        assert_eq!(g.expire(1_500), vec!["b".to_string()]);
        let a = beat(&mut g, "a", 2, &kept, 1_600).unwrap();
        assert_eq!(a.epoch, g.epoch);
        assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3])));
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let mut g = ConsumerGroup::new(45_000);
        let hb = |id: &str| Heartbeat {
            member_id: id.into(),
            epoch: JOIN,
            rebalance_timeout_ms: 1_000,
            subscribed: Some(vec!["t".into(), "u".into()]),
            assignor: Some("range".into()),
            owned: Some(BTreeSet::new()),
            ..Default::default()
        };
        g.heartbeat(hb("a"), &topics(), &mut || unreachable!(), 0)
            .unwrap();
        g.heartbeat(hb("b"), &topics(), &mut || unreachable!(), 0)
            .unwrap();
        assert_eq!(g.assignor(), "range");
        let want_a: BTreeSet<Tp> = [("t".into(), 0), ("t".into(), 1), ("u".into(), 0)].into();
        assert_eq!(g.target["a"], want_a);
        let refused = g.heartbeat(
            Heartbeat {
                assignor: Some("fancy".into()),
                ..hb("c")
            },
            &topics(),
            &mut || unreachable!(),
            0,
        );
        assert_eq!(refused.unwrap_err().0, ErrorCode::UnsupportedAssignor);
    }

    /// Members subscribing to different topics: each topic is balanced
    /// over its own subscribers (a member loaded with another topic's
    /// partitions is not asked for this topic's).
    #[test]
    fn uniform_balances_each_topic_over_its_subscribers() {
        let mut g = ConsumerGroup::new(45_000);
        let hb = |id: &str, subs: &[&str]| Heartbeat {
            member_id: id.into(),
            epoch: JOIN,
            rebalance_timeout_ms: 1_000,
            subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
            owned: Some(BTreeSet::new()),
            ..Default::default()
        };
        g.heartbeat(
            hb("a", &["t", "other"]),
            &topics(),
            &mut || unreachable!(),
            0,
        )
        .unwrap();
        g.heartbeat(
            hb("b", &["other", "u"]),
            &topics(),
            &mut || unreachable!(),
            0,
        )
        .unwrap();
        g.heartbeat(hb("c", &["u"]), &topics(), &mut || unreachable!(), 0)
            .unwrap();
        let of = |m: &str, t: &str| g.target[m].iter().filter(|p| p.0 == t).count();
        assert_eq!((of("a", "t"), of("b", "t"), of("c", "t")), (4, 0, 0));
        assert_eq!(of("a", "other") + of("b", "other"), 1);
        assert_eq!((of("b", "u"), of("c", "u")), (1, 1));
    }

    /// A regular expression subscribes to whole topic names that match it,
    /// the topics made later too; an invalid one is refused.
    #[test]
    fn a_regular_expression_follows_the_topics() {
        let mut g = ConsumerGroup::new(45_000);
        let hb = Heartbeat {
            member_id: "a".into(),
            epoch: JOIN,
            rebalance_timeout_ms: 1_000,
            subscribed: Some(vec![]),
            regex: Some("t|u".into()),
            owned: Some(BTreeSet::new()),
            ..Default::default()
        };
        let a = g
            .heartbeat(hb.clone(), &topics(), &mut || unreachable!(), 0)
            .unwrap();
        assert_eq!(a.assignment.unwrap().len(), 6);
        let mut more = topics();
        more.insert("u".into(), 3);
        more.insert("tt".into(), 1);
        let owned: BTreeSet<Tp> = g.members["a"].assigned.clone();
        let again = g
            .heartbeat(
                Heartbeat {
                    epoch: a.epoch,
                    regex: None,
                    subscribed: None,
                    owned: Some(owned),
                    ..hb.clone()
                },
                &more,
                &mut || unreachable!(),
                1,
            )
            .unwrap();
        // "tt" does not match the whole of "t|u"; u's new partition does.
        assert_eq!(again.epoch, a.epoch + 1);
        assert_eq!(again.assignment.unwrap().len(), 7);
        let bad = Heartbeat {
            member_id: "b".into(),
            regex: Some("(".into()),
            ..hb
        };
        let refused = g.heartbeat(bad, &topics(), &mut || unreachable!(), 2);
        assert_eq!(refused.unwrap_err().0, ErrorCode::InvalidRegularExpression);
    }

    /// A static member that leaves for now (-2) and comes back with a new
    /// member id takes its partitions back without a new epoch.
    #[test]
    fn a_static_member_comes_back_to_its_partitions() {
        let mut g = ConsumerGroup::new(45_000);
        let hb = |id: &str, epoch: i32| Heartbeat {
            member_id: id.into(),
            epoch,
            instance_id: Some("i-1".into()),
            rebalance_timeout_ms: 1_000,
            subscribed: Some(vec!["t".into()]),
            owned: Some(BTreeSet::new()),
            ..Default::default()
        };
        let a = g
            .heartbeat(hb("a", JOIN), &topics(), &mut || unreachable!(), 0)
            .unwrap();
        let epoch = g.epoch;
        g.heartbeat(hb("a", LEAVE_STATIC), &topics(), &mut || unreachable!(), 10)
            .unwrap();
        let back = g
            .heartbeat(hb("a2", JOIN), &topics(), &mut || unreachable!(), 20)
            .unwrap();
        assert_eq!(back.assignment, a.assignment);
        assert_eq!((g.epoch, back.epoch), (epoch, a.epoch));
    }
}
