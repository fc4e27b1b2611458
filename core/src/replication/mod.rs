//! Replicated partitions, Kafka's way: followers fetch from the leader,
//! the leader counts a record committed (below the high watermark) once
//! every in-sync replica has it durable, and the controller (the metadata
//! quorum) keeps each partition's leader, ISR and epochs.
//!
//! This module is the controller's part, pure and applied inside the
//! quorum's state machine so every node computes the same catalog:
//! elections when nodes are fenced or come back (`elect_leaders`) and the
//! ISR changes leaders ask for (`alter_isr`, Kafka's AlterPartition). The
//! leader's and follower's parts live with the partition (`leader`).
//!
//! Invariants (asserted where they are kept):
//! - one leader per epoch: an election bumps the leader epoch, and only
//!   the quorum elects;
//! - leaders come only from the ISR: a partition whose in-sync replicas
//!   are all fenced has no leader until one is back, unless an unclean
//!   election is asked for (ElectLeaders type 1, or the topic's
//!   `unclean.leader.election.enable`), which may lose committed records;
//! - the high watermark never passes any in-sync replica's durable end
//!   (`leader`), and a follower truncates only above it.

use std::collections::BTreeSet;

use crate::catalog::{Catalog, Replicas, NO_LEADER};
use crate::cluster::types::IsrChange;

pub mod leader;
pub mod reassign;

/// Elects leaders after the cluster's live nodes changed (a node fenced,
/// heard again, or registered): as Kafka's controller does on a broker's
/// fence, a fenced replica leaves each ISR (unless it is the last one,
/// which keeps it: it holds every committed record and may come back),
/// and a partition whose leader is fenced or out of the ISR gets the first
/// live in-sync replica in replica order, in a new leader epoch; none:
/// `NO_LEADER` until one is back, unless the topic allows an unclean
/// election (`unclean.leader.election.enable`): then its first live
/// replica, as Kafka's controller does.
pub fn elect_leaders(cat: &mut Catalog) {
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    for t in cat.topics.values_mut() {
        let unclean = t.config.unclean_leader_election;
        for (p, r) in t.replication.iter_mut().enumerate() {
            let Some(leader) = t.nodes.get_mut(p) else {
                continue;
            };
            let before = (r.isr.clone(), *leader);
            let mut isr: Vec<i32> = r.isr.iter().copied().filter(|n| live.contains(n)).collect();
            if isr.is_empty() {
                // The last in-sync replica stays in the ISR (Kafka keeps
                // it): the leader if there was one, else who was kept.
                let last = match r.isr.contains(leader) {
                    true => *leader,
                    false => r.isr.first().copied().unwrap_or(*leader),
                };
                isr = vec![last];
            }
            r.isr = isr;
            let serving = *leader != NO_LEADER && live.contains(leader) && r.isr.contains(leader);
            if !serving {
                let order = r.replicas.clone();
                lead_from(leader, r, &live, &order);
            }
            if *leader == NO_LEADER && unclean {
                // `unclean.leader.election.enable`: the first live replica
                // leads, and is the ISR alone (what it lacks is lost).
                if let Some(&n) = r.replicas.iter().find(|n| live.contains(n)) {
                    log::warn!(
                        "{}-{p}: unclean election of node {n}, not in sync {:?}",
                        t.name,
                        r.isr
                    );
                    r.isr = vec![n];
                    *leader = n;
                    r.leader_epoch += 1;
                }
            }
            if (r.isr.clone(), *leader) != before {
                r.partition_epoch += 1;
            }
        }
    }
    reassign::finish_reassignments(cat);
}

/// Gives the partition the first live in-sync replica of `order` as its
/// leader, in a new leader epoch if that changes it (`NO_LEADER` if none).
pub(crate) fn lead_from(leader: &mut i32, r: &mut Replicas, live: &BTreeSet<i32>, order: &[i32]) {
    let next = order
        .iter()
        .copied()
        .find(|n| r.isr.contains(n) && live.contains(n))
        .unwrap_or(NO_LEADER);
    if next != *leader {
        *leader = next;
        r.leader_epoch += 1;
    }
}

