//! Where a statement's work on a table's partitions runs: on the shard
//! that owns each partition, on this node or, in a cluster, on the node
//! leading it. What a statement asks of one partition is a `PartitionOp`
//! (plain data: sqlparser's trees and JSON values), so the same op runs
//! here through `Shard::on_partitions` or on another node, carried there
//! as one forwarded request per node (`cluster::Service::Sql`) and run by
//! its shards the same way. Answers come back in the order asked.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlparser::ast::Expr;

use super::error::SqlError;
use super::fold::{Groups, Plan};
use super::scan::{
    fold_partition, partition_claims, partition_copies, scan_partition, settle_partition, ScanShape,
};
use super::system::SystemTable;
use crate::by_partition::PartitionWork;
use crate::catalog::TopicMeta;
use crate::cluster::Service;
use crate::partition::Partition;
use crate::shard::Shard;
use crate::table::keyed::Claim;
use crate::table::read::ScanError;
use crate::topic_partition::TopicPartition;

/// What a statement asks of one partition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PartitionOp {
    /// Its rows that pass `filter` (`scan::scan_partition`).
    Scan {
        filter: Option<Expr>,
        shape: ScanShape,
    },
    /// Its rows that pass `filter`, folded into groups.
    Fold {
        filter: Option<Expr>,
        shape: ScanShape,
        plan: Plan,
    },
    /// A keyed table's copies of keys whose home is another partition.
    Claims { max_bytes: usize },
    /// At the keys' home: which of the `incoming` copies lost.
    Settle { incoming: Vec<Claim> },
    /// Which of `keys` the keyed table partition holds.
    Copies { keys: Vec<Vec<u8>> },
    /// Appends a batch of records a statement wrote, acks=all.
    Append { batch: Vec<u8> },
    /// Its log end (the high watermark).
    LogEnd,
    /// Its log start, log end (the high watermark) and size on disk.
    Extent,
}

/// One partition's answer to a `PartitionOp`, of the op's kind.
#[derive(Debug, Serialize, Deserialize)]
pub enum PartitionAnswer {
    Rows(Vec<Vec<Value>>),
    Groups(Groups),
    Claims(Vec<Claim>),
    Losers(Vec<(i32, Vec<u8>)>),
    Copies(Vec<(usize, i64, bool)>),
    /// The base offset the batch was appended at.
    Appended(i64),
    LogEnd(i64),
    Extent((i64, i64, u64)),
}

/// `PartitionAnswer::$variant`'s content, or a node error for an answer
/// of another kind (a node answering out of turn).
macro_rules! answer_as {
    ($name:ident, $variant:ident, $ty:ty) => {
        pub fn $name(self) -> Result<$ty, SqlError> {
            match self {
                PartitionAnswer::$variant(v) => Ok(v),
                other => Err(SqlError::Node(format!(
                    "a partition answered {} where {} was asked",
                    other.kind(),
                    stringify!($variant)
                ))),
            }
        }
    };
}

impl PartitionAnswer {
    answer_as!(rows, Rows, Vec<Vec<Value>>);
    answer_as!(groups, Groups, Groups);
    answer_as!(claims, Claims, Vec<Claim>);
    answer_as!(losers, Losers, Vec<(i32, Vec<u8>)>);
    answer_as!(copies, Copies, Vec<(usize, i64, bool)>);
    answer_as!(appended, Appended, i64);
    answer_as!(log_end, LogEnd, i64);
    answer_as!(extent, Extent, (i64, i64, u64));

    fn kind(&self) -> &'static str {
        match self {
            PartitionAnswer::Rows(_) => "Rows",
            PartitionAnswer::Groups(_) => "Groups",
            PartitionAnswer::Claims(_) => "Claims",
            PartitionAnswer::Losers(_) => "Losers",
            PartitionAnswer::Copies(_) => "Copies",
            PartitionAnswer::Appended(_) => "Appended",
            PartitionAnswer::LogEnd(_) => "LogEnd",
            PartitionAnswer::Extent(_) => "Extent",
        }
    }
}

/// Runs `op` on every partition of `meta`'s table (`on_leaders`); the
/// answers in partition order.
pub async fn each_partition(
    shard: &Rc<Shard>,
    meta: &TopicMeta,
    op: PartitionOp,
) -> Result<Vec<PartitionAnswer>, SqlError> {
    let work = (0..meta.partitions()).map(|p| (p, op.clone())).collect();
    on_leaders(shard, &meta.name, work).await
}

/// Why one partition's op failed: the statement's fault (shown as a 400)
/// or the node's (a 500).
#[derive(Debug, Serialize, Deserialize)]
enum Failure {
    Statement(String),
    Node(String),
}

