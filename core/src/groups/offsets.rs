//! Committed offsets: OffsetCommit (checked, written to the group log,
//! then installed), OffsetFetch, OffsetDelete, and whether a member may
//! commit.

use std::time::Instant;

use crate::catalog::Catalog;
use crate::clock::now_ms;
use crate::error::ErrorCode;
use crate::topic_partition::{TopicPartition, TopicPartitionRef};

use super::group::{self, Group};
use super::store::{Committed, Entry};
use super::{Coordinator, GroupState};

/// Kafka's `offset.metadata.max.bytes`.
pub const MAX_OFFSET_METADATA: usize = 4096;

/// One offset of an OffsetCommit.
#[derive(Debug, Clone)]
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

impl OffsetToCommit {
    /// The offset as committed at `now_ms`, or why it is refused: metadata
    /// over `MAX_OFFSET_METADATA`, or a partition the catalog does not have.
    pub(crate) fn checked(&self, catalog: &Catalog, now_ms: i64) -> Result<Committed, ErrorCode> {
        let metadata = self.metadata.clone().unwrap_or_default();
        if metadata.len() > MAX_OFFSET_METADATA {
            return Err(ErrorCode::OffsetMetadataTooLarge);
        }
        let known = catalog
            .topic(&self.topic)
            .is_some_and(|t| self.partition >= 0 && self.partition < t.partitions());
        if !known {
            return Err(ErrorCode::UnknownTopicOrPartition);
        }
        Ok(Committed {
            offset: self.offset,
            leader_epoch: self.leader_epoch,
            metadata,
            commit_ms: now_ms,
        })
    }
}

/// A commit's answers when its write failed: the offsets that were to be
/// written get KAFKA_STORAGE_ERROR, the refused keep their own error.
pub(crate) fn storage_failed(answers: Vec<ErrorCode>) -> Vec<ErrorCode> {
    answers
        .into_iter()
        .map(|a| match a {
            ErrorCode::None => ErrorCode::KafkaStorageError,
            other => other,
        })
        .collect()
}

/// Committed offsets asked for: `None` for every topic the group has.
pub type OffsetQuery = Option<Vec<(String, Vec<i32>)>>;

/// Offsets answered per topic: (partition, committed or none).
pub type OffsetAnswer = Vec<(String, Vec<(i32, Option<Committed>)>)>;

