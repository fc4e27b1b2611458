//! What clients are told of where things are: the brokers (a single node,
//! its shards with `--shard-ports`, or a cluster's registered nodes), the
//! controller, each partition's leader and each group's coordinator.

use crate::catalog::{stable_hash, ClusterNode, TopicMeta};
use crate::config::Broker;
use crate::error::{ErrorCode, KafkaError};

use super::Shard;

/// A partition as Metadata tells it (`Shard::partition_view`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline: Vec<i32>,
}

impl Shard {
    /// Every broker with whether it is fenced (a cluster's node silent
    /// past its session timeout; never on a single node).
    pub fn brokers_and_fenced(&self) -> Vec<(Broker, bool)> {
        if self.cluster.is_none() {
            return self
                .config
                .brokers()
                .into_iter()
                .map(|b| (b, false))
                .collect();
        }
        let cat = self.catalog();
        let mut out: Vec<(Broker, bool)> = cat
            .nodes
            .values()
            .flat_map(|n| n.brokers().into_iter().map(|b| (b, n.fenced)))
            .collect();
        // Until its registration is applied here, a node names itself: a
        // client's Metadata is never without a broker to go to (not once
        // UnregisterBroker removed it).
        let me = self.config.node_id;
        if !cat.nodes.contains_key(&me) && !cat.unregistered.contains(&me) {
            let me = self.config.cluster_node().brokers();
            out.extend(me.into_iter().map(|b| (b, false)));
        }
        out
    }

    /// The broker serving shard `placed` of cluster node `node` (the node
    /// itself unless it serves `--shard-ports`).
    pub fn node_broker(&self, node: i32, placed: usize) -> i32 {
        match self.catalog().nodes.get(&node) {
            Some(n) => n.broker_of(placed).id,
            None if node == self.config.node_id => self.config.cluster_node().broker_of(placed).id,
            None => node,
        }
    }

    /// The metadata quorum's members as DescribeQuorum names them: each
    /// node by its id, at its Kafka port (a single node: its broker).
    pub fn quorum_nodes(&self) -> Vec<Broker> {
        if self.cluster.is_none() {
            return self.brokers();
        }
        self.catalog()
            .nodes
            .values()
            .map(|n| Broker {
                id: n.id,
                host: n.kafka_host.clone(),
                port: n.kafka_port,
                rack: n.rack.clone(),
            })
            .collect()
    }

    /// The brokers Metadata names: every registered one, fenced ones too.
    /// Kafka leaves fenced brokers out, but a weir node registers fenced
    /// on every restart and is fenced after a short session: a broker that
    /// leaves Metadata and comes back is one librdkafka (≥ 2.10)
    /// decommissions, leaving the partitions and coordinator requests it
    /// had on the dead handle (confluentinc/librdkafka#4976, #5511), so a
    /// client stalls after a whole-cluster restart. A fenced node leads
    /// and coordinates nothing, so naming it only tells its address;
    /// DescribeCluster still leaves it out unless asked (KIP-1073).
    pub fn brokers(&self) -> Vec<Broker> {
        self.brokers_and_fenced()
            .into_iter()
            .map(|(b, _)| b)
            .collect()
    }

    /// The brokers among `ids` (KIP-951's node endpoints for the leaders
    /// a response names).
    pub fn brokers_among(&self, ids: &std::collections::BTreeSet<i32>) -> Vec<Broker> {
        self.brokers()
            .into_iter()
            .filter(|b| ids.contains(&b.id))
            .collect()
    }

    /// The controller's broker id (-1 while a cluster has none).
    pub fn controller_id(&self) -> i32 {
        match &self.cluster {
            Some(c) => c.controller().map_or(-1, |node| self.node_broker(node, 0)),
            None => self.config.broker_of(0).id,
        }
    }

    /// The broker leading partition `p` of `t`; `None` when its node is
    /// fenced or it has no leader (LEADER_NOT_AVAILABLE until one is
    /// back).
    pub fn partition_leader(&self, t: &TopicMeta, p: i32) -> Option<i32> {
        match t.place(p)? {
            (None, shard) => Some(self.config.broker_of(shard).id),
            (Some(node), shard) => {
                let fenced = self.catalog().nodes.get(&node).is_none_or(|n| n.fenced);
                (!fenced).then(|| self.node_broker(node, shard))
            }
        }
    }

    /// Partition `p` of `t` as Metadata tells it: its leader (if any),
    /// leader epoch, replicas, in-sync replicas and the replicas on fenced
    /// nodes, each as the broker clients know it.
    pub fn partition_view(&self, t: &TopicMeta, p: i32) -> PartitionView {
        let leader = self.partition_leader(t, p);
        let Some((Some(led_by), shard)) = t.place(p) else {
            let me = leader.into_iter().collect::<Vec<_>>();
            return PartitionView {
                leader,
                leader_epoch: 0,
                replicas: me.clone(),
                isr: me,
                offline: Vec::new(),
            };
        };
        let cat = self.catalog();
        let (replicas, isr) = match t.replicas_of(p) {
            Some(r) => (r.replicas.clone(), r.isr.clone()),
            None => (vec![led_by], vec![led_by]),
        };
        let fenced = |n: &i32| cat.nodes.get(n).is_none_or(|node| node.fenced);
        let broker = |n: &i32| self.node_broker(*n, shard);
        PartitionView {
            leader,
            leader_epoch: t.leader_epoch(p),
            offline: replicas.iter().filter(|n| fenced(n)).map(broker).collect(),
            isr: match leader {
                Some(_) => isr.iter().map(broker).collect(),
                None => Vec::new(),
            },
            replicas: replicas.iter().map(broker).collect(),
        }
    }

