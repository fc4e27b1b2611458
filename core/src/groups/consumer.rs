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

mod assignors;
#[cfg(test)]
mod tests;

use assignors::{range, uniform};

/// A topic-partition by name.
pub type Tp = crate::topic_partition::TopicPartition;

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
        let regex = parse_regex(&hb)?;
        check_assignor(&hb)?;
        // Whether what the assignment depends on changed (one epoch per
        // heartbeat, however many things changed).
        let mut bump = self.admit(&member_id, &hb, now_ms)?;
        bump |= self.update_member(&member_id, &hb, regex, now_ms);
        bump |= self.resubscribe(topics);
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
        Ok(self.answer(member_id))
    }

    /// A heartbeat's member in the group: it joins (epoch 0), or its epoch
    /// is checked. Whether the group changed for it.
    fn admit(&mut self, member_id: &str, hb: &Heartbeat, now_ms: i64) -> Result<bool, Refusal> {
        if hb.epoch == JOIN {
            return self.join(member_id.to_string(), hb, now_ms);
        }
        let Some(m) = self.members.get(member_id) else {
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
            self.members.get_mut(member_id).expect("member").sent = None;
        }
        Ok(false)
    }

    /// What the heartbeat changes of its member (`regex`: as
    /// [`parse_regex`] gave it); whether its assignor changed.
    fn update_member(
        &mut self,
        member_id: &str,
        hb: &Heartbeat,
        regex: Option<Option<(String, regex::Regex)>>,
        now_ms: i64,
    ) -> bool {
        let mut bump = false;
        let m = self.members.get_mut(member_id).expect("member");
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
        bump
    }

    /// Every member's subscription as the topics are now (a new topic may
    /// match a member's regular expression); whether any changed.
    fn resubscribe(&mut self, topics: &BTreeMap<String, i32>) -> bool {
        let mut bump = false;
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
        bump
    }

    /// The heartbeat's answer: the member's epoch, and its assignment if
    /// it was not sent yet.
    fn answer(&mut self, member_id: String) -> Answer {
        let m = self.members.get_mut(&member_id).expect("member");
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.sent = Some(m.assigned.clone());
        }
        Answer {
            member_id,
            epoch: m.epoch,
            assignment,
        }
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

/// The heartbeat's regular expression: `None` to leave the member's as
/// it is, `Some(None)` to drop it, or the new one (whole topic names).
fn parse_regex(hb: &Heartbeat) -> Result<Option<Option<(String, regex::Regex)>>, Refusal> {
    Ok(match hb.regex.as_deref() {
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
    })
}

/// Refuses an assignor the group does not have.
fn check_assignor(hb: &Heartbeat) -> Result<(), Refusal> {
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
    Ok(())
}
