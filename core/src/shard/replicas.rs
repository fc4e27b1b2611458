//! Replicated partitions on a shard: each partition kept here takes its
//! role from every catalog installed; a leader keeps its ISR, asking the
//! quorum to change it (Kafka's AlterPartition); a follower is fed by the
//! replica fetcher (`net`'s `replica_fetcher`), which asks what to fetch
//! (`followed`) and hands each answer to `Partition::append_from_leader`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;

use crate::catalog::Catalog;
use crate::cluster::types::{Applied, Command, IsrChange};
use crate::config::Broker;
use crate::partition::Partition;
use crate::replication::leader::Role;
use crate::replication::reassign::Reassignment;
use crate::replication::Election;
use crate::topic_partition::TopicPartition;

use super::Shard;

/// How long a leader waits after the quorum refused an ISR change before
/// asking again (the ISR is checked every 100 ms).
const ISR_RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);

/// How long UnregisterBroker waits for the node's partitions to move off
/// it before answering that the drain goes on.
const UNREGISTER_DRAIN_WAIT: Duration = Duration::from_secs(60);

/// A partition this shard follows: where its leader is and what to ask.
#[derive(Clone)]
pub struct Followed {
    pub partition: Rc<Partition>,
    pub topic_id: [u8; 16],
    /// The leader's node, and the broker to fetch from (the node, or its
    /// shard with `--shard-ports`).
    pub leader: i32,
    pub broker: Broker,
    pub epoch: i32,
    /// A replica a reassignment is adding here: its copying counts
    /// against the node's move throttle (`Shard::move_throttle`).
    pub throttled: bool,
}

impl Shard {
    /// Gives every partition kept here the role `cat` says (after the
    /// partitions are opened or dropped), and wakes the replica fetcher.
    pub(crate) fn take_roles(self: &Rc<Self>, cat: &Catalog) {
        let parts: Vec<(TopicPartition, Rc<Partition>)> = self
            .partitions
            .borrow()
            .iter()
            .map(|(tp, p)| (tp.clone(), p.clone()))
            .collect();
        for (tp, part) in parts {
            if !self.take_role(cat, &tp, &part) {
                continue;
            }
            if tp.topic() == crate::catalog::GROUPS_TOPIC {
                self.coordinate_slot(tp.partition as u32, &part);
            }
        }
        for w in self.catalog_watchers.borrow_mut().drain(..) {
            let _ = w.send(());
        }
    }

    /// Gives one partition the role `cat` says; false if `cat` has no
    /// such topic. Until this run of the node is registered (a restart:
    /// the catalog still names its previous incarnation), it leads
    /// nothing: the quorum is about to move its leaderships to a new
    /// epoch, and leading in the old one could reuse offsets its
    /// followers hold with other records (an unsynced tail lost in the
    /// crash).
    fn take_role(&self, cat: &Catalog, tp: &TopicPartition, part: &Partition) -> bool {
        let me = self.config.node_id;
        let Some(t) = cat.topic(tp.topic()) else {
            return false;
        };
        let registered = cat
            .nodes
            .get(&me)
            .is_none_or(|n| n.incarnation == crate::config::incarnation());
        let role = match Role::from_catalog(t, tp.partition, me) {
            Role::Leader(l) if !registered => Role::Leaderless { epoch: l.epoch },
            role => role,
        };
        if let Err(e) = part.set_role(role) {
            log::error!("{}-{}: taking its new role: {e}", tp.topic(), tp.partition);
        }
        true
    }

    /// A partition of the groups topic: its leader coordinates its slot
    /// (loading it first), any other replica gives it up.
    fn coordinate_slot(self: &Rc<Self>, slot: u32, part: &Rc<Partition>) {
        let (leads, epoch) = {
            let role = part.role.borrow();
            (role.leads(), role.epoch())
        };
        match leads {
            true => {
                let (s, part) = (self.clone(), part.clone());
                glommio::spawn_local(async move { s.groups.load_slot(slot, part, epoch).await })
                    .detach();
            }
            false => self.groups.unload_slot(slot),
        }
    }

    /// Kafka's ElectLeaders: asks the quorum to elect `partitions`'
    /// preferred leaders (every replicated partition's if `None`), or
    /// with `unclean` any live replica of those without a live leader;
    /// then waits until this node installed the outcome. A single node's
    /// partitions have no other leader to elect.
    pub async fn elect_leaders(
        self: &Rc<Self>,
        partitions: Option<Vec<(String, i32)>>,
        unclean: bool,
    ) -> Result<Vec<(String, i32, Election)>, crate::error::KafkaError> {
        use crate::error::{ErrorCode, KafkaError};
        let Some(control) = self.cluster.clone() else {
            let cat = self.catalog();
            let known = |t: &str, p: i32| {
                cat.topic(t)
                    .is_some_and(|m| p >= 0 && (p as usize) < m.shards.len())
            };
            return Ok(partitions
                .unwrap_or_default()
                .into_iter()
                .map(|(t, p)| {
                    let e = match known(&t, p) {
                        true => Election::NotNeeded,
                        false => Election::Unknown,
                    };
                    (t, p, e)
                })
                .collect());
        };
        let cmd = Command::ElectLeaders {
            partitions,
            unclean,
        };
        match self.propose_and_install(&control, cmd).await? {
            Applied::Elections(results) => Ok(results),
            other => Err(KafkaError::new(
                ErrorCode::UnknownServerError,
                format!("the metadata quorum answered an election with {other:?}"),
            )),
        }
    }