/// Applies a leader's ISR change if it still leads in its epoch and made
/// it on the partition's current epoch; says why not otherwise.
pub fn alter_isr(cat: &mut Catalog, c: &IsrChange) -> Result<(), String> {
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    let name = format!("{}-{}", c.topic, c.partition);
    let t = cat
        .topics
        .get_mut(&c.topic)
        .filter(|t| t.id == c.topic_id)
        .ok_or_else(|| format!("{name}: no such topic"))?;
    let p = usize::try_from(c.partition).map_err(|_| format!("{name}: no such partition"))?;
    let (Some(leader), Some(r)) = (t.nodes.get(p).copied(), t.replication.get_mut(p)) else {
        return Err(format!("{name}: no such replicated partition"));
    };
    if leader != c.leader || r.leader_epoch != c.leader_epoch {
        return Err(format!(
            "{name}: node {} in epoch {} does not lead it (node {leader} does, in epoch {})",
            c.leader, c.leader_epoch, r.leader_epoch
        ));
    }
    if r.partition_epoch != c.partition_epoch {
        return Err(format!(
            "{name}: made on partition epoch {}, which is now {}",
            c.partition_epoch, r.partition_epoch
        ));
    }
    if !c.isr.contains(&c.leader) {
        return Err(format!("{name}: an ISR without its leader"));
    }
    if let Some(n) = c.isr.iter().find(|n| !r.replicas.contains(n)) {
        return Err(format!("{name}: node {n} is not one of its replicas"));
    }
    if let Some(n) = c
        .isr
        .iter()
        .find(|n| !r.isr.contains(n) && !live.contains(n))
    {
        return Err(format!(
            "{name}: node {n} is fenced and cannot join the ISR"
        ));
    }
    let mut isr = c.isr.clone();
    isr.sort_unstable();
    isr.dedup();
    // Kept in replica order, so every node lists it alike.
    r.isr = r
        .replicas
        .iter()
        .copied()
        .filter(|n| isr.contains(n))
        .collect();
    r.partition_epoch += 1;
    Ok(())
}

/// What an election asked for one partition did (ElectLeaders).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Election {
    /// A new leader, in a new leader epoch.
    Elected,
    /// The leader asked for leads already (ELECTION_NOT_NEEDED).
    NotNeeded,
    /// The replica asked for cannot lead now, and why
    /// (PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE).
    NotAvailable(String),
    /// No such replicated partition (UNKNOWN_TOPIC_OR_PARTITION).
    Unknown,
}

/// The partitions whose preferred replica (the first) does not lead
/// though it is live and in sync: what a preferred election would move
/// (the controller's leader balancing).
pub fn imbalanced(cat: &Catalog) -> Vec<(String, i32)> {
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    cat.replicated()
        .filter(|(_, _, leader, r)| {
            r.replicas.first().is_some_and(|&preferred| {
                *leader != preferred && r.isr.contains(&preferred) && live.contains(&preferred)
            })
        })
        .map(|(t, p, _, _)| (t.name.clone(), p))
        .collect()
}

/// Kafka's ElectLeaders for one partition. A preferred election makes
/// the first replica leader if it is live and in sync. An unclean one
/// gives a partition without a live leader the first live in-sync
/// replica, or else the first live replica of all (which may lack
/// committed records: the ISR becomes that replica alone, as Kafka's
/// unclean election does).
pub fn elect(cat: &mut Catalog, topic: &str, partition: i32, unclean: bool) -> Election {
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    let Some(t) = cat.topics.get_mut(topic) else {
        return Election::Unknown;
    };
    let Ok(p) = usize::try_from(partition) else {
        return Election::Unknown;
    };
    let (Some(leader), Some(r)) = (t.nodes.get_mut(p), t.replication.get_mut(p)) else {
        // A partition kept on one node alone has no other leader.
        return match p < t.shards.len() {
            true => Election::NotNeeded,
            false => Election::Unknown,
        };
    };
    let next = if unclean {
        if *leader != NO_LEADER && live.contains(leader) {
            return Election::NotNeeded;
        }
        let in_sync = r
            .replicas
            .iter()
            .copied()
            .find(|n| r.isr.contains(n) && live.contains(n));
        match in_sync.or_else(|| r.replicas.iter().copied().find(|n| live.contains(n))) {
            Some(n) => {
                if !r.isr.contains(&n) {
                    log::warn!(
                        "{topic}-{partition}: unclean election of node {n}, not in sync {:?}",
                        r.isr
                    );
                    r.isr = vec![n];
                }
                n
            }
            None => {
                return Election::NotAvailable(format!(
                    "no replica of {topic}-{partition} ({:?}) is live",
                    r.replicas
                ))
            }
        }
    } else {
        let Some(&preferred) = r.replicas.first() else {
            return Election::Unknown;
        };
        if *leader == preferred {
            return Election::NotNeeded;
        }
        if !live.contains(&preferred) || !r.isr.contains(&preferred) {
            return Election::NotAvailable(format!(
                "the preferred leader of {topic}-{partition}, node {preferred}, is {}",
                match live.contains(&preferred) {
                    true => "not in sync",
                    false => "fenced",
                }
            ));
        }
        preferred
    };
    *leader = next;
    r.leader_epoch += 1;
    r.partition_epoch += 1;
    Election::Elected
}

#[cfg(test)]
mod tests;
