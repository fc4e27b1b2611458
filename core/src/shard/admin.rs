//! Catalog administration: every change is made on the catalog shard,
//! written durably, then installed on every shard (which opens or drops
//! the partitions it owns) before the request is answered.

use std::rc::Rc;
use std::sync::Arc;

use futures::future::join_all;
use weir_storage::PartitionLog;

use crate::catalog::{
    new_topic_id, placement, validate_topic_name, Catalog, TopicConfig, TopicMeta, MAX_PARTITIONS,
};
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::partition::Partition;
use crate::topic_partition::TopicPartition;

use super::{Shard, CATALOG_SHARD};

/// A topic and the partition count CreatePartitions grows it to.
pub struct PartitionCount {
    pub topic: String,
    pub count: i32,
}

/// One topic of a CreateTopics request.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, Option<String>)>,
    /// CREATE TABLE's columns; `None` for a raw topic.
    pub schema: Option<crate::catalog::schema::TableSchema>,
    /// CreateTopics' explicit assignments: each partition's replicas by
    /// broker id, the first its leader (empty: placed by the node).
    pub assignments: Vec<Vec<i32>>,
}

/// One config change of an IncrementalAlterConfigs request.
#[derive(Debug, Clone)]
pub struct ConfigChange {
    pub name: String,
    /// Kafka's operation: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
    pub op: i8,
    pub value: Option<String>,
}

impl Shard {
    // ---- catalog -------------------------------------------------------

    /// Runs one catalog change on the catalog shard: `change` edits a copy
    /// of the catalog and says per item what happened, and whether anything
    /// changed; if so the copy is saved and installed on every shard before
    /// the answers return. Changes are serialised by the catalog lock.
    pub(crate) async fn change_catalog<T, F>(
        self: &Rc<Self>,
        items: usize,
        change: F,
    ) -> Vec<Result<T, KafkaError>>
    where
        T: Clone + Send + 'static,
        F: FnOnce(&Shard, &mut Catalog) -> (Vec<Result<T, KafkaError>>, bool) + Send + 'static,
    {
        self.invoke_on(CATALOG_SHARD, move |s| async move {
            let _lock = s.catalog_lock.acquire_permit(1).await.expect("open");
            // In a cluster, the change is made on the newest catalog the
            // quorum applied here.
            if let Some(control) = &s.cluster {
                if let Err(e) = s.install_newer(control.latest()).await {
                    return vec![Err(e); items];
                }
            }
            let mut cat = (*s.catalog()).clone();
            let (results, changed) = change(&s, &mut cat);
            if changed {
                let committed = match s.cluster.clone() {
                    None => s.commit_catalog(cat).await,
                    Some(control) => s.commit_to_cluster(&control, cat).await,
                };
                if let Err(e) = committed {
                    return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
                }
            }
            results
        })
        .await
        .unwrap_or_else(|e| vec![Err(e); items])
    }

    /// One change to the catalog's users or ACLs, made durably on the
    /// catalog shard and installed on every shard before it returns.
    pub async fn change_access<T, F>(self: &Rc<Self>, change: F) -> Result<T, KafkaError>
    where
        T: Clone + Send + 'static,
        F: FnOnce(&mut Catalog) -> Result<T, KafkaError> + Send + 'static,
    {
        self.change_catalog(1, move |_, cat| {
            let r = change(cat);
            let changed = r.is_ok();
            (vec![r], changed)
        })
        .await
        .pop()
        .expect("one answer")
    }