impl From<Failure> for SqlError {
    fn from(f: Failure) -> SqlError {
        match f {
            Failure::Statement(why) => SqlError::Statement(why),
            Failure::Node(why) => SqlError::Node(why),
        }
    }
}

impl From<ScanError> for Failure {
    fn from(e: ScanError) -> Failure {
        match e {
            ScanError::Statement(why) => Failure::Statement(why),
            ScanError::Read(why) => Failure::Node(why),
        }
    }
}

impl From<SqlError> for Failure {
    fn from(e: SqlError) -> Failure {
        match e {
            SqlError::Node(why) => Failure::Node(why),
            SqlError::Statement(why) | SqlError::Denied(why) => Failure::Statement(why),
        }
    }
}

/// What one node is asked to do for a statement another node took.
#[derive(Serialize, Deserialize)]
enum Request {
    /// Ops on the partitions of one topic it leads.
    Partitions {
        topic: String,
        work: Vec<(i32, PartitionOp)>,
    },
    /// Its own rows of a system table (`SystemTable::node_rows`).
    System(SystemTable),
}

type Answers = Vec<(usize, Result<PartitionAnswer, Failure>)>;

/// Ops on a topic's partitions.
type Work = Vec<(i32, PartitionOp)>;

impl PartitionOp {
    /// Runs the op on partition `p`, on the shard that owns it.
    async fn run(self, s: &Rc<Shard>, p: &Rc<Partition>) -> Result<PartitionAnswer, Failure> {
        let catalog = s.catalog();
        let meta: &TopicMeta = catalog
            .topic(&p.topic)
            .ok_or_else(|| Failure::Node(format!("{}-{}: the table is gone", p.topic, p.index)))?;
        Ok(match self {
            PartitionOp::Scan { filter, shape } => {
                PartitionAnswer::Rows(scan_partition(s, p, meta, filter.as_ref(), &shape).await?)
            }
            PartitionOp::Fold {
                filter,
                shape,
                plan,
            } => PartitionAnswer::Groups(
                fold_partition(s, p, meta, filter.as_ref(), &shape, &plan).await?,
            ),
            PartitionOp::Claims { max_bytes } => {
                PartitionAnswer::Claims(partition_claims(s, p, meta, max_bytes).await?)
            }
            PartitionOp::Settle { incoming } => {
                PartitionAnswer::Losers(settle_partition(s, p, meta, &incoming).await?)
            }
            PartitionOp::Copies { keys } => {
                PartitionAnswer::Copies(partition_copies(s, p, meta, &keys).await?)
            }
            PartitionOp::Append { batch } => {
                let batch = Bytes::from(batch);
                let appended = crate::table::ingest::produce_here(
                    s,
                    p,
                    &batch,
                    -1,
                    crate::partition::REPLICATION_TIMEOUT,
                    None,
                )
                .await
                .map_err(|e| Failure::Statement(e.message))?;
                PartitionAnswer::Appended(appended.base_offset)
            }
            PartitionOp::LogEnd => PartitionAnswer::LogEnd(p.log.high_watermark()),
            PartitionOp::Extent => PartitionAnswer::Extent((
                p.log.log_start(),
                p.log.high_watermark(),
                p.log.size_bytes(),
            )),
        })
    }
}

/// Runs each `(partition, op)` of `topic` on its owner, here or on the
/// node leading it; the answers in the order of `work`. The first failure
/// is the statement's.
pub async fn on_leaders(
    shard: &Rc<Shard>,
    topic: &str,
    work: Vec<(i32, PartitionOp)>,
) -> Result<Vec<PartitionAnswer>, SqlError> {
    each_on_leaders(shard, topic, work)
        .await
        .into_iter()
        .collect()
}

