//! The default a topic that does not set a config has on a node, from the
//! first that gives one, as Kafka ranks a topic config's sources:
//!
//! 1. set at run time on this node's BROKER resource (Kafka's
//!    DYNAMIC_BROKER_CONFIG: `kafka-configs --entity-type brokers
//!    --entity-name 1 --add-config log.retention.ms=…`);
//! 2. set at run time on the cluster-wide default resource
//!    (DYNAMIC_DEFAULT_BROKER_CONFIG, `--entity-default`);
//! 3. this node's flags, environment or file (`--default-retention-ms`,
//!    `NodeConfig::topic_defaults`; Kafka's `server.properties`,
//!    STATIC_BROKER_CONFIG);
//! 4. weir's own default where it differs from Kafka's (reported as the
//!    node's static one);
//! 5. Kafka's default.
//!
//! A topic keeps the values it follows in the catalog, which is one for
//! the whole cluster, while the first and third sources are the node's own.
//! So each node makes the catalog it installs follow its own defaults
//! (`Catalog::with_topic_defaults`), as each Kafka broker builds its
//! topics' log configs from its own `server.properties` and dynamic
//! configs. Give every node the same static defaults, as Kafka asks.
//!
//! `unclean.leader.election.enable` is the exception (`CLUSTER_ONLY`):
//! the quorum's elections read it, and they must not depend on which
//! node changed the catalog last, so only the topic and the cluster-wide
//! default set it (in KRaft too only the controller's setting counts).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::topic_config::{self, TopicConfig, NODE_SYNONYMS};
use super::{Catalog, GROUPS_TOPIC};
use crate::config::NodeConfig;

/// Topic configs whose default no one node sets: no flag, and refused on
/// a node's BROKER resource (see above).
pub const CLUSTER_ONLY: [&str; 1] = ["unclean.leader.election.enable"];

/// Where a topic's default of a config comes from (the list above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultFrom {
    /// Set at run time on the node.
    Node,
    /// Set at run time on the cluster-wide default.
    Cluster,
    /// The node's flags, or weir's own default.
    Static,
    /// Kafka's default.
    Kafka,
}

impl Catalog {
    /// The default of topic config `name` on the node `node`, and where it
    /// comes from; `None` for a name that is no topic config.
    pub fn topic_default(&self, node: &NodeConfig, name: &str) -> Option<(String, DefaultFrom)> {
        self.topic_default_on(&node.node_id.to_string(), &node.topic_defaults, name)
    }

    /// `topic_default` on the node whose BROKER resource is `resource`
    /// (its id) and whose static defaults are `statics`.
    pub fn topic_default_on(
        &self,
        resource: &str,
        statics: &BTreeMap<String, String>,
        name: &str,
    ) -> Option<(String, DefaultFrom)> {
        let spec = topic_config::spec(name)?;
        if let Some(node_name) = topic_config::node_synonym(name) {
            let node_sets = !CLUSTER_ONLY.contains(&name);
            let set_on = |resource: &str| {
                self.node_configs
                    .get(resource)
                    .and_then(|c| c.get(node_name))
                    .cloned()
            };
            if let Some(v) = set_on(resource).filter(|_| node_sets) {
                return Some((v, DefaultFrom::Node));
            }
            if let Some(v) = set_on("") {
                return Some((v, DefaultFrom::Cluster));
            }
            if let Some(v) = statics.get(name).filter(|_| node_sets) {
                return Some((v.clone(), DefaultFrom::Static));
            }
        }
        Some(match spec.node_default {
            Some(v) => (v.to_string(), DefaultFrom::Static),
            None => (spec.kafka_default.to_string(), DefaultFrom::Kafka),
        })
    }

    /// Every topic config's default on the node `node` that a node config
    /// can set, by topic config name: what `TopicConfig::follow_defaults`
    /// takes.
    pub fn topic_defaults(&self, node: &NodeConfig) -> BTreeMap<String, String> {
        NODE_SYNONYMS
            .iter()
            .filter_map(|(name, _)| Some((name.to_string(), self.topic_default(node, name)?.0)))
            .collect()
    }

    /// Makes every topic (but the group log, which keeps weir's own
    /// configs as Kafka pins `__consumer_offsets`') follow the defaults of
    /// node `node` in the configs it does not set itself.
    pub fn follow_topic_defaults(&mut self, node: &NodeConfig) {
        let defaults = self.topic_defaults(node);
        for t in self.topics.values_mut() {
            if t.name != GROUPS_TOPIC {
                t.config.follow_defaults(&defaults);
            }
        }
        self.followed_defaults = Some(defaults);
    }

    /// `catalog` with every topic following node `node`'s defaults: the
    /// same snapshot where it follows them already, so a node installing
    /// the catalog its quorum applied copies and walks it only where its
    /// own defaults differ from those of the node that changed it last.
    pub fn with_topic_defaults(catalog: Arc<Catalog>, node: &NodeConfig) -> Arc<Catalog> {
        if catalog.followed_defaults.as_ref() == Some(&catalog.topic_defaults(node)) {
            return catalog;
        }
        let mut own = (*catalog).clone();
        own.follow_topic_defaults(node);
        Arc::new(own)
    }
}

/// Checks the node's own topic defaults (its flags) together, as a topic
/// following them would be checked (`min.compaction.lag.ms` not above
/// `max.compaction.lag.ms`, …): a node whose defaults no topic could
/// follow does not start.
pub fn check_static_defaults(statics: &BTreeMap<String, String>) -> Result<(), String> {
    let mut config = TopicConfig::default();
    config.follow_defaults(statics);
    config
        .validate()
        .map_err(|e| format!("the topic defaults given to the node: {}", e.message))
}
