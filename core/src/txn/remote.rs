//! A transaction's work on other nodes of a cluster: its coordinator
//! writes markers to the partitions other nodes lead and settles the
//! offsets of groups other nodes coordinate, as Kafka's coordinator sends
//! WriteTxnMarkers to partition leaders. Carried as forwarded requests on
//! the peer port (`cluster::Service::Txn`); the receiving node runs them
//! on its own shards exactly as its coordinator would for itself.

use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::by_partition::PartitionWork;
use crate::cluster::Service;
use crate::error::{ErrorCode, KafkaError};
use crate::shard::Shard;
use crate::topic_partition::TopicPartition;
use weir_storage::batch::Marker;

/// The end of one producer's transaction, as its coordinator writes it
/// (Kafka's WriteTxnMarkers entry).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct MarkerOf {
    pub commit: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The coordinator's epoch (its groups-topic slot's leader epoch): a
    /// partition refuses a marker older than one it has for the producer.
    pub coordinator_epoch: i32,
}

/// What a coordinator asks of another node.
#[derive(Debug, Serialize, Deserialize)]
enum Request {
    /// Append the end marker to each of these partitions (their leader is
    /// the asked node).
    Markers {
        marker: MarkerOf,
        partitions: Vec<(String, i32)>,
    },
    /// Settle the producer's pending offsets of `group` (coordinated by
    /// the asked node).
    Settle {
        group: String,
        producer_id: i64,
        commit: bool,
    },
}

/// What went wrong, as the asked node saw it.
#[derive(Debug, Serialize, Deserialize)]
struct Failure {
    code: ErrorCode,
    why: String,
}

impl From<KafkaError> for Failure {
    fn from(e: KafkaError) -> Failure {
        Failure {
            code: e.code,
            why: e.message,
        }
    }
}

impl Shard {
    /// Appends the marker to each of `partitions` on this node's shards;
    /// those another node leads come back with that node's id.
    pub(super) async fn append_markers_here(
        self: &Rc<Self>,
        marker: MarkerOf,
        partitions: Vec<TopicPartition>,
    ) -> Result<Vec<(i32, TopicPartition)>, KafkaError> {
        let MarkerOf {
            commit,
            producer_id,
            producer_epoch,
            coordinator_epoch,
        } = marker;
        let marker = if commit {
            Marker::Commit
        } else {
            Marker::Abort
        };
        // Those another node leads (as the catalog places them: a
        // refusal names a broker, which with `--shard-ports` is a shard)
        // go back with that node's id.
        let catalog = self.catalog();
        let (mut here, mut elsewhere) = (Vec::new(), Vec::new());
        for tp in partitions {
            match catalog.place(tp.topic(), tp.partition) {
                Some((Some(node), _)) if node != self.config.node_id => elsewhere.push((node, tp)),
                _ => here.push(tp),
            }
        }
        let written = self
            .on_partitions(PartitionWork::on_each(&here), move |s, p, ()| async move {
                p.append_marker(
                    marker,
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    &s.cache,
                )
                .await
                .map(|_| ())
            })
            .await;
        for (_, r) in written {
            match r {
                Ok(()) => {}
                // A partition deleted meanwhile has nothing left to end.
                Err(e) if e.code == ErrorCode::UnknownTopicOrPartition => {}
                Err(e) => return Err(e),
            }
        }
        Ok(elsewhere)
    }

    /// Appends the marker to `partitions`, which node `node` leads.
    pub(super) async fn append_markers_on(
        self: &Rc<Self>,
        node: i32,
        marker: MarkerOf,
        partitions: Vec<TopicPartition>,
    ) -> Result<(), KafkaError> {
        let partitions = partitions
            .into_iter()
            .map(|tp| (tp.topic().to_string(), tp.partition))
            .collect();
        self.ask_node(node, &Request::Markers { marker, partitions })
            .await
    }

    /// Settles the producer's offsets of `group`, on the node coordinating
    /// it when that is another one.
    pub(super) async fn settle_offsets(
        self: &Rc<Self>,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), KafkaError> {
        if self.cluster.is_some() {
            let node = self.coordinating_node(group)?.id;
            if node != self.config.node_id {
                let request = Request::Settle {
                    group: group.to_string(),
                    producer_id,
                    commit,
                };
                return self.ask_node(node, &request).await;
            }
        }
        let g = group.to_string();
        self.on_group(group, move |s| async move {
            s.groups.txn_settle_offsets(&g, producer_id, commit).await
        })
        .await?
    }

    async fn ask_node(self: &Rc<Self>, node: i32, request: &Request) -> Result<(), KafkaError> {
        let Some(control) = self.cluster.as_ref() else {
            return Err(KafkaError::new(
                ErrorCode::LeaderNotAvailable,
                format!("node {node} has what this transaction needs; this node is in no cluster"),
            ));
        };
        let answer: Result<(), Failure> = control
            .ask(node, Service::Txn, self.catalog().version, request)
            .await?;
        answer.map_err(|f| KafkaError::new(f.code, format!("node {node}: {}", f.why)))
    }
}

/// Answers a transaction's request another node's coordinator forwarded.
pub async fn handle_forwarded(shard: &Rc<Shard>, body: &[u8]) -> Result<Vec<u8>, String> {
    let request: Request =
        serde_json::from_slice(body).map_err(|e| format!("not a transaction's request: {e}"))?;
    let answer: Result<(), Failure> = match request {
        Request::Markers { marker, partitions } => {
            let partitions: Vec<TopicPartition> = partitions
                .into_iter()
                .map(|(t, p)| TopicPartition::new(t, p))
                .collect();
            match shard.append_markers_here(marker, partitions).await {
                Ok(elsewhere) if elsewhere.is_empty() => Ok(()),
                // Led elsewhere since the coordinator looked: it asks again
                // once its catalog says where.
                Ok(elsewhere) => Err(KafkaError::not_leader(
                    elsewhere[0].1.topic(),
                    elsewhere[0].1.partition,
                    elsewhere[0].0,
                )
                .into()),
                Err(e) => Err(e.into()),
            }
        }
        Request::Settle {
            group,
            producer_id,
            commit,
        } => {
            let g = group.clone();
            shard
                .on_group(&group, move |s| async move {
                    s.groups.txn_settle_offsets(&g, producer_id, commit).await
                })
                .await
                .and_then(|r| r)
                .map_err(Failure::from)
        }
    };
    Ok(serde_json::to_vec(&answer).expect("answers serialise"))
}