    /// Creates topics. `validate_only` checks without creating.
    pub async fn create_topics(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<TopicMeta, KafkaError>> {
        self.change_catalog(topics.len(), move |s, cat| {
            let results: Vec<_> = topics
                .into_iter()
                .map(|t| {
                    s.plan_topic(cat, t).inspect(|meta| {
                        if !validate_only {
                            cat.topics.insert(meta.name.clone(), meta.clone());
                        }
                    })
                })
                .collect();
            let changed = !validate_only && results.iter().any(|r| r.is_ok());
            (results, changed)
        })
        .await
    }

    fn plan_topic(&self, cat: &Catalog, t: NewTopic) -> Result<TopicMeta, KafkaError> {
        validate_topic_name(&t.name)?;
        if cat.topics.contains_key(&t.name) {
            return Err(KafkaError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic {:?} already exists", t.name),
            ));
        }
        let partitions = if t.partitions == -1 {
            self.config.default_partitions
        } else {
            t.partitions
        };
        if partitions <= 0 || partitions > MAX_PARTITIONS {
            return Err(KafkaError::new(
                ErrorCode::InvalidPartitions,
                format!("{partitions} partitions: a topic has 1 to {MAX_PARTITIONS}"),
            ));
        }
        let live = match self.cluster.is_some() {
            true => cat.live_nodes().count(),
            false => 1,
        };
        let replication_factor = match t.replication_factor {
            -1 => 1,
            f if f < 1 => {
                return Err(KafkaError::new(
                    ErrorCode::InvalidReplicationFactor,
                    format!("replication factor {f}: a topic has at least 1 replica"),
                ))
            }
            f if f as usize > live => {
                return Err(KafkaError::new(
                    ErrorCode::InvalidReplicationFactor,
                    format!("replication factor {f} is larger than the {live} live node(s)"),
                ))
            }
            f => f as usize,
        };
        let mut meta = TopicMeta {
            shards: Vec::new(),
            nodes: Vec::new(),
            replication: Vec::new(),
            name: t.name,
            id: new_topic_id(),
            config: TopicConfig::default(),
            schema: t.schema,
            throttled_replicas: Default::default(),
        };
        for (name, value) in &t.configs {
            let Some(v) = value else {
                return Err(KafkaError::new(
                    ErrorCode::InvalidConfig,
                    format!("Null value not supported for topic configs: {name}"),
                ));
            };
            meta.set_config(name, v)?;
        }
        if meta.name != crate::catalog::GROUPS_TOPIC {
            meta.config
                .follow_defaults(&cat.topic_defaults(&self.config));
        }
        meta.config.validate()?;
        match t.assignments.is_empty() {
            true => self.place_partitions(cat, &mut meta, partitions, replication_factor)?,
            false => self.place_assigned(cat, &mut meta, &t.assignments)?,
        }
        Ok(meta)
    }