/// `on_leaders`, with each item's own answer or failure (a node that
/// cannot be reached fails each item it leads).
pub async fn each_on_leaders(
    shard: &Rc<Shard>,
    topic: &str,
    work: Vec<(i32, PartitionOp)>,
) -> Vec<Result<PartitionAnswer, SqlError>> {
    let catalog = shard.catalog();
    let me = shard.config.node_id;
    let n = work.len();
    let mut here = Vec::new();
    // Per other node: the places of its items in `work`, and the items.
    let mut elsewhere: BTreeMap<i32, (Vec<usize>, Work)> = BTreeMap::new();
    for (at, (partition, op)) in work.into_iter().enumerate() {
        match catalog.place(topic, partition) {
            Some((Some(node), _)) if node != me && shard.cluster.is_some() => {
                let (places, ops) = elsewhere.entry(node).or_default();
                places.push(at);
                ops.push((partition, op));
            }
            _ => here.push((at, partition, op)),
        }
    }
    let local = run_here(shard, topic, here);
    let remote = join_all(elsewhere.into_iter().map(|(node, (places, ops))| {
        let request = Request::Partitions {
            topic: topic.to_string(),
            work: ops,
        };
        async move {
            let answered: Result<Answers, SqlError> = ask(shard, node, &request, topic).await;
            match answered {
                // Each answer names its item in the request sent there.
                Ok(answers) => answers
                    .into_iter()
                    .map(|(i, r)| {
                        (
                            places.get(i).copied().unwrap_or(usize::MAX),
                            r.map_err(SqlError::from),
                        )
                    })
                    .collect(),
                Err(e) => places
                    .into_iter()
                    .map(|at| (at, Err(e.clone())))
                    .collect::<Vec<_>>(),
            }
        }
    }));
    let (local, remote) = futures::join!(local, remote);
    let mut slots: Vec<Option<Result<PartitionAnswer, SqlError>>> = (0..n).map(|_| None).collect();
    let local = local
        .into_iter()
        .map(|(at, r)| (at, r.map_err(SqlError::from)));
    for (at, r) in local.chain(remote.into_iter().flatten()) {
        if let Some(slot) = slots.get_mut(at) {
            *slot = Some(r);
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(at, a)| {
            a.unwrap_or_else(|| {
                Err(SqlError::Node(format!(
                    "item {at} on {topic}'s partitions got no answer"
                )))
            })
        })
        .collect()
}

/// Runs `(place, partition, op)`s of `topic` on this node's owning shards.
async fn run_here(shard: &Rc<Shard>, topic: &str, work: Vec<(usize, i32, PartitionOp)>) -> Answers {
    if work.is_empty() {
        return Vec::new();
    }
    let work = work
        .into_iter()
        .map(|(at, partition, op)| PartitionWork {
            at,
            tp: TopicPartition::new(topic, partition),
            arg: op,
        })
        .collect();
    shard
        .on_partitions(work, |s, p, op: PartitionOp| async move {
            Ok(op.run(&s, &p).await)
        })
        .await
        .into_iter()
        .map(|(at, r)| (at, r.unwrap_or_else(|e| Err(Failure::Node(e.message)))))
        .collect()
}

/// `table`'s rows from every live node (this one's and, in a cluster,
/// each other's), unfiltered: the caller keeps those its principal may see.
pub async fn on_every_node(
    shard: &Rc<Shard>,
    table: SystemTable,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let me = shard.config.node_id;
    let others: Vec<i32> = match &shard.cluster {
        Some(_) => shard
            .catalog()
            .live_nodes()
            .map(|n| n.id)
            .filter(|&id| id != me)
            .collect(),
        None => Vec::new(),
    };
    let request = Request::System(table);
    let theirs = join_all(others.iter().map(|&node| {
        let request = &request;
        async move {
            let rows: Result<Vec<Vec<Value>>, Failure> =
                ask(shard, node, request, table.name()).await?;
            rows.map_err(SqlError::from)
        }
    }));
    let (mine, theirs) = futures::join!(table.node_rows(shard), theirs);
    let mut rows = mine?;
    for r in theirs {
        let r = r?;
        if let Some(bad) = r.iter().find(|row| row.len() != table.node_row_len()) {
            return Err(SqlError::Node(format!(
                "another node answered {} with a row of {} values, not {}",
                table.name(),
                bad.len(),
                table.node_row_len()
            )));
        }
        rows.extend(r);
    }
    Ok(rows)
}

/// Asks node `node` to answer `request` (about `what`, for errors).
async fn ask<T: serde::de::DeserializeOwned>(
    shard: &Rc<Shard>,
    node: i32,
    request: &Request,
    what: &str,
) -> Result<T, SqlError> {
    let control = shard
        .cluster
        .as_ref()
        .expect("only a cluster has other nodes");
    control
        .ask(node, Service::Sql, shard.catalog().version, request)
        .await
        .map_err(|e| SqlError::Node(format!("{what}: {}", e.message)))
}

/// Answers a request another node forwarded here (`ask`), with this
/// node's shards.
pub async fn handle_forwarded(shard: &Rc<Shard>, body: &[u8]) -> Result<Vec<u8>, String> {
    let request: Request =
        serde_json::from_slice(body).map_err(|e| format!("not an SQL request: {e}"))?;
    let answer = match request {
        Request::Partitions { topic, work } => {
            let work = work
                .into_iter()
                .enumerate()
                .map(|(at, (partition, op))| (at, partition, op))
                .collect();
            serde_json::to_vec(&run_here(shard, &topic, work).await)
        }
        Request::System(table) => {
            let rows = table.node_rows(shard).await.map_err(Failure::from);
            serde_json::to_vec(&rows)
        }
    };
    answer.map_err(|e| format!("the answer does not serialise: {e}"))
}
