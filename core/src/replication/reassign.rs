//! Moving a partition's replicas (Kafka's AlterPartitionReassignments,
//! KIP-455), the controller's part, applied inside the quorum's state
//! machine as the rest of `replication` is.
//!
//! A reassignment to target replicas `T` of a partition kept by `R` keeps
//! `T` and `R` both while it runs (`replicas`: `T` first, then what only
//! `R` has), with `adding = T − R` and `removing = R − T`. The new
//! replicas open the partition and fetch from the leader as any follower
//! does, and the leader adds each to the ISR once it has caught up. Only
//! when every target replica is in sync does the move finish
//! (`finish_reassignments`, after every ISR change): `replicas` becomes
//! `T`, the ISR drops the removed ones, and a leader being removed hands
//! over to the first in-sync target replica in a new leader epoch. So a
//! move never leaves a partition with fewer in-sync copies than it had.

use std::collections::BTreeSet;

use super::lead_from;
use crate::catalog::{Catalog, Replicas, NO_LEADER};

/// One partition's move: its topic, index and target replicas (`None`:
/// cancel the move under way).
pub type Move = (String, i32, Option<Vec<i32>>);

/// What a reassignment asked for one partition did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reassignment {
    /// Started (or finished at once: nothing to copy), or cancelled.
    Accepted,
    /// A cancellation of a partition no reassignment moves
    /// (NO_REASSIGNMENT_IN_PROGRESS).
    NoneInProgress,
    /// Target replicas that cannot be (INVALID_REPLICA_ASSIGNMENT), and why.
    Invalid(String),
    /// No such partition (UNKNOWN_TOPIC_OR_PARTITION).
    Unknown,
}

/// Starts moving `topic`'s partition `partition` to `target` (the
/// preferred leader first), replacing a reassignment under way; `None`
/// cancels the one under way, back to the replicas it started from.
pub fn reassign(
    cat: &mut Catalog,
    topic: &str,
    partition: i32,
    target: Option<Vec<i32>>,
) -> Reassignment {
    let registered: BTreeSet<i32> = cat.nodes.keys().copied().collect();
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    let Some(t) = cat.topics.get_mut(topic) else {
        return Reassignment::Unknown;
    };
    let Some(p) = usize::try_from(partition)
        .ok()
        .filter(|&p| p < t.shards.len())
    else {
        return Reassignment::Unknown;
    };
    if t.nodes.len() != t.shards.len() {
        return Reassignment::Invalid(
            "a single node's partitions have no other node to move to".into(),
        );
    }
    if let Some(target) = &target {
        if target.is_empty() {
            return Reassignment::Invalid("a partition needs at least one replica".into());
        }
        let distinct: BTreeSet<i32> = target.iter().copied().collect();
        if distinct.len() != target.len() {
            return Reassignment::Invalid(format!("{target:?} names a node twice"));
        }
        if let Some(n) = target.iter().find(|n| !registered.contains(n)) {
            return Reassignment::Invalid(format!("node {n} is not a node of this cluster"));
        }
    }
    // A topic kept whole on one replica per partition gets its
    // replication written out, one replica each, so one partition of it
    // can move.
    if t.replication.is_empty() {
        if target.is_none() {
            return Reassignment::NoneInProgress;
        }
        t.replication = t
            .nodes
            .iter()
            .map(|&n| Replicas {
                replicas: vec![n],
                isr: vec![n],
                ..Default::default()
            })
            .collect();
    }
    let leader = &mut t.nodes[p];
    let r = &mut t.replication[p];
    if target.is_none() && !r.reassigning() {
        return Reassignment::NoneInProgress;
    }
    // Made from where the move under way (if any) started: its replicas
    // being added are no original ones. A cancel moves back there; a new
    // target replaces the old, keeping the copies (and in-sync members)
    // both share, as Kafka's controller changes a reassignment.
    let original: Vec<i32> = r
        .replicas
        .iter()
        .copied()
        .filter(|n| !r.adding.contains(n))
        .collect();
    let target = target.unwrap_or_else(|| original.clone());
    let mut replicas = target.clone();
    replicas.extend(original.iter().filter(|n| !target.contains(n)));
    if !r.isr.iter().any(|n| replicas.contains(n)) {
        return Reassignment::Invalid(format!(
            "none of {replicas:?} is in sync ({:?} are): the partition would have no in-sync replica",
            r.isr
        ));
    }
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|n| !original.contains(n))
        .collect();
    let removing: Vec<i32> = original
        .iter()
        .copied()
        .filter(|n| !target.contains(n))
        .collect();
    if (&replicas, &adding, &removing) != (&r.replicas, &r.adding, &r.removing) {
        r.isr.retain(|n| replicas.contains(n));
        r.replicas = replicas;
        r.adding = adding;
        r.removing = removing;
        r.partition_epoch += 1;
        if !r.replicas.contains(leader) {
            lead_from(leader, r, &live, &r.replicas.clone());
        }
    }
    finish(leader, r, &live);
    Reassignment::Accepted
}