    /// Places partitions of `t` up to `count`: on a single node, round
    /// robin over its shards from a hash of the name; in a cluster, each
    /// led by the live node leading the fewest partitions so far (ties
    /// broken from the hash), on one of that node's shards, with its other
    /// `replication_factor - 1` replicas on the live nodes keeping the
    /// fewest replicas, in racks no replica is in yet where there are.
    fn place_partitions(
        &self,
        cat: &Catalog,
        t: &mut TopicMeta,
        count: i32,
        replication_factor: usize,
    ) -> Result<(), KafkaError> {
        let first = t.partitions();
        if self.cluster.is_none() {
            t.shards
                .extend((first..count).map(|p| placement(&t.name, p, self.nr_shards)));
            return Ok(());
        }
        let live: Vec<&crate::catalog::ClusterNode> = cat.live_nodes().collect();
        if live.is_empty() {
            return Err(KafkaError::new(
                ErrorCode::InvalidReplicationFactor,
                "no live node to place partitions on",
            ));
        }
        if replication_factor > live.len() {
            return Err(KafkaError::new(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {replication_factor} is larger than the {} live node(s)",
                    live.len()
                ),
            ));
        }
        let mut led: std::collections::BTreeMap<i32, usize> =
            live.iter().map(|n| (n.id, 0)).collect();
        let mut kept = led.clone();
        for other in cat.topics.values().chain(std::iter::once(&*t)) {
            for (p, n) in other.nodes.iter().enumerate() {
                if let Some(c) = led.get_mut(n) {
                    *c += 1;
                }
                let replicas = other.replicas_of(p as i32).map(|r| r.replicas.clone());
                for n in replicas.unwrap_or_else(|| vec![*n]) {
                    if let Some(c) = kept.get_mut(&n) {
                        *c += 1;
                    }
                }
            }
        }
        let offset = crate::catalog::stable_hash(&t.name) as usize;
        for p in first..count {
            let turn = |i: usize| live[(offset + p as usize + i) % live.len()];
            let node = (0..live.len())
                .map(turn)
                .min_by_key(|n| led[&n.id])
                .expect("some live node");
            *led.get_mut(&node.id).expect("counted") += 1;
            *kept.get_mut(&node.id).expect("counted") += 1;
            t.nodes.push(node.id);
            t.shards.push(placement(&t.name, p, node.shards));
            // A topic one of whose partitions a reassignment moved keeps
            // the replication of every partition, one replica or more.
            if replication_factor > 1 || !t.replication.is_empty() {
                let mut replicas = vec![node.id];
                while replicas.len() < replication_factor {
                    // Racks spread first (a rack lost keeps a copy
                    // elsewhere), then the node keeping the fewest.
                    let racks: Vec<Option<&str>> = replicas
                        .iter()
                        .map(|r| {
                            live.iter()
                                .find(|n| n.id == *r)
                                .and_then(|n| n.rack.as_deref())
                        })
                        .collect();
                    let next = (1..=live.len())
                        .map(turn)
                        .filter(|n| !replicas.contains(&n.id))
                        .min_by_key(|n| {
                            let shared = n.rack.is_some() && racks.contains(&n.rack.as_deref());
                            (shared, kept[&n.id])
                        })
                        .expect("enough live nodes");
                    *kept.get_mut(&next.id).expect("counted") += 1;
                    replicas.push(next.id);
                }
                t.replication.push(crate::catalog::Replicas {
                    isr: replicas.clone(),
                    replicas,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    ..Default::default()
                });
            }
        }
        Ok(())
    }

    /// Places `t`'s partitions as CreateTopics assigned them: partition
    /// `p` on the brokers `assignments[p]` (their nodes), led by the
    /// first. As Kafka: every partition has as many replicas, each a
    /// distinct live broker.
    fn place_assigned(
        &self,
        cat: &Catalog,
        t: &mut TopicMeta,
        assignments: &[Vec<i32>],
    ) -> Result<(), KafkaError> {
        let bad = |why: String| Err(KafkaError::new(ErrorCode::InvalidReplicaAssignment, why));
        let rf = assignments[0].len();
        for (p, brokers) in assignments.iter().enumerate() {
            let p = p as i32;
            if brokers.is_empty() || brokers.len() != rf {
                return bad(format!(
                    "partition {p} has {} replicas: every partition needs as many as the first ({rf}), at least one",
                    brokers.len()
                ));
            }
            // With `--shard-ports` a broker is a node's shard.
            let node_of = |b: i32| match b >= crate::catalog::SHARD_BROKERS {
                true => b / crate::catalog::SHARD_BROKERS,
                false => b,
            };
            let nodes: Vec<i32> = brokers.iter().map(|&b| node_of(b)).collect();
            let mut distinct = nodes.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() != nodes.len() {
                return bad(format!("partition {p} names a node twice: {brokers:?}"));
            }
            let shard = match self.cluster.is_some() {
                true => {
                    for n in &nodes {
                        if !cat.live_nodes().any(|l| l.id == *n) {
                            return bad(format!("partition {p}: broker {n} is not a live node"));
                        }
                    }
                    let leader = &cat.nodes[&nodes[0]];
                    let placed = match brokers[0] >= crate::catalog::SHARD_BROKERS {
                        true => (brokers[0] % crate::catalog::SHARD_BROKERS) as usize,
                        false => placement(&t.name, p, leader.shards),
                    };
                    t.nodes.push(leader.id);
                    placed
                }
                false => {
                    let me = self.config.brokers();
                    let Some(b) = me.iter().position(|b| b.id == brokers[0]) else {
                        return bad(format!(
                            "partition {p}: broker {} is not this node",
                            brokers[0]
                        ));
                    };
                    if rf > 1 {
                        return bad(format!("partition {p}: {rf} replicas on a single node"));
                    }
                    match self.config.shard_port_base {
                        Some(_) => b,
                        None => placement(&t.name, p, self.nr_shards),
                    }
                }
            };
            t.shards.push(shard);
            if rf > 1 {
                t.replication.push(crate::catalog::Replicas {
                    replicas: nodes.clone(),
                    isr: nodes,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    ..Default::default()
                });
            }
        }
        Ok(())
    }

    /// Makes the cluster's replicated group logs (`GROUPS_TOPIC`): one
    /// partition per group slot, on up to three live nodes each, whose
    /// leaders coordinate the slots' groups and transactional ids. Kept
    /// whole (no retention: a checkpoint moves its start).
    pub(crate) async fn make_groups_topic(self: &Rc<Self>) -> Result<(), KafkaError> {
        let live = self.catalog().live_nodes().count();
        let topic = NewTopic {
            name: crate::catalog::GROUPS_TOPIC.into(),
            partitions: crate::catalog::GROUP_SLOTS as i32,
            replication_factor: live.clamp(1, 3) as i16,
            configs: [
                ("retention.ms", "-1"),
                ("retention.bytes", "-1"),
                ("segment.bytes", "8388608"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Some(v.to_string())))
            .collect(),
            schema: None,
            assignments: Vec::new(),
        };
        match self.create_topics(vec![topic], false).await.pop() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Some(Err(e)) => Err(KafkaError::new(
                ErrorCode::CoordinatorNotAvailable,
                e.message,
            )),
            None => Err(KafkaError::new(
                ErrorCode::CoordinatorNotAvailable,
                "no answer",
            )),
        }
    }

    /// Deals the cluster's group slots over its live nodes, in turn by
    /// id, unless they are dealt.
    #[allow(dead_code)]
    pub(crate) async fn deal_group_slots(self: &Rc<Self>) -> Result<(), KafkaError> {
        self.change_catalog(1, |_, cat| {
            if !cat.group_nodes.is_empty() {
                return (vec![Ok(())], false);
            }
            let live: Vec<i32> = cat.live_nodes().map(|n| n.id).collect();
            if live.is_empty() {
                let none = KafkaError::new(ErrorCode::CoordinatorNotAvailable, "no live node");
                return (vec![Err(none)], false);
            }
            cat.group_nodes = (0..crate::catalog::GROUP_SLOTS)
                .map(|i| live[i % live.len()])
                .collect();
            (vec![Ok(())], true)
        })
        .await
        .pop()
        .expect("one answer")
    }

    /// Deletes topics by name. Returns each topic's id, or why not.
    pub async fn delete_topics(
        self: &Rc<Self>,
        names: Vec<String>,
    ) -> Vec<Result<[u8; 16], KafkaError>> {
        self.change_catalog(names.len(), move |_, cat| {
            let results: Vec<_> = names
                .iter()
                .map(|name| {
                    if name == crate::catalog::GROUPS_TOPIC {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidTopicException,
                            format!(
                                "{name} is the cluster's internal group log and cannot be deleted"
                            ),
                        ));
                    }
                    cat.topics.remove(name).map(|t| t.id).ok_or_else(|| {
                        KafkaError::new(
                            ErrorCode::UnknownTopicOrPartition,
                            format!("topic {name:?} does not exist"),
                        )
                    })
                })
                .collect();
            let changed = results.iter().any(|r| r.is_ok());
            (results, changed)
        })
        .await
    }

    /// Grows each topic to its new partition count.
    pub async fn create_partitions(
        self: &Rc<Self>,
        items: Vec<PartitionCount>,
        validate_only: bool,
    ) -> Vec<Result<(), KafkaError>> {
        self.change_catalog(items.len(), move |s, cat| {
            let results: Vec<_> = items
                .into_iter()
                .map(|PartitionCount { topic: name, count }| {
                    let t = cat.topics.get(&name).ok_or_else(|| {
                        KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("topic {name:?} does not exist"))
                    })?;
                    let have = t.partitions();
                    if count <= have || count > MAX_PARTITIONS {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidPartitions,
                            format!("topic {name:?} has {have} partitions; the new count must be larger and at most {MAX_PARTITIONS}, not {count}"),
                        ));
                    }
                    let mut grown = t.clone();
                    s.place_partitions(cat, &mut grown, count, t.replication_factor())?;
                    if !validate_only {
                        *cat.topics.get_mut(&name).expect("found above") = grown;
                    }
                    Ok(())
                })
                .collect();
            let changed = !validate_only && results.iter().any(|r| r.is_ok());
            (results, changed)
        })
        .await
    }

    /// Changes topics' configs (IncrementalAlterConfigs): per topic a list of
    /// (config name, operation, value) with Kafka's operations 0 SET and
    /// 1 DELETE (back to the default). A topic's changes apply all or none.
    pub async fn alter_topic_configs(
        self: &Rc<Self>,
        items: Vec<(String, Vec<ConfigChange>)>,
        validate_only: bool,
    ) -> Vec<Result<(), KafkaError>> {
        self.change_catalog(items.len(), move |s, cat| {
            let mut changed = false;
            let defaults = cat.topic_defaults(&s.config);
            let results: Vec<_> = items
                .into_iter()
                .map(|(name, ops)| {
                    let t = cat.topics.get_mut(&name).ok_or_else(|| {
                        KafkaError::new(
                            ErrorCode::UnknownTopicOrPartition,
                            format!("topic {name:?} does not exist"),
                        )
                    })?;
                    let mut changed_topic = t.clone();
                    for ConfigChange {
                        name: key,
                        op,
                        value,
                    } in ops
                    {
                        let now = changed_topic.config_value(&key).map(|(v, _)| v);
                        match topic_config_change(&key, op, value, now)? {
                            Some(v) => changed_topic.set_config(&key, &v)?,
                            None => changed_topic.reset_config(&key)?,
                        }
                    }
                    if changed_topic.name != crate::catalog::GROUPS_TOPIC {
                        changed_topic.config.follow_defaults(&defaults);
                    }
                    changed_topic.config.validate()?;
                    if !validate_only && changed_topic != *t {
                        *t = changed_topic;
                        changed = true;
                    }
                    Ok(())
                })
                .collect();
            (results, changed)
        })
        .await
    }

    /// IncrementalAlterConfigs on BROKER resources: sets (op 0) or
    /// deletes (op 1) node configs changeable at run time
    /// (`catalog::NODE_CONFIGS`), by the resource's name (a node id, or
    /// empty for the cluster-wide default), kept in the catalog.
    pub async fn alter_node_configs(
        self: &Rc<Self>,
        items: Vec<(String, Vec<ConfigChange>)>,
        validate_only: bool,
    ) -> Vec<Result<(), KafkaError>> {
        self.change_catalog(items.len(), move |s, cat| {
            let mut changed = false;
            let known: Vec<String> = cat.nodes.keys().map(|n| n.to_string()).collect();
            let results: Vec<_> = items
                .into_iter()
                .map(|(node, ops)| {
                    if !node.is_empty() && !known.contains(&node) && !cat.nodes.is_empty() {
                        return Err(KafkaError::new(
                            ErrorCode::InvalidRequest,
                            format!("broker {node:?} is not a node of this cluster"),
                        ));
                    }
                    let mut configs = cat.node_configs.get(&node).cloned().unwrap_or_default();
                    // A single node's own id is its one resource that a
                    // topic default follows (its shards' broker ids under
                    // --shard-ports are not nodes).
                    let me = s.config.node_id.to_string();
                    let follows = node.is_empty() || !cat.nodes.is_empty() || node == me;
                    for ConfigChange { name, op, value } in ops {
                        if !follows
                            && crate::catalog::topic_config::of_node_synonym(&name).is_some()
                        {
                            return Err(KafkaError::new(
                                ErrorCode::InvalidRequest,
                                format!(
                                    "broker {node:?} is not this node: set {name} on broker \
                                     {me}, or on the default resource"
                                ),
                            ));
                        }
                        match set_or_delete(&name, op, value)? {
                            Some(v) => {
                                let v = crate::catalog::check_node_config(&node, &name, &v)?;
                                configs.insert(name, v);
                            }
                            // Deleting one never set is no change (the
                            // reassignment tool deletes every throttle).
                            None => {
                                let known = crate::catalog::topic_config::of_node_synonym(&name)
                                    .is_some()
                                    || crate::catalog::NODE_CONFIGS.contains(&name.as_str());
                                if !known {
                                    crate::catalog::check_node_config(&node, &name, "0")?;
                                }
                                configs.remove(&name);
                            }
                        }
                    }
                    let now = cat.node_configs.get(&node).cloned().unwrap_or_default();
                    if !validate_only && configs != now {
                        match configs.is_empty() {
                            true => cat.node_configs.remove(&node),
                            false => cat.node_configs.insert(node, configs),
                        };
                        // Every topic follows the defaults it does not
                        // override, as Kafka's dynamic log configs (each
                        // other node follows its own as it installs this).
                        cat.follow_topic_defaults(&s.config);
                        changed = true;
                    }
                    Ok(())
                })
                .collect();
            (results, changed)
        })
        .await
    }

    /// Saves a new catalog and installs it on every shard (which opens or
    /// drops its partitions) before returning. Catalog shard only.
    async fn commit_catalog(self: &Rc<Self>, mut cat: Catalog) -> Result<(), KafkaError> {
        assert_eq!(self.id, CATALOG_SHARD);
        cat.version += 1;
        self.publish(Arc::new(cat)).await
    }

    /// Proposes a changed catalog to the cluster's metadata quorum, then
    /// installs what the quorum applied. Catalog shard only.
    async fn commit_to_cluster(
        self: &Rc<Self>,
        control: &crate::cluster::Control,
        cat: Catalog,
    ) -> Result<(), KafkaError> {
        let cmd = crate::cluster::types::Command::Change {
            base: cat.admin_version,
            catalog: Box::new(cat),
        };
        match control.propose(cmd).await? {
            crate::cluster::types::Applied::Conflict { .. } => Err(KafkaError::new(
                ErrorCode::NotController,
                "another node changed the catalog meanwhile; try again",
            )),
            _ => self.install_newer(control.latest()).await,
        }
    }

    /// Installs a catalog the cluster's quorum applied, if it is newer than
    /// the one installed (or the cluster's first). Catalog shard only.
    pub(crate) async fn install_newer(
        self: &Rc<Self>,
        cat: Arc<Catalog>,
    ) -> Result<(), KafkaError> {
        let _installing = self.install_lock.acquire_permit(1).await.expect("open");
        let old = self.catalog();
        // A quorum not yet seeded has no catalog to install.
        // After a failed install, the same catalog is installed again (never
        // an older one that a task took before waiting for the lock).
        let retry = self.install_failed.get()
            && cat.cluster_id == old.cluster_id
            && cat.version >= old.version;
        let newer = cat.version > old.version || cat.cluster_id != old.cluster_id || retry;
        if cat.cluster_id.is_empty() || !newer {
            return Ok(());
        }
        self.publish(cat).await
    }

    /// Saves `cat` and installs it on every shard; then removes the
    /// directories of topics it no longer has. Catalog shard only.
    async fn publish(self: &Rc<Self>, cat: Arc<Catalog>) -> Result<(), KafkaError> {
        assert_eq!(self.id, CATALOG_SHARD);
        // A cluster's catalog comes from whichever node changed it last:
        // its topics follow this node's own defaults here.
        let cat = Catalog::with_topic_defaults(cat, &self.config);
        let old = self.catalog();
        cat.save(&self.config.data_dir)
            .map_err(|e| KafkaError::new(ErrorCode::KafkaStorageError, e))?;
        let installs = (0..self.nr_shards).map(|i| {
            let cat = cat.clone();
            self.invoke_on(i, move |s| async move { s.install_catalog(cat).await })
        });
        let installed: Result<(), KafkaError> = join_all(installs)
            .await
            .into_iter()
            .try_for_each(|r| r.and_then(|r| r));
        self.install_failed.set(installed.is_err());
        installed?;
        // Every shard dropped its partitions of deleted topics; the topics'
        // directories go too (only those the previous catalog named).
        for t in old.topics.values() {
            if cat.topic(&t.name).map(|n| n.id) != Some(t.id) {
                // Out of its place now, its files removed on a thread of
                // their own: unlinking gigabytes here held this shard.
                let dir = t.topic_dir(&self.config.data_dir);
                if let Err(e) = weir_storage::trash::remove_later(&self.config.data_dir, &dir) {
                    log::warn!("removing {}: {e}", dir.display());
                }
            }
        }
        Ok(())
    }

    /// Whether this shard keeps partition `p` of `t`: its shard, on a
    /// node keeping a copy (its leader, or one of its replicas).
    fn owns(&self, t: &TopicMeta, p: i32) -> bool {
        match t.place(p) {
            Some((node, shard)) => {
                self.local_shard(shard) == self.id
                    && (node.is_none() || t.hosted_by(p, self.config.node_id))
            }
            None => false,
        }
    }

    /// Takes a new catalog snapshot: opens partitions this shard now owns,
    /// applies changed configs, and deletes partitions that are gone.
    async fn install_catalog(self: &Rc<Self>, cat: Arc<Catalog>) -> Result<(), KafkaError> {
        let gone: Vec<TopicPartition> = self
            .partitions
            .borrow()
            .keys()
            .filter(|tp| {
                let t = tp.topic();
                !cat.topic(t).is_some_and(|m| self.owns(m, tp.partition)) || {
                    let old = self.catalog.borrow();
                    old.topic(t).map(|m| m.id) != cat.topic(t).map(|m| m.id)
                }
            })
            .cloned()
            .collect();
        for key in gone {
            if let Some(p) = self.partitions.borrow_mut().remove(&key) {
                p.give_up();
                p.cache.clear();
                p.log.destroy(&self.config.data_dir);
            }
            self.partition_removed(&key);
        }
        *self.catalog.borrow_mut() = cat.clone();
        self.open_owned_partitions(&cat).await
    }

    pub(crate) async fn open_owned_partitions(
        self: &Rc<Self>,
        cat: &Catalog,
    ) -> Result<(), KafkaError> {
        // From the catalog naming the groups topic on, every group's state
        // is in it: at once, before this shard's partitions of it are open
        // (which awaits), so that a commit arriving meanwhile is not
        // written to this node's own, unreplicated, group log (it is told
        // COORDINATOR_LOAD_IN_PROGRESS until its slot is loaded).
        if cat.topic(crate::catalog::GROUPS_TOPIC).is_some() {
            self.groups.use_slots();
        }
        // A partition that does not open leaves the others to take their
        // roles all the same (a leadership moved away must be given up);
        // the first failure is answered, and the install tried again.
        let mut failed = None;
        for t in cat.topics.values() {
            for p in 0..t.shards.len() {
                if !self.owns(t, p as i32) {
                    continue;
                }
                let key = TopicPartition::new(t.name.as_str(), p as i32);
                if let Some(existing) = self.partitions.borrow().get(&key) {
                    existing.log.set_config(t.config.log_config());
                    continue;
                }
                let dir = t.partition_dir(&self.config.data_dir, p as i32);
                let log = match PartitionLog::open(&dir, t.config.log_config(), now_ms()).await {
                    Ok(log) => log,
                    Err(e) => {
                        log::error!("{}-{p}: opening its log: {e}", t.name);
                        failed.get_or_insert(e);
                        continue;
                    }
                };
                let part = Rc::new(Partition::new(
                    t.name.clone(),
                    p as i32,
                    log,
                    self.config.flushes_in_flight,
                    self.stats.latency.clone(),
                ));
                self.partitions.borrow_mut().insert(key, part);
            }
        }
        self.take_roles(cat);
        failed.map_or(Ok(()), |e| Err(e.into()))
    }
}

