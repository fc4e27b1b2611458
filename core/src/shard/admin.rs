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
    async fn change_catalog<T, F>(
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
        if t.replication_factor != -1 && t.replication_factor != 1 {
            let why = match t.replication_factor {
                f if f < 1 => format!("replication factor {f}: a topic has at least 1 replica"),
                f if f as usize > live => format!(
                    "replication factor {f} is larger than the {live} live node(s)"
                ),
                f => format!(
                    "replication factor {f}: partitions are kept by one node each (their leader); replicas beyond it are not kept yet"
                ),
            };
            return Err(KafkaError::new(ErrorCode::InvalidReplicationFactor, why));
        }
        let mut config = TopicConfig::default();
        for (name, value) in &t.configs {
            if let Some(v) = value {
                config.set(name, v)?;
            }
        }
        let mut meta = TopicMeta {
            shards: Vec::new(),
            nodes: Vec::new(),
            name: t.name,
            id: new_topic_id(),
            config,
            schema: t.schema,
        };
        self.place_partitions(cat, &mut meta, partitions)?;
        Ok(meta)
    }

    /// Places partitions of `t` up to `count`: on a single node, round
    /// robin over its shards from a hash of the name; in a cluster, each on
    /// the live node leading the fewest partitions so far (ties broken
    /// from the hash), on one of that node's shards.
    fn place_partitions(
        &self,
        cat: &Catalog,
        t: &mut TopicMeta,
        count: i32,
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
        let mut led: std::collections::BTreeMap<i32, usize> =
            live.iter().map(|n| (n.id, 0)).collect();
        for other in cat.topics.values().chain(std::iter::once(&*t)) {
            for n in &other.nodes {
                if let Some(c) = led.get_mut(n) {
                    *c += 1;
                }
            }
        }
        let offset = crate::catalog::stable_hash(&t.name) as usize;
        for p in first..count {
            let node = (0..live.len())
                .map(|i| live[(offset + p as usize + i) % live.len()])
                .min_by_key(|n| led[&n.id])
                .expect("some live node");
            *led.get_mut(&node.id).expect("counted") += 1;
            t.nodes.push(node.id);
            t.shards.push(placement(&t.name, p, node.shards));
        }
        Ok(())
    }

    /// Deals the cluster's group slots over its live nodes, in turn by
    /// id, unless they are dealt.
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
                    s.place_partitions(cat, &mut grown, count)?;
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
        self.change_catalog(items.len(), move |_, cat| {
            let mut changed = false;
            let results: Vec<_> = items
                .into_iter()
                .map(|(name, ops)| {
                    let t = cat.topics.get_mut(&name).ok_or_else(|| {
                        KafkaError::new(ErrorCode::UnknownTopicOrPartition, format!("topic {name:?} does not exist"))
                    })?;
                    let mut config = t.config;
                    for ConfigChange { name: key, op, value } in ops {
                        match (op, value) {
                            (0, Some(v)) => config.set(&key, &v)?,
                            (0, None) => {
                                return Err(KafkaError::new(ErrorCode::InvalidConfig, format!("SET of {key} has no value")))
                            }
                            (1, _) => config.reset(&key)?,
                            (op, _) => {
                                return Err(KafkaError::new(
                                    ErrorCode::InvalidConfig,
                                    format!("operation {op} on {key}: only SET (0) and DELETE (1) apply to these configs"),
                                ))
                            }
                        }
                    }
                    if !validate_only && config != t.config {
                        t.config = config;
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
            catalog: cat,
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
        let newer = cat.version > old.version || cat.cluster_id != old.cluster_id;
        if cat.cluster_id.is_empty() || !newer {
            return Ok(());
        }
        self.publish(cat).await
    }

    /// Saves `cat` and installs it on every shard; then removes the
    /// directories of topics it no longer has. Catalog shard only.
    async fn publish(self: &Rc<Self>, cat: Arc<Catalog>) -> Result<(), KafkaError> {
        assert_eq!(self.id, CATALOG_SHARD);
        let old = self.catalog();
        cat.save(&self.config.data_dir)
            .map_err(|e| KafkaError::new(ErrorCode::KafkaStorageError, e))?;
        let installs = (0..self.nr_shards).map(|i| {
            let cat = cat.clone();
            self.invoke_on(i, move |s| async move { s.install_catalog(cat).await })
        });
        for r in join_all(installs).await {
            r??;
        }
        // Every shard dropped its partitions of deleted topics; the topics'
        // directories go too (only those the previous catalog named).
        for t in old.topics.values() {
            if cat.topic(&t.name).map(|n| n.id) != Some(t.id) {
                let dir = t.topic_dir(&self.config.data_dir);
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => log::warn!("removing {}: {e}", dir.display()),
                }
            }
        }
        Ok(())
    }

    /// Whether this shard owns partition `p` of `t`: its shard, on this
    /// node.
    fn owns(&self, t: &TopicMeta, p: i32) -> bool {
        match t.place(p) {
            Some((node, shard)) => {
                self.local_shard(shard) == self.id && node.is_none_or(|n| n == self.config.node_id)
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
                p.cache.clear();
                p.log.destroy();
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
                let log = PartitionLog::open(&dir, t.config.log_config(), now_ms()).await?;
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
        Ok(())
    }
}
