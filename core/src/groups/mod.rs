//! Consumer groups: the coordinator part each shard runs for the groups it
//! owns.
//!
//! A group belongs to the shard that owns its group-log partition
//! ([`store::log_partition`], then `p % shards`); every group request is sent
//! there over the mesh (`Shard::on_group`). Membership lives in memory
//! ([`group`]); committed offsets are written to the group log and fsynced
//! before the commit is answered ([`store`]), and replayed at start-up.

pub mod consumer;
pub mod group;
pub mod store;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use crate::catalog::Catalog;
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::TopicPartition;
use group::{
    Answer, Group, GroupConfig, GroupState, JoinRequest, JoinResult, SyncRequest, SyncResult,
};
use store::{Committed, Entry, GroupLog, GROUP_LOG_PARTITIONS};

/// Kafka's `offset.metadata.max.bytes`.
pub const MAX_OFFSET_METADATA: usize = 4096;

/// The shard that owns `group` among `nr_shards`.
pub fn owner_shard(group: &str, nr_shards: usize) -> usize {
    store::log_partition(group) as usize % nr_shards.max(1)
}

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

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// "classic" or "consumer" (KIP-848).
    pub kind: &'static str,
}

/// The protocol type a KIP-848 consumer group is stored with.
pub const CONSUMER_TYPE: &str = "consumer-group";

/// Committed offsets asked for: `None` for every topic the group has.
pub type OffsetQuery = Option<Vec<(String, Vec<i32>)>>;

/// Offsets answered per topic: (partition, committed or none).
pub type OffsetAnswer = Vec<(String, Vec<(i32, Option<Committed>)>)>;

/// Transactional state kept beside the groups (`crate::txn`): the ids
/// whose log partitions this shard owns, and offsets transactions
/// committed to this shard's groups, pending until they end.
#[derive(Default)]
pub struct TxnTables {
    pub ids: HashMap<String, crate::txn::state::TxnMetadata>,
    /// Per group: (producer id, topic, partition) → the offset.
    pub pending: HashMap<String, BTreeMap<(i64, String, i32), Committed>>,
    /// Ids whose prepared transaction is being completed now (memory only:
    /// one completion per id at a time).
    pub completing: std::collections::HashSet<String>,
}

/// The groups one shard coordinates, and the transactional ids.
pub struct Coordinator {
    pub(crate) cfg: GroupConfig,
    pub(crate) logs: HashMap<u32, Rc<GroupLog>>,
    pub(crate) groups: RefCell<HashMap<String, Group>>,
    pub(crate) txns: RefCell<TxnTables>,
}

impl Coordinator {
    /// Opens the group-log partitions shard `shard` owns and rebuilds their
    /// groups' offsets.
    pub async fn open(
        data_dir: &Path,
        shard: usize,
        nr_shards: usize,
        cfg: GroupConfig,
    ) -> Result<Coordinator, KafkaError> {
        let mut logs = HashMap::new();
        let mut groups: HashMap<String, Group> = HashMap::new();
        let mut txns = TxnTables::default();
        let now = Instant::now();
        for p in (0..GROUP_LOG_PARTITIONS).filter(|p| *p as usize % nr_shards.max(1) == shard) {
            let (log, entries) =
                GroupLog::open(data_dir, p, cfg.log_checkpoint_bytes, now_ms()).await?;
            for e in entries {
                apply(&mut groups, &mut txns, e, now);
            }
            logs.insert(p, Rc::new(log));
        }
        if !txns.ids.is_empty() {
            log::info!(
                "shard {shard}: {} transactional id(s) recovered",
                txns.ids.len()
            );
        }
        let offsets: usize = groups.values().map(|g| g.offsets.len()).sum();
        if !groups.is_empty() {
            log::info!(
                "shard {shard}: {} group(s) with {offsets} committed offset(s) recovered",
                groups.len()
            );
        }
        Ok(Coordinator {
            cfg,
            logs,
            groups: RefCell::new(groups),
            txns: RefCell::new(txns),
        })
    }

