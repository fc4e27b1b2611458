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
//! - leaders come only from the ISR (no unclean election): a partition
//!   whose in-sync replicas are all fenced has no leader until one is back;
//! - the high watermark never passes any in-sync replica's durable end
//!   (`leader`), and a follower truncates only above it.

use std::collections::BTreeSet;

use crate::catalog::{Catalog, NO_LEADER};
use crate::cluster::types::IsrChange;

pub mod leader;

/// Elects leaders after the cluster's live nodes changed (a node fenced,
/// heard again, or registered): as Kafka's controller does on a broker's
/// fence, a fenced replica leaves each ISR (unless it is the last one,
/// which keeps it: it holds every committed record and may come back),
/// and a partition whose leader is fenced or out of the ISR gets the first
/// live in-sync replica in replica order, in a new leader epoch; none:
/// `NO_LEADER` until one is back.
pub fn elect_leaders(cat: &mut Catalog) {
    let live: BTreeSet<i32> = cat.live_nodes().map(|n| n.id).collect();
    for t in cat.topics.values_mut() {
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
                let next = r
                    .replicas
                    .iter()
                    .copied()
                    .find(|n| r.isr.contains(n) && live.contains(n))
                    .unwrap_or(NO_LEADER);
                if next != *leader {
                    *leader = next;
                    r.leader_epoch += 1;
                }
            }
            if (r.isr.clone(), *leader) != before {
                r.partition_epoch += 1;
            }
        }
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

#[cfg(test)]
mod tests;