/// Finishes every reassignment whose target replicas are all in sync now
/// (after an ISR change, an election or a new reassignment).
pub fn finish_reassignments(cat: &mut Catalog) {
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    for t in cat.topics.values_mut() {
        for (p, r) in t.replication.iter_mut().enumerate() {
            if let Some(leader) = t.nodes.get_mut(p) {
                finish(leader, r, &live);
            }
        }
    }
}

/// Finishes one partition's reassignment if every target replica is in
/// sync: the removed replicas leave, and a leader among them hands over.
fn finish(leader: &mut i32, r: &mut Replicas, live: &BTreeSet<i32>) {
    if !r.reassigning() {
        return;
    }
    let target = r.target();
    if !target.iter().all(|n| r.isr.contains(n)) {
        return;
    }
    r.replicas = target.clone();
    r.isr.retain(|n| target.contains(n));
    r.adding.clear();
    r.removing.clear();
    r.partition_epoch += 1;
    if !target.contains(leader) {
        lead_from(leader, r, live, &target);
    }
}

/// Every partition a reassignment moves: topic, partition, replicas,
/// adding, removing (ListPartitionReassignments).
pub fn ongoing(cat: &Catalog) -> Vec<(String, i32, &Replicas)> {
    cat.replicated()
        .filter(|(_, _, _, r)| r.reassigning())
        .map(|(t, p, _, r)| (t.name.clone(), p, r))
        .collect()
}

/// The moves that take every replica off node `node` before it leaves
/// the cluster (UnregisterBroker): each partition it keeps goes to its
/// other replicas plus the live node keeping the fewest replicas that
/// has none of it; with no such node, the partition keeps only its other
/// replicas if they are at least its `min.insync.replicas`. Refused,
/// naming the partitions, where neither can be.
pub fn drain(cat: &Catalog, node: i32) -> Result<Vec<Move>, String> {
    let live: Vec<i32> = cat
        .live_nodes()
        .filter(|n| n.id != node && !n.stopping)
        .map(|n| n.id)
        .collect();
    let mut kept: std::collections::BTreeMap<i32, usize> = live.iter().map(|&n| (n, 0)).collect();
    let mut on_node = Vec::new();
    for t in cat.topics.values() {
        for p in 0..t.partitions() {
            let replicas = match t.replicas_of(p) {
                Some(r) => r.target(),
                None => t
                    .nodes
                    .get(p as usize)
                    .map(|&n| vec![n])
                    .unwrap_or_default(),
            };
            for n in &replicas {
                if let Some(c) = kept.get_mut(n) {
                    *c += 1;
                }
            }
            if replicas.contains(&node) {
                on_node.push((t, p, replicas));
            }
        }
    }
    let mut moves = Vec::new();
    let mut stuck = Vec::new();
    for (t, p, replicas) in on_node {
        let mut target: Vec<i32> = replicas.iter().copied().filter(|&n| n != node).collect();
        let spare = live
            .iter()
            .copied()
            .filter(|n| !replicas.contains(n))
            .min_by_key(|n| (kept[n], *n));
        match spare {
            Some(n) => {
                // In the leaving node's place, so a preferred leader
                // leaving is replaced by the new one.
                let at = replicas.iter().position(|&r| r == node).unwrap_or(0);
                target.insert(at.min(target.len()), n);
                *kept.get_mut(&n).expect("counted") += 1;
            }
            None => {
                let min = (t.config.min_insync_replicas.max(1) as usize).min(replicas.len());
                if target.len() < min {
                    stuck.push(format!("{}-{p}", t.name));
                    continue;
                }
            }
        }
        moves.push((t.name.clone(), p, Some(target)));
    }
    match stuck.is_empty() {
        true => Ok(moves),
        false => Err(format!(
            "node {node} keeps the only copy, or one of fewer copies than min.insync.replicas with no other live node to move it to, of {} partition(s): {}",
            stuck.len(),
            stuck.join(", ")
        )),
    }
}

