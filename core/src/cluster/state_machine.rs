//! The metadata quorum's state machine: the cluster's catalog. Applying a
//! command makes the next catalog and publishes it (a `watch`), from which
//! the catalog shard installs it on every shard. A Raft snapshot is the
//! catalog file (`DATA/raft/snapshot.json`, written durably), after which
//! the log before it is purged.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::types::{Applied, Command, Meta};
use crate::catalog::Catalog;

/// What the snapshot file holds.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<u64, BasicNode>,
    catalog: Catalog,
}

struct State {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    catalog: Arc<Catalog>,
    /// The last snapshot, as its file holds it.
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
}

/// The state machine (and its snapshot builder: both share the state).
#[derive(Clone)]
pub struct CatalogMachine {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    publish: Arc<watch::Sender<Arc<Catalog>>>,
}

fn io_error(verb: ErrorVerb, e: std::io::Error) -> StorageError<u64> {
    StorageError::from_io_error(ErrorSubject::StateMachine, verb, e)
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

impl CatalogMachine {
    /// The state machine as its last snapshot left it (nothing applied if
    /// there is none); `publish` receives every catalog it makes.
    pub fn open(
        dir: &std::path::Path,
        publish: Arc<watch::Sender<Arc<Catalog>>>,
    ) -> Result<CatalogMachine, String> {
        let path = dir.join("snapshot.json");
        let mut state = State {
            last_applied: None,
            membership: StoredMembership::default(),
            catalog: Arc::new(Catalog::default()),
            snapshot: None,
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                let file: SnapshotFile = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("{} is damaged: {e}", path.display()))?;
                state.last_applied = file.meta.last_log_id;
                state.membership = file.meta.last_membership.clone();
                state.catalog = Arc::new(file.catalog);
                state.snapshot = Some((file.meta, bytes));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        }
        Ok(CatalogMachine {
            state: Arc::new(Mutex::new(state)),
            path,
            publish,
        })
    }

    /// The catalog as applied so far.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.state.lock().expect("not poisoned").catalog.clone()
    }

    fn replace_catalog(&self, state: &mut State, next: Catalog) {
        let next = Arc::new(next);
        state.catalog = next.clone();
        self.publish.send_replace(next);
    }
}

