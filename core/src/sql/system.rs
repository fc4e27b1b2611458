//! The node's own state as read-only tables, queried with the normal
//! SELECT (seed 002 shows a group's offsets in the store):
//!
//! - `weir.groups`: `group_id`, `kind` (classic or consumer, KIP-848),
//!   `state`, `protocol_type`, `protocol` (the classic group's chosen
//!   assignor, or the consumer group's server-side one) and `members`;
//! - `weir.group_offsets`: `group_id`, `topic`, `partition`,
//!   `committed_offset`, `log_end_offset` (the high watermark) and `lag`
//!   (their difference), one row per committed offset;
//! - `weir.partitions`: `topic`, `partition`, `leader`, `leader_epoch`,
//!   `replicas`, `isr`, `adding` and `removing` (a reassignment's; node
//!   ids separated by commas) from the catalog, and from each leader
//!   `log_start_offset`, `log_end_offset` (the high watermark) and
//!   `size_bytes` (its copy on disk);
//! - `weir.nodes`: `node_id`, `host`, `port`, `rack`, `fenced`,
//!   `stopping`, `controller`, `leaders` and `replicas` (partitions it
//!   leads and keeps), from the catalog (a single node: itself).
//!
//! Their rows are gathered from every shard's group coordinator (and, for
//! the log ends, from the partitions' owners) when the statement runs, then
//! filtered, folded and ordered on the shard that took it. A caller sees the
//! groups it may describe (and, in `group_offsets`, only topics it may
//! describe), as Kafka's ListGroups and OffsetFetch show them.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde_json::Value;
use sqlparser::ast::ObjectName;

use super::leaders::{each_on_leaders, PartitionOp};
use super::{Caller, QueryResult, SqlError};
use crate::auth::acl::{Operation, ResourceType};
use crate::shard::Shard;

/// A table of the node's own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SystemTable {
    Groups,
    GroupOffsets,
    Partitions,
    Nodes,
}

impl SystemTable {
    /// The system table `name` names (`weir.groups`, `weir.group_offsets`).
    pub fn named(name: &ObjectName) -> Option<SystemTable> {
        let parts: Vec<&str> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .map(|i| i.value.as_str())
            .collect();
        match parts[..] {
            ["weir", "groups"] => Some(SystemTable::Groups),
            ["weir", "group_offsets"] => Some(SystemTable::GroupOffsets),
            ["weir", "partitions"] => Some(SystemTable::Partitions),
            ["weir", "nodes"] => Some(SystemTable::Nodes),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SystemTable::Groups => "weir.groups",
            SystemTable::GroupOffsets => "weir.group_offsets",
            SystemTable::Partitions => "weir.partitions",
            SystemTable::Nodes => "weir.nodes",
        }
    }

    pub fn columns(self) -> Vec<String> {
        let names: &[&str] = match self {
            SystemTable::Groups => &[
                "group_id",
                "kind",
                "state",
                "protocol_type",
                "protocol",
                "members",
            ],
            SystemTable::GroupOffsets => &[
                "group_id",
                "topic",
                "partition",
                "committed_offset",
                "log_end_offset",
                "lag",
            ],
            SystemTable::Partitions => &[
                "topic",
                "partition",
                "leader",
                "leader_epoch",
                "replicas",
                "isr",
                "adding",
                "removing",
                "log_start_offset",
                "log_end_offset",
                "size_bytes",
            ],
            SystemTable::Nodes => &[
                "node_id",
                "host",
                "port",
                "rack",
                "fenced",
                "stopping",
                "controller",
                "leaders",
                "replicas",
            ],
        };
        names.iter().map(|n| n.to_string()).collect()
    }