    /// The log partition `key` (a group or a transactional id) hashes to,
    /// if this shard owns it.
    pub(crate) fn log_for(&self, group: &str) -> Result<Rc<GroupLog>, KafkaError> {
        self.logs
            .get(&store::log_partition(group))
            .cloned()
            .ok_or_else(|| {
                KafkaError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("group {group:?} is coordinated by another shard"),
                )
            })
    }

    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResult {
        if !group::valid_group_id(group_id) {
            return JoinResult::error(ErrorCode::InvalidGroupId, &req.member_id);
        }
        let member = req.member_id.clone();
        let answer = {
            let mut groups = self.groups.borrow_mut();
            let now = Instant::now();
            if !groups.contains_key(group_id) {
                if !req.member_id.is_empty() {
                    return JoinResult::error(ErrorCode::UnknownMemberId, &member);
                }
                groups.insert(group_id.to_string(), Group::new(group_id, now));
            }
            let g = groups.get_mut(group_id).expect("group");
            if g.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) {
                return JoinResult::error(ErrorCode::InconsistentGroupProtocol, &member);
            }
            g.consumer = None;
            g.join(req, now, &self.cfg)
        };
        match answer {
            Answer::Now(r) => r,
            Answer::Later(rx) => rx
                .await
                .unwrap_or_else(|_| JoinResult::error(ErrorCode::CoordinatorNotAvailable, &member)),
        }
    }

    pub async fn sync(&self, group_id: &str, req: SyncRequest) -> SyncResult {
        let answer = {
            let mut groups = self.groups.borrow_mut();
            let Some(g) = groups.get_mut(group_id) else {
                return SyncResult::error(ErrorCode::UnknownMemberId);
            };
            g.sync(req, Instant::now())
        };
        match answer {
            Answer::Now(r) => r,
            Answer::Later(rx) => rx
                .await
                .unwrap_or_else(|_| SyncResult::error(ErrorCode::CoordinatorNotAvailable)),
        }
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> ErrorCode {
        match self.groups.borrow_mut().get_mut(group_id) {
            Some(g) => g.heartbeat(member_id, instance_id, generation, Instant::now()),
            None => ErrorCode::UnknownMemberId,
        }
    }

    /// LeaveGroup: each (member id, instance id) gets its own answer.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Vec<ErrorCode> {
        let mut groups = self.groups.borrow_mut();
        let Some(g) = groups.get_mut(group_id) else {
            return vec![ErrorCode::UnknownMemberId; members.len()];
        };
        let now = Instant::now();
        members
            .iter()
            .map(|(m, i)| g.leave(m, i.as_deref(), now, &self.cfg))
            .collect()
    }

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
            if store::log_partition(&g.id) != partition || g.stored_type.is_none() {
                continue;
            }
            out.push(Entry::Group {
                group: g.id.clone(),
                protocol_type: g.stored_type.clone(),
            });
            for ((topic, partition), c) in &g.offsets {
                out.push(Entry::Offset {
                    group: g.id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    value: Some(c.clone()),
                });
            }
        }
        let txns = self.txns.borrow();
        for (id, meta) in &txns.ids {
            if store::log_partition(id) == partition {
                out.push(Entry::Txn {
                    id: id.clone(),
                    value: Some(meta.clone()),
                });
            }
        }
        for (group, offsets) in &txns.pending {
            if store::log_partition(group) != partition {
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
                            let c = g.and_then(|g| g.offsets.get(&(topic.clone(), p)).cloned());
                            (p, c)
                        })
                        .collect();
                    (topic, answers)
                })
                .collect(),
            None => {
                let mut out: OffsetAnswer = Vec::new();
                for ((topic, p), c) in g.map(|g| g.offsets.iter()).into_iter().flatten() {
                    match out.last_mut() {
                        Some((t, parts)) if t == topic => parts.push((*p, Some(c.clone()))),
                        _ => out.push((topic.clone(), vec![(*p, Some(c.clone()))])),
                    }
                }
                out
            }
        }
    }

    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let groups = self.groups.borrow();
        let Some(g) = groups.get(group_id) else {
            return GroupDescription {
                state: GroupState::Dead.name(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            };
        };
        // As Kafka: member metadata and assignments only once stable.
        let stable = g.state == GroupState::Stable;
        let protocol = g.protocol.clone().unwrap_or_default();
        GroupDescription {
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: g
                .members
                .iter()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(&protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    /// ConsumerGroupHeartbeat (KIP-848). A group's first heartbeat writes
    /// the group to the log (fsynced) so it is listed after a restart, with
    /// its offsets; its members and assignment live in memory: after a
    /// restart a member is told it is unknown and joins again.
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        hb: consumer::Heartbeat,
        catalog: &Catalog,
    ) -> Result<consumer::Answer, consumer::Refusal> {
        if !group::valid_group_id(group_id) {
            return Err((
                ErrorCode::InvalidGroupId,
                "The group id is empty.".to_string(),
            ));
        }
        let log = self.log_for(group_id).map_err(|e| (e.code, e.message))?;
        let stored = {
            let mut groups = self.groups.borrow_mut();
            let g = groups
                .entry(group_id.to_string())
                .or_insert_with(|| Group::new(group_id, Instant::now()));
            if g.consumer.is_none() && (g.state != GroupState::Empty || !g.members.is_empty()) {
                return Err((
                    ErrorCode::GroupIdNotFound,
                    format!("Group {group_id} is not a consumer group."),
                ));
            }
            g.stored_type.as_deref() == Some(CONSUMER_TYPE)
        };
        if !stored {
            let _write = log.lock().await;
            let entry = Entry::Group {
                group: group_id.to_string(),
                protocol_type: Some(CONSUMER_TYPE.to_string()),
            };
            if let Err(e) = log
                .append_durably(std::slice::from_ref(&entry), now_ms())
                .await
            {
                log::error!("group {group_id}: writing it: {e}");
                return Err((ErrorCode::KafkaStorageError, e.message));
            }
            self.install(vec![entry]);
        }
        let mut groups = self.groups.borrow_mut();
        let g = groups.get_mut(group_id).ok_or_else(|| {
            (
                ErrorCode::CoordinatorNotAvailable,
                "the group was deleted meanwhile".to_string(),
            )
        })?;
        let session = self.cfg.consumer_session_timeout.as_millis() as i64;
        let c = g
            .consumer
            .get_or_insert_with(|| consumer::ConsumerGroup::new(session));
        let topics: BTreeMap<String, i32> = catalog
            .topics
            .values()
            .map(|m| (m.name.clone(), m.partitions()))
            .collect();
        c.heartbeat(
            hb,
            &topics,
            &mut || uuid::Uuid::new_v4().to_string(),
            now_ms(),
        )
    }

    /// A KIP-848 consumer group, as ConsumerGroupDescribe shows it.
    pub fn consumer_group(&self, group_id: &str) -> Option<consumer::ConsumerGroup> {
        self.groups
            .borrow()
            .get(group_id)
            .and_then(|g| g.consumer.clone())
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

    pub fn list(&self) -> Vec<ListedGroup> {
        let mut out: Vec<_> = self
            .groups
            .borrow()
            .values()
            .filter(|g| g.state != GroupState::Dead)
            .map(|g| match &g.consumer {
                Some(c) => ListedGroup {
                    group_id: g.id.clone(),
                    protocol_type: "consumer".to_string(),
                    state: c.state(),
                    kind: "consumer",
                },
                // Stored as a consumer group, no member since a restart.
                None if g.stored_type.as_deref() == Some(CONSUMER_TYPE) => ListedGroup {
                    group_id: g.id.clone(),
                    protocol_type: "consumer".to_string(),
                    state: "Empty",
                    kind: "consumer",
                },
                None => ListedGroup {
                    group_id: g.id.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state.name(),
                    kind: "classic",
                },
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// DeleteGroups for one group: only an empty group goes; its offsets
    /// are deleted durably first.
    pub async fn delete(&self, group_id: &str) -> ErrorCode {
        if !group::valid_group_id(group_id) {
            return ErrorCode::InvalidGroupId;
        }
        let log = match self.log_for(group_id) {
            Ok(l) => l,
            Err(e) => return e.code,
        };
        let _write = log.lock().await;
        {
            let groups = self.groups.borrow();
            match groups.get(group_id) {
                None => return ErrorCode::GroupIdNotFound,
                Some(g) if g.state == GroupState::Dead => return ErrorCode::GroupIdNotFound,
                Some(g) if g.state != GroupState::Empty => return ErrorCode::NonEmptyGroup,
                Some(g) if g.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) => {
                    return ErrorCode::NonEmptyGroup
                }
                Some(_) => {}
            }
        }
        let tombstone = Entry::Group {
            group: group_id.to_string(),
            protocol_type: None,
        };
        if let Err(e) = log.append_durably(&[tombstone], now_ms()).await {
            log::error!("group {group_id}: writing its deletion: {e}");
            return ErrorCode::KafkaStorageError;
        }
        if let Some(mut g) = self.groups.borrow_mut().remove(group_id) {
            g.kill();
        }
        ErrorCode::None
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
                    if g.offsets.contains_key(&(topic.to_string(), partition)) {
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

    /// Session expiry and rebalance deadlines (called every 100 ms).
    pub fn tick(&self) {
        let now = Instant::now();
        let ms = now_ms();
        for g in self.groups.borrow_mut().values_mut() {
            g.tick(now, &self.cfg);
            if let Some(c) = &mut g.consumer {
                for gone in c.expire(ms) {
                    log::info!(
                        "group {}: member {gone} removed (session or rebalance timeout)",
                        g.id
                    );
                }
            }
        }
    }

    /// Fails every waiting member and syncs the logs (clean stop).
    pub async fn close(&self) {
        for g in self.groups.borrow_mut().values_mut() {
            g.kill();
        }
        for log in self.logs.values() {
            log.close().await;
        }
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

/// Applies one durable entry to the in-memory groups and transactions.
fn apply(groups: &mut HashMap<String, Group>, txns: &mut TxnTables, e: Entry, now: Instant) {
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
                    g.offsets.insert((topic, partition), c);
                }
                None => {
                    g.offsets.remove(&(topic, partition));
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::TopicMeta;
    use std::path::PathBuf;

    use weir_storage::testing::run_local as run;

    /// A catalog with topic `t` of 4 partitions.
    pub(crate) fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: [1; 16],
                shards: vec![0; 4],
                config: Default::default(),
                schema: None,
            },
        );
        c
    }

    fn all(c: &Coordinator, groups: &[String]) -> Vec<(String, OffsetAnswer)> {
        groups
            .iter()
            .map(|g| (g.clone(), c.committed(g, None)))
            .collect()
    }

    /// Many commits over the same keys: the log is checkpointed (older
    /// segments go), and a reopened coordinator has exactly the offsets and
    /// groups it had, deleted ones gone.
    #[test]
    fn checkpoints_keep_exactly_the_live_offsets() {
        run(|| async {
            // Not /tmp: tmpfs has no O_DIRECT.
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../target/test-data/groups-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            weir_storage::segment::prepare_direct_io(&dir)
                .await
                .unwrap();
            let cfg = GroupConfig {
                log_checkpoint_bytes: 64 << 10,
                ..GroupConfig::default()
            };
            let cat = catalog();
            let groups: Vec<String> = (0..6).map(|i| format!("group-{i}")).collect();
            let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
            for round in 0..400i64 {
                for g in &groups {
                    let offsets = (0..4)
                        .map(|p| OffsetToCommit {
                            topic: "t".into(),
                            partition: p,
                            offset: round * 10 + p as i64,
                            leader_epoch: -1,
                            metadata: Some(format!("{g} round {round}")),
                        })
                        .collect();
                    let codes = c.commit(g, "", None, -1, offsets, &cat).await;
                    assert_eq!(codes, vec![ErrorCode::None; 4]);
                }
            }
            assert_eq!(c.delete(&groups[5]).await, ErrorCode::None);
            let before = all(&c, &groups);
            assert!(before[5].1.is_empty(), "a deleted group has no offsets");
            assert_eq!(before[0].1[0].1[3].1.as_ref().unwrap().offset, 3993);
            let size: u64 = c.logs.values().map(|l| l.size_bytes()).sum();
            c.close().await;
            drop(c);
            // 2,400 commits of 4 offsets wrote ~860 KB; what is kept is
            // about one checkpoint interval (64 KiB) and a segment.
            assert!(size < 128 << 10, "the group logs hold {size} bytes");

            let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
            assert_eq!(all(&c, &groups), before);
            let listed: Vec<_> = c.list().into_iter().map(|g| g.group_id).collect();
            assert_eq!(listed, groups[..5].to_vec());
            c.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
}