/// How many partitions node `node` still keeps a copy of.
pub fn kept_by(cat: &Catalog, node: i32) -> usize {
    cat.topics
        .values()
        .map(|t| {
            (0..t.partitions())
                .filter(|&p| t.hosted_by(p, node))
                .count()
        })
        .sum()
}

/// The controller's replica balancing (Redpanda's automatic partition
/// balancing, Cruise Control's replica distribution goal): at most `max`
/// moves, each taking one replica from the live node keeping the most to
/// the one keeping the fewest (a node just added, first of all), while
/// they differ by more than one. A partition moves only while its leader
/// lives (the new copy comes from it), never where the node taking it
/// would share a rack another replica of it is in and the node giving it
/// up does not. None while a reassignment is under way.
pub fn spread(cat: &Catalog, max: usize) -> Vec<Move> {
    if cat.replicated().any(|(_, _, _, r)| r.reassigning()) {
        return Vec::new();
    }
    let live: BTreeSet<i32> = cat
        .live_nodes()
        .filter(|n| !n.stopping)
        .map(|n| n.id)
        .collect();
    if live.len() < 2 {
        return Vec::new();
    }
    let rack = |n: i32| cat.nodes.get(&n).and_then(|c| c.rack.clone());
    let mut kept: std::collections::BTreeMap<i32, usize> = live.iter().map(|&n| (n, 0)).collect();
    let mut partitions = Vec::new();
    for t in cat.topics.values() {
        for p in 0..t.partitions() {
            let (leader, replicas) = match (t.place(p), t.replicas_of(p)) {
                (Some((Some(l), _)), Some(r)) => (l, r.target()),
                (Some((Some(l), _)), None) => (l, vec![l]),
                _ => continue,
            };
            for n in &replicas {
                if let Some(c) = kept.get_mut(n) {
                    *c += 1;
                }
            }
            if leader != NO_LEADER && live.contains(&leader) {
                partitions.push((t.name.clone(), p, replicas));
            }
        }
    }
    let mut moves = Vec::new();
    let mut moved = BTreeSet::new();
    while moves.len() < max {
        let (Some((&most, &high)), Some((&fewest, &low))) = (
            kept.iter().max_by_key(|(n, c)| (**c, -**n)),
            kept.iter().min_by_key(|(n, c)| (**c, **n)),
        ) else {
            break;
        };
        if high <= low + 1 {
            break;
        }
        let candidate = partitions.iter().enumerate().find(|(i, (_, _, replicas))| {
            !moved.contains(i)
                && replicas.contains(&most)
                && !replicas.contains(&fewest)
                && (rack(fewest).is_none()
                    || rack(fewest) == rack(most)
                    || !replicas
                        .iter()
                        .any(|&n| n != most && rack(n) == rack(fewest)))
        });
        let Some((i, (topic, p, replicas))) = candidate else {
            break;
        };
        let target: Vec<i32> = replicas
            .iter()
            .map(|&n| if n == most { fewest } else { n })
            .collect();
        moves.push((topic.clone(), *p, Some(target)));
        moved.insert(i);
        *kept.get_mut(&most).expect("counted") -= 1;
        *kept.get_mut(&fewest).expect("counted") += 1;
    }
    moves
}