/// Applies one command to `cat`, answering what happened and the next
/// catalog if it changed.
pub(crate) fn apply(cat: &Catalog, cmd: Command) -> (Applied, Option<Catalog>) {
    match cmd {
        Command::Seed { node, catalog } => {
            if !cat.cluster_id.is_empty() {
                return (Applied::Unchanged, None);
            }
            let mut next = *catalog;
            for t in next.topics.values_mut() {
                if t.nodes.len() != t.shards.len() {
                    t.nodes = vec![node; t.shards.len()];
                }
            }
            next.nodes = cat.nodes.clone();
            // A node that served clients has its groups' offsets: it
            // keeps coordinating them.
            if !next.topics.is_empty() {
                next.group_nodes = vec![node; crate::catalog::GROUP_SLOTS];
            }
            next.version = next.version.max(cat.version) + 1;
            next.admin_version = next.version;
            next.next_producer_id = next.next_producer_id.max(cat.next_producer_id);
            (Applied::Version(next.version), Some(next))
        }
        Command::Change { base, catalog } => {
            let other_cluster = catalog.cluster_id != cat.cluster_id;
            if base != cat.admin_version || cat.cluster_id.is_empty() || other_cluster {
                return (
                    Applied::Conflict {
                        admin_version: cat.admin_version,
                    },
                    None,
                );
            }
            let mut next = cat.clone();
            next.topics = keep_replication(cat, catalog.topics);
            next.users = catalog.users;
            next.acls = catalog.acls;
            next.group_nodes = catalog.group_nodes;
            next.node_configs = catalog.node_configs;
            next.quotas = catalog.quotas;
            next.followed_defaults = catalog.followed_defaults;
            // A topic now allowing unclean elections (its own config, or
            // the cluster-wide default it follows): its partitions left
            // without a leader get one at once, as Kafka's controller does.
            let leaderless = |t: &crate::catalog::TopicMeta| {
                t.config.unclean_leader_election && t.nodes.contains(&crate::catalog::NO_LEADER)
            };
            if next.topics.values().any(leaderless) {
                crate::replication::elect_leaders(&mut next);
            }
            next.version += 1;
            next.admin_version = next.version;
            (Applied::Version(next.version), Some(next))
        }
        Command::Register(node) => {
            let known = cat.nodes.get(&node.id);
            if known.is_some_and(|k| k.same_registration(&node)) {
                return (Applied::Unchanged, None);
            }
            // A node new to the cluster, or one restarted (a new
            // incarnation), comes in fenced, as Kafka's controller takes a
            // broker's registration: leaders it had move in a new epoch
            // (its log may have lost an unsynced tail its followers hold,
            // and must not lead in the epoch they know), and it leaves the
            // ISRs, rejoining once its fetches catch up. The controller
            // lifts the fence once it hears the node (`liveness`).
            let mut node = node;
            node.fenced = match known {
                Some(k) if k.incarnation == node.incarnation => k.fenced,
                _ => true,
            };
            let mut next = cat.clone();
            next.unregistered.remove(&node.id);
            next.nodes.insert(node.id, node);
            crate::replication::elect_leaders(&mut next);
            next.version += 1;
            (Applied::Version(next.version), Some(next))
        }
        Command::Fence { node, fenced } => match cat.nodes.get(&node) {
            // A node stopping on purpose stays fenced until it registers
            // again (a lift decided before its ShutDown was applied).
            Some(n) if n.stopping && !fenced => (Applied::Unchanged, None),
            Some(n) if n.fenced != fenced => {
                let mut next = cat.clone();
                next.nodes.get_mut(&node).expect("present").fenced = fenced;
                crate::replication::elect_leaders(&mut next);
                next.version += 1;
                (Applied::Version(next.version), Some(next))
            }
            _ => (Applied::Unchanged, None),
        },
        Command::ShutDown { node, incarnation } => match cat.nodes.get(&node) {
            Some(n) if n.incarnation == incarnation && !n.stopping => {
                let mut next = cat.clone();
                let n = next.nodes.get_mut(&node).expect("present");
                n.fenced = true;
                n.stopping = true;
                crate::replication::elect_leaders(&mut next);
                next.version += 1;
                (Applied::Version(next.version), Some(next))
            }
            _ => (Applied::Unchanged, None),
        },
        Command::AlterIsr(change) => {
            let mut next = cat.clone();
            match crate::replication::alter_isr(&mut next, &change) {
                Ok(()) => {
                    // A replica being added has caught up: its move may
                    // be complete.
                    crate::replication::reassign::finish_reassignments(&mut next);
                    next.version += 1;
                    (Applied::Version(next.version), Some(next))
                }
                Err(why) => (Applied::Refused(why), None),
            }
        }
        Command::ElectLeaders {
            partitions,
            unclean,
        } => {
            use crate::replication::{elect, Election};
            let mut next = cat.clone();
            // Of all partitions, those already led as asked are not named
            // (Kafka's controller leaves them out too).
            let (asked, named) = match partitions {
                Some(p) => (p, true),
                None => (
                    cat.replicated()
                        .map(|(t, p, _, _)| (t.name.clone(), p))
                        .collect(),
                    false,
                ),
            };
            let mut results = Vec::new();
            for (topic, p) in asked {
                let done = elect(&mut next, &topic, p, unclean);
                if named || done != Election::NotNeeded {
                    results.push((topic, p, done));
                }
            }
            let changed = results.iter().any(|(_, _, e)| *e == Election::Elected);
            if !changed {
                return (Applied::Elections(results), None);
            }
            // An unclean election may leave a move's targets all in sync.
            crate::replication::reassign::finish_reassignments(&mut next);
            next.version += 1;
            (Applied::Elections(results), Some(next))
        }
        Command::Reassign(moves) => {
            use crate::replication::reassign::{reassign, Reassignment};
            let mut next = cat.clone();
            let results: Vec<_> = moves
                .into_iter()
                .map(|(topic, p, target)| {
                    let done = reassign(&mut next, &topic, p, target);
                    (topic, p, done)
                })
                .collect();
            if !results.iter().any(|(_, _, r)| *r == Reassignment::Accepted) {
                return (Applied::Reassignments(results), None);
            }
            next.version += 1;
            (Applied::Reassignments(results), Some(next))
        }
        Command::Unregister { node } => {
            if !cat.nodes.contains_key(&node) {
                return (Applied::Unchanged, None);
            }
            let kept = crate::replication::reassign::kept_by(cat, node);
            if kept > 0 {
                return (
                    Applied::Refused(format!(
                        "node {node} still keeps a copy of {kept} partition(s): they move first"
                    )),
                    None,
                );
            }
            let mut next = cat.clone();
            next.nodes.remove(&node);
            next.unregistered.insert(node);
            next.node_configs.remove(&node.to_string());
            next.version += 1;
            (Applied::Version(next.version), Some(next))
        }
        Command::ProducerIds { count } => {
            let mut next = cat.clone();
            let start = next.next_producer_id;
            next.next_producer_id = start + count.max(1);
            (Applied::ProducerIds { start }, Some(next))
        }
    }
}

