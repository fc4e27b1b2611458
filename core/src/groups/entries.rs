//! The group log's entries in memory: applied at start-up and after each
//! durable write, and the live ones a checkpoint keeps.

use std::collections::HashMap;
use std::time::Instant;

use crate::clock::now_ms;
use crate::topic_partition::{TopicPartition, TopicPartitionRef};

use super::group::Group;
use super::store::{Entry, GroupLog};
use super::{Coordinator, TxnTables};

impl Coordinator {
    /// Applies durable entries to memory.
    pub(crate) fn install(&self, entries: Vec<Entry>) {
        let mut groups = self.groups.borrow_mut();
        let mut txns = self.txns.borrow_mut();
        let now = Instant::now();
        for e in entries {
            apply(&mut groups, &mut txns, e, now);
        }
    }

    /// Checkpoints `log` when it has grown enough. The caller holds its lock.
    pub(crate) async fn maybe_checkpoint(&self, log: &GroupLog) {
        if !log.wants_checkpoint() {
            return;
        }
        let live = self.live_entries(log.partition);
        if let Err(e) = log.checkpoint(live, now_ms()).await {
            log::error!("group log {}: checkpoint failed: {e}", log.partition);
        }
    }

    /// Every entry in force for the groups of one log partition.
    fn live_entries(&self, partition: u32) -> Vec<Entry> {
        let groups = self.groups.borrow();
        let mut out = Vec::new();
        for g in groups.values() {
            if self.partition_of(&g.id) != partition || g.stored_type.is_none() {
                continue;
            }
            out.push(Entry::Group {
                group: g.id.clone(),
                protocol_type: g.stored_type.clone(),
            });
            for (tp, c) in &g.offsets {
                out.push(Entry::Offset {
                    group: g.id.clone(),
                    topic: tp.topic().to_string(),
                    partition: tp.partition,
                    value: Some(c.clone()),
                });
            }
        }
        let txns = self.txns.borrow();
        for (id, meta) in &txns.ids {
            if self.partition_of(id) == partition {
                out.push(Entry::Txn {
                    id: id.clone(),
                    value: Some(meta.clone()),
                });
            }
        }
        for (group, offsets) in &txns.pending {
            if self.partition_of(group) != partition {
                continue;
            }
            for ((producer_id, topic, p), c) in offsets {
                out.push(Entry::Pending {
                    group: group.clone(),
                    producer_id: *producer_id,
                    topic: topic.clone(),
                    partition: *p,
                    value: Some(c.clone()),
                });
            }
        }
        out
    }
}

/// Applies one durable entry to the in-memory groups and transactions.
pub(super) fn apply(
    groups: &mut HashMap<String, Group>,
    txns: &mut TxnTables,
    e: Entry,
    now: Instant,
) {
    match e {
        Entry::Txn { id, value: Some(m) } => {
            txns.ids.insert(id, m);
        }
        Entry::Txn { id, value: None } => {
            txns.ids.remove(&id);
        }
        Entry::Pending {
            group,
            producer_id,
            topic,
            partition,
            value,
        } => {
            let key = (producer_id, topic, partition);
            match value {
                Some(c) => {
                    txns.pending.entry(group).or_default().insert(key, c);
                }
                None => {
                    if let Some(offsets) = txns.pending.get_mut(&group) {
                        offsets.remove(&key);
                        if offsets.is_empty() {
                            txns.pending.remove(&group);
                        }
                    }
                }
            }
        }
        Entry::Group {
            group,
            protocol_type: None,
        } => {
            groups.remove(&group);
        }
        Entry::Group {
            group,
            protocol_type: Some(t),
        } => {
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group, now));
            if g.protocol_type.is_none() && !t.is_empty() {
                g.protocol_type = Some(t.clone());
            }
            g.stored_type = Some(t);
        }
        Entry::Offset {
            group,
            topic,
            partition,
            value,
        } => {
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group, now));
            match value {
                Some(c) => {
                    g.offsets.insert(TopicPartition::new(topic, partition), c);
                }
                None => {
                    let key: &dyn TopicPartitionRef = &(topic.as_str(), partition);
                    g.offsets.remove(key);
                }
            }
        }
    }
}