    /// The broker coordinating a group or transactional id: on a single
    /// node this node (or the owning shard's broker); in a cluster the
    /// node the key hashes to among the registered ones.
    pub fn coordinator(&self, key: &str) -> Result<Broker, KafkaError> {
        if self.cluster.is_none() {
            return Ok(self.config.broker_of(self.group_shard(key)));
        }
        let cat = self.catalog();
        if let Some(t) = cat.topic(crate::catalog::GROUPS_TOPIC) {
            let (n, placed) = self.slot_leader(t, key)?;
            return Ok(n.broker_of(placed));
        }
        let n = self.coordinating_node(key)?;
        Ok(n.broker_of(super::owner_shard(key, n.shards)))
    }

    /// Waits until every key's coordinator is known (its slot has a live
    /// leader), a catalog at a time, for at most `bound`: FindCoordinator
    /// answers once a new leader is elected rather than refusing at once.
    /// librdkafka's coordinator lookups (a transaction's
    /// TxnOffsetCommit) retry COORDINATOR_NOT_AVAILABLE twice and then wait
    /// for a broker connection to change state, which a settled cluster
    /// never does: refused through an election, they hang past their own
    /// timeout. Answers the same as `coordinator` afterwards.
    pub async fn coordinators_known(&self, keys: &[&str], bound: std::time::Duration) {
        if self.cluster.is_none() {
            return;
        }
        let deadline = std::time::Instant::now() + bound;
        loop {
            let changed = self.catalog_changed();
            let unknown = keys.iter().any(|k| {
                matches!(self.coordinator(k), Err(e) if e.code == ErrorCode::CoordinatorNotAvailable)
            });
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !unknown || left.is_zero() || self.is_stopping() {
                return;
            }
            let tick = Box::pin(glommio::timer::sleep(left));
            let _ = futures::future::select(changed, tick).await;
        }
    }

    /// The node leading `key`'s slot of the groups topic `t`, and the
    /// shard it is placed on.
    fn slot_leader(&self, t: &TopicMeta, key: &str) -> Result<(ClusterNode, usize), KafkaError> {
        let slot = crate::catalog::group_slot(key) as i32;
        let cat = self.catalog();
        let unavailable =
            |why: String| Err(KafkaError::new(ErrorCode::CoordinatorNotAvailable, why));
        let Some((Some(leader), placed)) = t.place(slot) else {
            return unavailable(format!("{key:?}'s group slot {slot} has no partition"));
        };
        match cat.nodes.get(&leader) {
            Some(n) if !n.fenced => Ok((n.clone(), placed)),
            _ => unavailable(format!(
                "{key:?}'s group slot {slot} has no live leader (node {leader})"
            )),
        }
    }

    /// In a cluster, the node coordinating a group or transactional id:
    /// the leader of its slot of the groups topic (or, in a cluster whose
    /// groups predate it, the node its slot is dealt to).
    pub fn coordinating_node(&self, key: &str) -> Result<ClusterNode, KafkaError> {
        let cat = self.catalog();
        if let Some(t) = cat.topic(crate::catalog::GROUPS_TOPIC) {
            return Ok(self.slot_leader(t, key)?.0);
        }
        let slots = &cat.group_nodes;
        if slots.is_empty() {
            return Err(KafkaError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the cluster's group coordinators are not placed yet",
            ));
        }
        let id = slots[(stable_hash(key) % slots.len() as u64) as usize];
        let Some(n) = cat.nodes.get(&id) else {
            return Err(KafkaError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("node {id}, which coordinates {key:?}, has not registered"),
            ));
        };
        if n.fenced {
            return Err(KafkaError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("node {}, which coordinates {key:?}, is fenced", n.id),
            ));
        }
        Ok(n.clone())
    }

    /// In a cluster, deals the group slots over the live nodes if nobody
    /// has yet (FindCoordinator's first call).
    pub async fn place_group_coordinators(self: &std::rc::Rc<Self>) -> Result<(), KafkaError> {
        let cat = self.catalog();
        let placed =
            !cat.group_nodes.is_empty() || cat.topic(crate::catalog::GROUPS_TOPIC).is_some();
        if self.cluster.is_none() || placed {
            return Ok(());
        }
        self.make_groups_topic().await
    }

    /// Whether this node coordinates `key` (else NOT_COORDINATOR, and
    /// the client asks FindCoordinator again).
    pub fn coordinates(&self, key: &str) -> Result<(), KafkaError> {
        if self.cluster.is_none() {
            return Ok(());
        }
        let n = self.coordinating_node(key)?;
        if n.id == self.config.node_id {
            return Ok(());
        }
        Err(KafkaError::new(
            ErrorCode::NotCoordinator,
            format!("node {} coordinates {key:?}, not this node", n.id),
        ))
    }
}