    /// Kafka's AlterPartitionReassignments: asks the quorum to move each
    /// partition to its target replicas (`None`: cancel the move under
    /// way), then waits until this node installed the outcome. A single
    /// node has no other node to move a partition to.
    pub async fn reassign_partitions(
        self: &Rc<Self>,
        moves: Vec<crate::replication::reassign::Move>,
    ) -> Result<Vec<(String, i32, Reassignment)>, crate::error::KafkaError> {
        use crate::error::{ErrorCode, KafkaError};
        let Some(control) = self.cluster.clone() else {
            return Err(KafkaError::new(
                ErrorCode::InvalidReplicaAssignment,
                "a single node has no other node to move a partition to",
            ));
        };
        match self
            .propose_and_install(&control, Command::Reassign(moves))
            .await?
        {
            Applied::Reassignments(results) => Ok(results),
            other => Err(KafkaError::new(
                ErrorCode::UnknownServerError,
                format!("the metadata quorum answered a reassignment with {other:?}"),
            )),
        }
    }

    /// Kafka's UnregisterBroker, with a drain first: every partition node
    /// `node` keeps moves to other nodes (`reassign::drain`, refused if
    /// that would leave one under `min.insync.replicas`); once it keeps
    /// none (waited for at most `UNREGISTER_DRAIN_WAIT`, else answered
    /// REQUEST_TIMED_OUT with the moves going on), it leaves the
    /// cluster's nodes.
    pub async fn unregister_node(
        self: &Rc<Self>,
        node: i32,
    ) -> Result<(), crate::error::KafkaError> {
        use crate::error::{ErrorCode, KafkaError};
        use crate::replication::reassign::{drain, kept_by};
        let Some(control) = self.cluster.clone() else {
            return Err(KafkaError::new(
                ErrorCode::InvalidRequest,
                "a single node is no cluster to leave",
            ));
        };
        self.catch_up(&control, Duration::from_secs(1)).await;
        let cat = self.catalog();
        if !cat.nodes.contains_key(&node) {
            return Err(KafkaError::new(
                ErrorCode::BrokerIdNotRegistered,
                format!("node {node} is not a node of this cluster"),
            ));
        }
        let moves: Vec<_> = drain(&cat, node)
            .map_err(|why| KafkaError::new(ErrorCode::InvalidRequest, why))?
            .into_iter()
            // A move already under way to the same place goes on.
            .filter(|(t, p, target)| {
                let now = cat
                    .topic(t)
                    .and_then(|m| m.replicas_of(*p))
                    .map(|r| r.target());
                now.as_ref() != target.as_ref()
            })
            .collect();
        if !moves.is_empty() {
            log::info!(
                "draining node {node}: moving {} partition(s) off it",
                moves.len()
            );
            self.reassign_partitions(moves).await?;
        }
        let deadline = Instant::now() + UNREGISTER_DRAIN_WAIT;
        loop {
            let kept = kept_by(&self.catalog(), node);
            if kept == 0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(KafkaError::new(
                    ErrorCode::RequestTimedOut,
                    format!("node {node} still keeps a copy of {kept} partition(s); their moves go on (ListPartitionReassignments): ask again once they are done"),
                ));
            }
            let changed = self.catalog_changed();
            let tick = glommio::timer::sleep(Duration::from_millis(500));
            futures::future::select(changed, Box::pin(tick)).await;
        }
        match self
            .propose_and_install(&control, Command::Unregister { node })
            .await?
        {
            Applied::Refused(why) => Err(KafkaError::new(ErrorCode::InvalidRequest, why)),
            _ => {
                log::info!("node {node} left the cluster");
                Ok(())
            }
        }
    }

    /// Whether this node is ready for clients in a rolling restart
    /// (`GET /ready`, a Kubernetes readiness probe): in a cluster, once
    /// this run of it is registered and not fenced, and it is in the ISR
    /// of every replicated partition it keeps that has a leader; else why
    /// not. A single node is ready once it serves.
    pub fn readiness(&self) -> Result<(), String> {
        if self.cluster.is_none() {
            return Ok(());
        }
        let cat = self.catalog();
        let me = self.config.node_id;
        match cat.nodes.get(&me) {
            Some(n) if n.incarnation != crate::config::incarnation() => {
                return Err("this run of the node is not registered yet".into())
            }
            Some(n) if n.fenced => {
                return Err("this node is fenced (the controller has not heard it yet)".into())
            }
            Some(_) => {}
            None => return Err("this node is not registered yet".into()),
        }
        let behind = cat
            .replicated()
            .filter(|(_, _, leader, r)| {
                *leader != crate::catalog::NO_LEADER
                    && r.replicas.contains(&me)
                    && !r.isr.contains(&me)
            })
            .count();
        match behind {
            0 => Ok(()),
            n => Err(format!(
                "{n} partitions kept here are not in sync with their leaders yet"
            )),
        }
    }

    /// Proposes `cmd` to the metadata quorum and answers what applying it
    /// did once this shard has installed the outcome (or after 10 s: it is
    /// applied either way), so a client asking next sees it here.
    async fn propose_and_install(
        &self,
        control: &crate::cluster::Control,
        cmd: Command,
    ) -> Result<Applied, crate::error::KafkaError> {
        let applied = control.propose(cmd).await?;
        self.catch_up(control, Duration::from_secs(10)).await;
        Ok(applied)
    }

    /// Waits, at most `within`, until this shard has installed the
    /// catalog the quorum has applied on this node (the catalog shard
    /// installs each on every shard).
    pub(crate) async fn catch_up(&self, control: &crate::cluster::Control, within: Duration) {
        let version = control.latest().version;
        let installed = async {
            while self.catalog().version < version {
                let _ = self.catalog_changed().await;
            }
        };
        let bound = glommio::timer::sleep(within);
        futures::future::select(Box::pin(installed), Box::pin(bound)).await;
    }

    /// A receiver woken when the next catalog is installed here.
    pub fn catalog_changed(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut w = self.catalog_watchers.borrow_mut();
        w.retain(|w| !w.is_canceled());
        w.push(tx);
        rx
    }

    /// The bytes per second this shard copies for replicas a
    /// reassignment adds here (its share of the node's), 0: unbounded.
    pub fn move_throttle(&self) -> u64 {
        let node = self
            .catalog()
            .move_throttle(self.config.node_id, self.config.replication_throttle_bytes);
        node.div_ceil(self.nr_shards.max(1) as u64)
    }

    /// The partitions this shard follows, each with its leader's broker.
    pub fn followed(&self) -> Vec<Followed> {
        let cat = self.catalog();
        let parts = self.owned_partitions();
        parts
            .into_iter()
            .filter_map(|p| {
                let Role::Follower { leader, epoch } = *p.role.borrow() else {
                    return None;
                };
                let t = cat.topic(&p.topic)?;
                let (_, shard) = t.place(p.index)?;
                let broker = cat.nodes.get(&leader)?.broker_of(shard);
                // In sync, it is throttled no more (Kafka's
                // shouldFollowerThrottle: no ISR thrashing).
                let me = self.config.node_id;
                let throttled = t
                    .replicas_of(p.index)
                    .is_some_and(|r| r.adding.contains(&me) && !r.isr.contains(&me));
                Some(Followed {
                    topic_id: t.id,
                    partition: p,
                    leader,
                    broker,
                    epoch,
                    throttled,
                })
            })
            .collect()
    }

    /// Each leader here looks at its followers: one behind longer than
    /// `replica.lag.time.max.ms` is dropped from the ISR, one caught up
    /// is added, each change asked of the quorum (one at a time per
    /// partition; a refused one is asked again at the next look).
    pub fn maintain_isrs(self: &Rc<Self>) {
        let Some(control) = self.cluster.clone() else {
            return;
        };
        let cat = self.catalog();
        let lag = self.config.replica_lag_time_max;
        let now = Instant::now();
        for part in self.owned_partitions() {
            let change = {
                let mut role = part.role.borrow_mut();
                let Role::Leader(l) = &mut *role else {
                    continue;
                };
                let Some(isr) = l.isr_to_ask(lag, now) else {
                    continue;
                };
                let Some(t) = cat.topic(&part.topic) else {
                    continue;
                };
                log::info!(
                    "{}-{}: asking for in-sync replicas {isr:?} (now {:?})",
                    part.topic,
                    part.index,
                    l.isr
                );
                IsrChange {
                    topic: part.topic.clone(),
                    topic_id: t.id,
                    partition: part.index,
                    leader: l.me,
                    leader_epoch: l.epoch,
                    partition_epoch: l.partition_epoch,
                    isr,
                }
            };
            // A shrink wanted counts no less: the high watermark still
            // waits for every member until the quorum drops one.
            part.update_high_watermark();
            let control = control.clone();
            let epoch = change.leader_epoch;
            glommio::spawn_local(async move {
                let why = match control.propose(Command::AlterIsr(change)).await {
                    Ok(Applied::Refused(why)) => why,
                    Err(e) => e.to_string(),
                    Ok(_) => return,
                };
                log::warn!(
                    "{}-{}: ISR change refused (asked again in {} ms at the earliest): {why}",
                    part.topic,
                    part.index,
                    ISR_RETRY_BACKOFF.as_millis()
                );
                if let Role::Leader(l) = &mut *part.role.borrow_mut() {
                    if l.epoch == epoch {
                        l.refused(Instant::now(), ISR_RETRY_BACKOFF);
                    }
                }
                // Without the change wanted, the ISR alone bounds it again.
                part.update_high_watermark();
            })
            .detach();
        }
    }
}