/// A change's topics, with each partition the current catalog also has
/// (the same topic, by id) keeping its leader and replication as the
/// quorum has them now: an admin change made on an older view never
/// undoes an election or an ISR change applied meanwhile.
fn keep_replication(
    cat: &Catalog,
    mut topics: std::collections::BTreeMap<String, crate::catalog::TopicMeta>,
) -> std::collections::BTreeMap<String, crate::catalog::TopicMeta> {
    for t in topics.values_mut() {
        let Some(now) = cat.topics.get(&t.name).filter(|n| n.id == t.id) else {
            continue;
        };
        for (p, leader) in now.nodes.iter().enumerate() {
            if let Some(slot) = t.nodes.get_mut(p) {
                *slot = *leader;
            }
        }
        // The quorum's replication whole (a reassignment may have written
        // out a one-replica topic's since the change's view), then any
        // partitions the change added beyond it.
        if !now.replication.is_empty() {
            let mut kept = now.replication.clone();
            kept.truncate(t.shards.len());
            if t.replication.len() > kept.len() {
                kept.extend(t.replication[kept.len()..].iter().cloned());
            }
            t.replication = kept;
        }
    }
    topics
}

impl RaftSnapshotBuilder<Meta> for CatalogMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Meta>, StorageError<u64>> {
        let (meta, catalog) = {
            let s = self.state.lock().expect("not poisoned");
            let id = match s.last_applied {
                Some(l) => format!("{}-{}", l.leader_id.term, l.index),
                None => "0-0".into(),
            };
            let meta = SnapshotMeta {
                last_log_id: s.last_applied,
                last_membership: s.membership.clone(),
                snapshot_id: id,
            };
            (meta, s.catalog.clone())
        };
        let file = SnapshotFile {
            meta: meta.clone(),
            catalog: (*catalog).clone(),
        };
        let bytes =
            serde_json::to_vec(&file).map_err(|e| io_error(ErrorVerb::Write, invalid(e)))?;
        weir_storage::durable::replace(&self.path, &bytes)
            .map_err(|e| io_error(ErrorVerb::Write, e))?;
        self.state.lock().expect("not poisoned").snapshot = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<Meta> for CatalogMachine {
    type SnapshotBuilder = CatalogMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.state.lock().expect("not poisoned");
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<u64>>
    where
        I: IntoIterator<Item = openraft::Entry<Meta>> + Send,
        I::IntoIter: Send,
    {
        let mut s = self.state.lock().expect("not poisoned");
        let mut out = Vec::new();
        for entry in entries {
            s.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => out.push(Applied::Unchanged),
                EntryPayload::Normal(cmd) => {
                    let (answer, next) = apply(&s.catalog, cmd);
                    if let Some(next) = next {
                        self.replace_catalog(&mut s, next);
                    }
                    out.push(answer);
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(entry.log_id), m);
                    out.push(Applied::Unchanged);
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let bytes = snapshot.into_inner();
        let file: SnapshotFile =
            serde_json::from_slice(&bytes).map_err(|e| io_error(ErrorVerb::Read, invalid(e)))?;
        weir_storage::durable::replace(&self.path, &bytes)
            .map_err(|e| io_error(ErrorVerb::Write, e))?;
        let mut s = self.state.lock().expect("not poisoned");
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.snapshot = Some((meta.clone(), bytes));
        self.replace_catalog(&mut s, file.catalog);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Meta>>, StorageError<u64>> {
        let s = self.state.lock().expect("not poisoned");
        Ok(s.snapshot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(bytes.clone())),
        }))
    }
}