    /// DESCRIBE's answer: every column nullable but the names.
    pub fn describe(self) -> QueryResult {
        let types: &[&str] = match self {
            SystemTable::Groups => &["VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "INT"],
            SystemTable::GroupOffsets => {
                &["VARCHAR", "VARCHAR", "INT", "BIGINT", "BIGINT", "BIGINT"]
            }
            SystemTable::Partitions => &[
                "VARCHAR", "INT", "INT", "INT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR",
                "BIGINT", "BIGINT", "BIGINT",
            ],
            SystemTable::Nodes => &[
                "INT", "VARCHAR", "INT", "VARCHAR", "BOOLEAN", "BOOLEAN", "BOOLEAN", "INT", "INT",
            ],
        };
        QueryResult {
            columns: ["column", "type", "nullable", "default", "primary_key"]
                .iter()
                .map(|c| c.to_string())
                .collect(),
            rows: self
                .columns()
                .into_iter()
                .zip(types)
                .map(|(c, ty)| {
                    let nullable = !matches!(c.as_str(), "group_id" | "topic" | "partition");
                    vec![
                        Value::from(c),
                        Value::from(*ty),
                        Value::Bool(nullable),
                        Value::Null,
                        Value::Bool(false),
                    ]
                })
                .collect(),
        }
    }

    /// Every row the caller may see, in group (then topic, partition) order.
    pub async fn rows(
        self,
        shard: &Rc<Shard>,
        caller: &Caller<'_>,
    ) -> Result<Vec<Vec<Value>>, SqlError> {
        let may_describe = |kind: ResourceType, name: &str| {
            shard.allows(
                caller.principal,
                caller.host,
                Operation::Describe,
                kind,
                name,
            )
        };
        if self == SystemTable::Partitions {
            return partition_rows(shard, |t| may_describe(ResourceType::Topic, t)).await;
        }
        if self == SystemTable::Nodes {
            return Ok(node_table(shard));
        }
        // Every node's, in a cluster: each coordinates its own groups.
        let mut rows = super::leaders::on_every_node(shard, self).await?;
        rows.retain(|r| may_describe(ResourceType::Group, text(&r[0])));
        match self {
            SystemTable::GroupOffsets => {
                rows.retain(|r| may_describe(ResourceType::Topic, text(&r[1])));
                with_log_ends(shard, rows).await
            }
            _ => {
                rows.sort_by(|a, b| text(&a[0]).cmp(text(&b[0])));
                Ok(rows)
            }
        }
    }

    /// How many values each of `node_rows`' rows has.
    pub fn node_row_len(self) -> usize {
        match self {
            SystemTable::Groups => 6,
            SystemTable::GroupOffsets => 4,
            SystemTable::Partitions | SystemTable::Nodes => 0,
        }
    }

    /// This node's rows, whoever may see them: `weir.groups`' rows, or
    /// `weir.group_offsets`' group, topic, partition and committed offset.
    pub async fn node_rows(self, shard: &Rc<Shard>) -> Result<Vec<Vec<Value>>, SqlError> {
        match self {
            SystemTable::Groups => group_rows(shard).await,
            SystemTable::GroupOffsets => committed_rows(shard).await,
            // The catalog's, with each leader's extent: gathered by the
            // node asked (`partition_rows`), never per node.
            SystemTable::Partitions | SystemTable::Nodes => Ok(Vec::new()),
        }
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// What a shard's answer failed with is the node's failure.
fn node(e: crate::error::KafkaError) -> SqlError {
    SqlError::Node(e.message)
}

/// `weir.groups` on this node: every shard's groups (the new protocol's
/// assignor and members, or the classic one's).
async fn group_rows(shard: &Rc<Shard>) -> Result<Vec<Vec<Value>>, SqlError> {
    let per_shard = (0..shard.nr_shards).map(|i| {
        shard.invoke_on(i, |s| async move {
            s.groups
                .list()
                .into_iter()
                .map(|g| {
                    let (protocol, members) = match s.groups.consumer_group(&g.group_id) {
                        Some(c) => (c.assignor().to_string(), c.members.len()),
                        None => {
                            let d = s.groups.describe(&g.group_id);
                            (d.protocol, d.members.len())
                        }
                    };
                    vec![
                        Value::from(g.group_id),
                        Value::from(g.kind),
                        Value::from(g.state),
                        Value::from(g.protocol_type),
                        Value::from(protocol),
                        Value::from(members),
                    ]
                })
                .collect::<Vec<_>>()
        })
    });
    let mut rows = Vec::new();
    for part in futures::future::join_all(per_shard).await {
        rows.extend(part.map_err(node)?);
    }
    Ok(rows)
}

/// `weir.group_offsets` on this node: every shard's committed offsets as
/// group, topic, partition and offset.
async fn committed_rows(shard: &Rc<Shard>) -> Result<Vec<Vec<Value>>, SqlError> {
    let per_shard = (0..shard.nr_shards)
        .map(|i| shard.invoke_on(i, |s| async move { s.groups.committed_offsets() }));
    let mut rows = Vec::new();
    for part in futures::future::join_all(per_shard).await {
        rows.extend(part.map_err(node)?.into_iter().map(|(g, t, p, offset)| {
            vec![
                Value::from(g),
                Value::from(t),
                Value::from(p),
                Value::from(offset),
            ]
        }));
    }
    Ok(rows)
}

/// `weir.group_offsets`' rows from committed offsets (`committed_rows`):
/// in order, each with its partition's log end (from its leader) and lag.
async fn with_log_ends(
    shard: &Rc<Shard>,
    rows: Vec<Vec<Value>>,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut committed: Vec<(String, String, i32, i64)> = rows
        .into_iter()
        .map(|r| {
            (
                text(&r[0]).to_string(),
                text(&r[1]).to_string(),
                r[2].as_i64().unwrap_or(-1) as i32,
                r[3].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    committed.sort();
    // The log end of every partition named, from its leader.
    let mut by_topic: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    for (_, t, p, _) in &committed {
        by_topic.entry(t).or_default().insert(*p);
    }
    let catalog = shard.catalog();
    let mut ends: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (topic, partitions) in by_topic {
        // A partition gone since the commit (its topic deleted, or
        // shrunk), or on a node that cannot answer, has no log end.
        let Some(meta) = catalog.topic(topic) else {
            continue;
        };
        let asked: Vec<i32> = partitions
            .into_iter()
            .filter(|p| (0..meta.partitions()).contains(p))
            .collect();
        let work = asked.iter().map(|&p| (p, PartitionOp::LogEnd)).collect();
        for (p, end) in asked.iter().zip(each_on_leaders(shard, topic, work).await) {
            if let Ok(end) = end.and_then(|e| e.log_end()) {
                ends.insert((topic.to_string(), *p), end);
            }
        }
    }
    Ok(committed
        .into_iter()
        .map(|(g, t, p, offset)| {
            let end = ends.get(&(t.clone(), p)).copied();
            vec![
                Value::from(g),
                Value::from(t),
                Value::from(p),
                Value::from(offset),
                end.map_or(Value::Null, Value::from),
                end.map_or(Value::Null, |e| Value::from((e - offset).max(0))),
            ]
        })
        .collect())
}

/// `weir.partitions`: every partition of the topics `visible` allows, in
/// topic and partition order, as the catalog places it, with its log's
/// extent from its leader (null where the leader cannot answer now).
async fn partition_rows(
    shard: &Rc<Shard>,
    visible: impl Fn(&str) -> bool,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let catalog = shard.catalog();
    let ids = |v: &[i32]| Value::from(v.iter().map(i32::to_string).collect::<Vec<_>>().join(","));
    let mut rows = Vec::new();
    for t in catalog.topics.values().filter(|t| visible(&t.name)) {
        let work = (0..t.partitions())
            .map(|p| (p, PartitionOp::Extent))
            .collect();
        let extents = each_on_leaders(shard, &t.name, work).await;
        for (p, extent) in (0..t.partitions()).zip(extents) {
            let extent = extent.and_then(|e| e.extent()).ok();
            let (leader, replicas) = match (t.place(p), t.replicas_of(p)) {
                (Some((Some(l), _)), Some(r)) => (Value::from(l), r.clone()),
                (Some((Some(l), _)), None) => (
                    Value::from(l),
                    crate::catalog::Replicas {
                        replicas: vec![l],
                        isr: vec![l],
                        ..Default::default()
                    },
                ),
                _ => {
                    let me = shard.config.node_id;
                    (
                        Value::from(me),
                        crate::catalog::Replicas {
                            replicas: vec![me],
                            isr: vec![me],
                            ..Default::default()
                        },
                    )
                }
            };
            let leader = match leader.as_i64() {
                Some(-1) => Value::Null,
                _ => leader,
            };
            rows.push(vec![
                Value::from(t.name.clone()),
                Value::from(p),
                leader,
                Value::from(replicas.leader_epoch),
                ids(&replicas.replicas),
                ids(&replicas.isr),
                ids(&replicas.adding),
                ids(&replicas.removing),
                extent.map_or(Value::Null, |e| Value::from(e.0)),
                extent.map_or(Value::Null, |e| Value::from(e.1)),
                extent.map_or(Value::Null, |e| Value::from(e.2)),
            ]);
        }
    }
    Ok(rows)
}

/// `weir.nodes`: the cluster's registered nodes in id order, each with
/// the partitions it leads and keeps (a single node: itself, every
/// partition).
fn node_table(shard: &Rc<Shard>) -> Vec<Vec<Value>> {
    let cat = shard.catalog();
    let controller = shard.cluster.as_ref().and_then(|c| c.controller());
    let count = |node: i32, leads: bool| -> usize {
        cat.topics
            .values()
            .map(|t| {
                (0..t.partitions())
                    .filter(|&p| match leads {
                        true => t.place(p).is_some_and(|(l, _)| l.is_none_or(|l| l == node)),
                        false => t.hosted_by(p, node),
                    })
                    .count()
            })
            .sum()
    };
    let me = shard.config.cluster_node();
    let nodes: Vec<crate::catalog::ClusterNode> = match cat.nodes.is_empty() {
        true => vec![me],
        false => cat.nodes.values().cloned().collect(),
    };
    nodes
        .into_iter()
        .map(|n| {
            vec![
                Value::from(n.id),
                Value::from(n.kafka_host.clone()),
                Value::from(n.kafka_port),
                n.rack.clone().map_or(Value::Null, Value::from),
                Value::Bool(n.fenced),
                Value::Bool(n.stopping),
                Value::Bool(controller.map_or(shard.cluster.is_none(), |c| c == n.id)),
                Value::from(count(n.id, true)),
                Value::from(count(n.id, false)),
            ]
        })
        .collect()
}
