//! Consumer groups: the coordinator part each shard runs for the groups it
//! owns.
//!
//! A group belongs to the shard that owns its group-log partition
//! ([`store::log_partition`], then `p % shards`); every group request is sent
//! there over the mesh (`Shard::on_group`). Membership lives in memory
//! ([`group`]); committed offsets are written to the group log and fsynced
//! before the commit is answered ([`store`]), and replayed at start-up.
//! `offsets` answers the offset requests; `entries` applies the log's
//! entries to memory and picks the live ones a checkpoint keeps.

pub mod consumer;
mod entries;
pub mod group;
mod offsets;
pub mod store;
#[cfg(test)]
pub(crate) mod tests;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use crate::catalog::Catalog;
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use entries::apply;
use group::{
    Answer, Group, GroupConfig, GroupState, JoinRequest, JoinResult, SyncRequest, SyncResult,
};
pub(crate) use offsets::{member_may_commit, storage_failed};
pub use offsets::{OffsetAnswer, OffsetQuery, OffsetToCommit, MAX_OFFSET_METADATA};
use store::{Committed, Entry, GroupLog, GROUP_LOG_PARTITIONS};

/// The shard that owns `group` among `nr_shards`.
pub fn owner_shard(group: &str, nr_shards: usize) -> usize {
    store::log_partition(group) as usize % nr_shards.max(1)
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

/// In a cluster whose coordinators are replicated, a group or
/// transactional id's log is partition `slot` of the groups topic, kept
/// here as log `SLOTTED + slot` (apart from this node's own logs 0..16).
const SLOTTED: u32 = 1 << 16;

/// The groups one shard coordinates, and the transactional ids.
pub struct Coordinator {
    pub(crate) cfg: GroupConfig,
    pub(crate) logs: RefCell<HashMap<u32, Rc<GroupLog>>>,
    /// Whether keys belong to the cluster's replicated groups topic (its
    /// slots) rather than this node's own group logs.
    slotted: std::cell::Cell<bool>,
    /// Slots being loaded now (COORDINATOR_LOAD_IN_PROGRESS meanwhile).
    loading: RefCell<std::collections::HashSet<u32>>,
    /// The leader epoch each slot loaded here was loaded in.
    loaded_in: RefCell<HashMap<u32, i32>>,
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
            logs: RefCell::new(logs),
            slotted: Default::default(),
            loading: Default::default(),
            loaded_in: Default::default(),
            groups: RefCell::new(groups),
            txns: RefCell::new(txns),
        })
    }

    /// The log `key` (a group or a transactional id) belongs to: this
    /// node's own log partition it hashes to, or in a cluster with
    /// replicated coordinators its slot of the groups topic.
    pub(crate) fn partition_of(&self, key: &str) -> u32 {
        match self.slotted.get() {
            true => SLOTTED + crate::catalog::group_slot(key) as u32,
            false => store::log_partition(key),
        }
    }

    /// The log `key` belongs to, if this shard holds it: else
    /// COORDINATOR_LOAD_IN_PROGRESS while its slot loads here, or
    /// NOT_COORDINATOR (another node leads the slot now).
    pub(crate) fn log_for(&self, group: &str) -> Result<Rc<GroupLog>, KafkaError> {
        let p = self.partition_of(group);
        if let Some(log) = self.logs.borrow().get(&p) {
            return Ok(log.clone());
        }
        Err(
            match (self.slotted.get(), self.loading.borrow().contains(&p)) {
                (true, true) => KafkaError::new(
                    ErrorCode::CoordinatorLoadInProgress,
                    format!("{group:?}'s coordinator state is loading here"),
                ),
                (true, false) => KafkaError::new(
                    ErrorCode::NotCoordinator,
                    format!("this node does not lead {group:?}'s slot of the groups topic"),
                ),
                _ => KafkaError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("group {group:?} is coordinated by another shard"),
                ),
            },
        )
    }

    /// The coordinator epoch markers for `key`'s transactions carry: the
    /// leader epoch its slot was loaded in here (each new coordinator of
    /// a slot has a higher one); 0 for this node's own group logs.
    pub(crate) fn coordinator_epoch(&self, key: &str) -> i32 {
        let p = self.partition_of(key);
        self.loaded_in.borrow().get(&p).copied().unwrap_or(0)
    }

    /// Whether `key`'s state is here to answer from: always for this
    /// node's own group logs; for a slot of the replicated groups topic,
    /// once it is loaded (`log_for` says why not).
    pub(crate) fn check_loaded(&self, key: &str) -> Result<(), KafkaError> {
        match self.slotted.get() {
            true => self.log_for(key).map(|_| ()),
            false => Ok(()),
        }
    }

    /// Keys belong to the cluster's replicated groups topic from now on.
    pub fn use_slots(&self) {
        self.slotted.set(true);
    }

    /// Takes over slot `slot` (this node leads `part`, its partition of
    /// the groups topic, in leader epoch `epoch`): its groups' offsets and
    /// its transactional ids are replayed from the partition, then served.
    /// State loaded in an older epoch is dropped and loaded again (another
    /// leader may have written between); a load that finds leadership
    /// moved meanwhile keeps nothing, and one that finds this node leading
    /// in a newer epoch loads again (a call for that epoch met this load
    /// under way and left it to this one).
    pub async fn load_slot(&self, slot: u32, part: Rc<crate::partition::Partition>, epoch: i32) {
        let p = SLOTTED + slot;
        match self.loaded_in.borrow().get(&p) {
            Some(&e) if e == epoch => return,
            Some(_) => {}
            None if self.logs.borrow().contains_key(&p) => return,
            None => {}
        }
        if !self.loading.borrow_mut().insert(p) {
            return;
        }
        let mut epoch = epoch;
        loop {
            self.unload_slot(slot);
            let started = Instant::now();
            let loaded = GroupLog::load(p, part.clone(), self.cfg.log_checkpoint_bytes).await;
            let (now, leads) = {
                let role = part.role.borrow();
                (role.epoch(), role.leads())
            };
            if leads && now != epoch {
                log::info!(
                    "group slot {slot}: led again in epoch {now} while loading; loading again"
                );
                epoch = now;
                continue;
            }
            match loaded {
                Ok(_) if !leads => {
                    log::info!(
                        "group slot {slot}: leadership moved while loading; not coordinating"
                    )
                }
                Ok((log, entries)) => {
                    let n = entries.len();
                    self.install(entries);
                    self.logs.borrow_mut().insert(p, Rc::new(log));
                    self.loaded_in.borrow_mut().insert(p, epoch);
                    log::info!(
                        "group slot {slot}: coordinating in epoch {epoch}, {n} entries loaded in {} ms",
                        started.elapsed().as_millis()
                    );
                }
                Err(e) => log::error!("group slot {slot}: loading its coordinator state: {e}"),
            }
            break;
        }
        self.loading.borrow_mut().remove(&p);
    }

    /// Gives up slot `slot` (another node leads it now): its groups'
    /// members are told to find the new coordinator and its state here
    /// is forgotten (the new leader replays it).
    pub fn unload_slot(&self, slot: u32) {
        let p = SLOTTED + slot;
        self.loaded_in.borrow_mut().remove(&p);
        if self.logs.borrow_mut().remove(&p).is_none() {
            return;
        }
        let mine = |key: &str| self.partition_of(key) == p;
        let mut groups = self.groups.borrow_mut();
        let gone: Vec<String> = groups.keys().filter(|k| mine(k)).cloned().collect();
        for k in &gone {
            if let Some(mut g) = groups.remove(k) {
                g.kill();
            }
        }
        let mut txns = self.txns.borrow_mut();
        txns.ids.retain(|k, _| !mine(k));
        txns.pending.retain(|k, _| !mine(k));
        log::info!(
            "group slot {slot}: no longer coordinated here ({} groups)",
            gone.len()
        );
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
        let logs: Vec<_> = self.logs.borrow().values().cloned().collect();
        for log in logs {
            log.close().await;
        }
    }
}