impl Coordinator {
    /// OffsetCommit: checks the member and generation, writes the offsets to
    /// the group log (fsynced) and only then makes them visible. Answers
    /// each offset with its error.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<OffsetToCommit>,
        catalog: &Catalog,
    ) -> Vec<ErrorCode> {
        if !group::valid_group_id(group_id) {
            return vec![ErrorCode::InvalidGroupId; offsets.len()];
        }
        let log = match self.log_for(group_id) {
            Ok(l) => l,
            Err(e) => return vec![e.code; offsets.len()],
        };
        let _write = log.lock().await;
        let now = now_ms();
        let mut answers = vec![ErrorCode::None; offsets.len()];
        let mut entries = Vec::new();
        {
            let mut groups = self.groups.borrow_mut();
            if !groups.contains_key(group_id) {
                if generation >= 0 {
                    // A member of a generation this node does not know (it
                    // restarted, or the group was deleted): rejoin first.
                    return vec![ErrorCode::IllegalGeneration; offsets.len()];
                }
                groups.insert(group_id.to_string(), Group::new(group_id, Instant::now()));
            }
            let g = groups.get_mut(group_id).expect("group");
            let check = member_may_commit(g, member_id, instance_id, generation);
            if check != ErrorCode::None {
                return vec![check; offsets.len()];
            }
            let wanted = Some(g.protocol_type.clone().unwrap_or_default());
            if g.stored_type != wanted {
                entries.push(Entry::Group {
                    group: group_id.to_string(),
                    protocol_type: wanted,
                });
            }
            for (o, answer) in offsets.iter().zip(answers.iter_mut()) {
                match o.checked(catalog, now) {
                    Ok(c) => entries.push(Entry::Offset {
                        group: group_id.to_string(),
                        topic: o.topic.clone(),
                        partition: o.partition,
                        value: Some(c),
                    }),
                    Err(code) => *answer = code,
                }
            }
        }
        if let Err(e) = log.append_durably(&entries, now).await {
            log::error!("group {group_id}: writing a commit: {e}");
            return storage_failed(answers);
        }
        self.install(entries);
        self.maybe_checkpoint(&log).await;
        answers
    }

    /// OffsetFetch for one group: -1 (none) where nothing is committed.
    pub fn committed(&self, group_id: &str, query: OffsetQuery) -> OffsetAnswer {
        let groups = self.groups.borrow();
        let g = groups.get(group_id);
        match query {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, parts)| {
                    let answers = parts
                        .into_iter()
                        .map(|p| {
                            let key: &dyn TopicPartitionRef = &(topic.as_str(), p);
                            let c = g.and_then(|g| g.offsets.get(key).cloned());
                            (p, c)
                        })
                        .collect();
                    (topic, answers)
                })
                .collect(),
            None => {
                let mut out: OffsetAnswer = Vec::new();
                for (tp, c) in g.map(|g| g.offsets.iter()).into_iter().flatten() {
                    let (topic, p) = (tp.topic(), tp.partition);
                    match out.last_mut() {
                        Some((t, parts)) if t == topic => parts.push((p, Some(c.clone()))),
                        _ => out.push((topic.to_string(), vec![(p, Some(c.clone()))])),
                    }
                }
                out
            }
        }
    }

    /// Every committed offset of this shard's groups: (group, topic,
    /// partition, offset).
    pub fn committed_offsets(&self) -> Vec<(String, String, i32, i64)> {
        let mut out = Vec::new();
        for g in self.list() {
            for (topic, parts) in self.committed(&g.group_id, None) {
                for (p, c) in parts.into_iter() {
                    if let Some(c) = c {
                        out.push((g.group_id.clone(), topic.clone(), p, c.offset));
                    }
                }
            }
        }
        out
    }

    /// OffsetDelete: removes committed offsets, except of topics the group's
    /// members still subscribe to. One code per partition, in order.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<TopicPartition>,
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        let log = self.log_for(group_id).map_err(|e| e.code)?;
        let _write = log.lock().await;
        let mut entries = Vec::new();
        let answers = {
            let groups = self.groups.borrow();
            let g = match groups.get(group_id) {
                Some(g) if g.state != GroupState::Dead => g,
                _ => return Err(ErrorCode::GroupIdNotFound),
            };
            let members = g.consumer.as_ref().is_some_and(|c| !c.members.is_empty());
            let active = g.state != GroupState::Empty || members;
            if active && g.protocol_type.as_deref() != Some("consumer") && !members {
                return Err(ErrorCode::NonEmptyGroup);
            }
            partitions
                .into_iter()
                .map(|TopicPartition { topic, partition }| {
                    let subscribed = match &g.consumer {
                        Some(c) => c.subscribed_to(&topic),
                        None => g.subscribed_to(&topic),
                    };
                    if active && subscribed {
                        return ErrorCode::GroupSubscribedToTopic;
                    }
                    if g.offsets
                        .contains_key(&TopicPartition::new(topic.clone(), partition))
                    {
                        entries.push(Entry::Offset {
                            group: group_id.to_string(),
                            topic: topic.to_string(),
                            partition,
                            value: None,
                        });
                    }
                    ErrorCode::None
                })
                .collect()
        };
        if let Err(e) = log.append_durably(&entries, now_ms()).await {
            log::error!("group {group_id}: deleting offsets: {e}");
            return Err(ErrorCode::KafkaStorageError);
        }
        self.install(entries);
        Ok(answers)
    }
}

/// Whether a member of `g` may commit offsets (OffsetCommit and
/// TxnOffsetCommit alike): in a consumer group of the new protocol
/// (KIP-848) the generation is the member's epoch.
pub(crate) fn member_may_commit(
    g: &Group,
    member_id: &str,
    instance_id: Option<&str>,
    generation: i32,
) -> ErrorCode {
    match &g.consumer {
        Some(c) => c.check_commit(member_id, generation),
        None => g.check_commit(member_id, instance_id, generation),
    }
}
