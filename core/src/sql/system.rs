//! The node's own state as read-only tables, queried with the normal
//! SELECT (seed 002 shows a group's offsets in the store):
//!
//! - `weir.groups`: `group_id`, `kind` (classic or consumer, KIP-848),
//!   `state`, `protocol_type`, `protocol` (the classic group's chosen
//!   assignor, or the consumer group's server-side one) and `members`;
//! - `weir.group_offsets`: `group_id`, `topic`, `partition`,
//!   `committed_offset`, `log_end_offset` (the high watermark) and `lag`
//!   (their difference), one row per committed offset.
//!
//! Their rows are gathered from every shard's group coordinator (and, for
//! the log ends, from the partitions' owners) when the statement runs, then
//! filtered, folded and ordered on the shard that took it. A caller sees the
//! groups it may describe (and, in `group_offsets`, only topics it may
//! describe), as Kafka's ListGroups and OffsetFetch show them.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;
use sqlparser::ast::ObjectName;

use super::{Caller, QueryResult, SqlError};
use crate::auth::acl::{Operation, ResourceType};
use crate::by_partition::PartitionWork;
use crate::shard::Shard;
use crate::topic_partition::{TopicPartition, TopicPartitionRef};

/// A table of the node's own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemTable {
    Groups,
    GroupOffsets,
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
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SystemTable::Groups => "weir.groups",
            SystemTable::GroupOffsets => "weir.group_offsets",
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
        match self {
            SystemTable::Groups => group_rows(shard, &may_describe).await,
            SystemTable::GroupOffsets => group_offset_rows(shard, &may_describe).await,
        }
    }
}

/// What a shard's answer failed with is the node's failure.
fn node(e: crate::error::KafkaError) -> SqlError {
    SqlError::Node(e.message)
}

/// `weir.groups`: every shard's groups (the new protocol's assignor and
/// members, or the classic one's), those the caller may describe.
async fn group_rows(
    shard: &Rc<Shard>,
    may_describe: &dyn Fn(ResourceType, &str) -> bool,
) -> Result<Vec<Vec<Value>>, SqlError> {
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
    rows.retain(|r| may_describe(ResourceType::Group, r[0].as_str().unwrap_or("")));
    rows.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
    Ok(rows)
}

/// `weir.group_offsets`: every shard's committed offsets the caller may
/// describe (group and topic), each with its partition's log end and lag.
async fn group_offset_rows(
    shard: &Rc<Shard>,
    may_describe: &dyn Fn(ResourceType, &str) -> bool,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let per_shard = (0..shard.nr_shards)
        .map(|i| shard.invoke_on(i, |s| async move { s.groups.committed_offsets() }));
    let mut committed = Vec::new();
    for part in futures::future::join_all(per_shard).await {
        committed.extend(part.map_err(node)?);
    }
    committed.retain(|(g, t, _, _)| {
        may_describe(ResourceType::Group, g) && may_describe(ResourceType::Topic, t)
    });
    committed.sort();
    // The log end of every partition named, from its owner.
    let tps: Vec<TopicPartition> = committed
        .iter()
        .map(|(_, t, p, _)| TopicPartition::new(t.as_str(), *p))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let work = PartitionWork::on_each(&tps);
    let ends: BTreeMap<TopicPartition, i64> = shard
        .on_partitions(work, |_, p, ()| async move { Ok(p.log.high_watermark()) })
        .await
        .into_iter()
        // A partition gone since the commit (its topic deleted,
        // or shrunk) has no log end.
        .filter_map(|(at, end)| end.ok().map(|e| (tps[at].clone(), e)))
        .collect();
    Ok(committed
        .into_iter()
        .map(|(g, t, p, offset)| {
            let end = ends
                .get(&(t.as_str(), p) as &dyn TopicPartitionRef)
                .copied();
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