/// One IncrementalAlterConfigs operation on config `key`: SET (0) with its
/// value (`Some`), or DELETE (1, `None`); any other, or a SET without a
/// value, is refused saying so.
/// What one IncrementalAlterConfigs operation on a topic config leaves:
/// Kafka's 0 SET, 1 DELETE (`None`: back to the default), and on a list
/// config (`cleanup.policy`, the throttled-replicas lists) 2 APPEND and
/// 3 SUBTRACT its comma-separated items, given its value `now`.
fn topic_config_change(
    key: &str,
    op: i8,
    value: Option<String>,
    now: Option<String>,
) -> Result<Option<String>, KafkaError> {
    let is_list = crate::catalog::topic_config::spec(key).is_some_and(|s| s.kind.is_list());
    match (op, value) {
        (2 | 3, _) if !is_list => Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!("Config value append is not allowed for config key: {key} (APPEND and SUBTRACT apply to list configs only)"),
        )),
        (2 | 3, Some(v)) => {
            let items = |s: &str| -> Vec<String> {
                s.split(',').map(str::trim).filter(|i| !i.is_empty()).map(String::from).collect()
            };
            let mut list = items(now.as_deref().unwrap_or(""));
            for item in items(&v) {
                match op {
                    2 if !list.contains(&item) => list.push(item),
                    3 => list.retain(|i| *i != item),
                    _ => {}
                }
            }
            Ok(Some(list.join(",")))
        }
        (op, value) => set_or_delete(key, op, value),
    }
}

fn set_or_delete(key: &str, op: i8, value: Option<String>) -> Result<Option<String>, KafkaError> {
    match (op, value) {
        (0, Some(v)) => Ok(Some(v)),
        (0, None) => Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!("SET of {key} has no value"),
        )),
        (1, _) => Ok(None),
        (op, _) => Err(KafkaError::new(
            ErrorCode::InvalidConfig,
            format!("operation {op} on {key}: only SET (0) and DELETE (1) apply to configs here"),
        )),
    }
}
