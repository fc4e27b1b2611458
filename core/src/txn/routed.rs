//! Transactions across shards: each request runs on the shard that
//! coordinates its transactional id (the one owning the id's group-log
//! partition), which writes the id's state there; ending a transaction
//! appends a marker to each of its partitions on the shards that own them
//! and settles its offsets on the shards that own its groups (in a
//! cluster, on the nodes that lead them: `remote`), then completes it.
//!
//! A transaction is answered ended only once its markers are durable; if a
//! marker cannot be written it stays prepared, and the shard's tick (every
//! second) tries again, as it aborts transactions past their timeout. A
//! node restarted with a prepared transaction completes it the same way.

use std::collections::BTreeMap;
use std::rc::Rc;

use futures::future::join_all;

use super::coordinator::TxnFailure;
use super::remote::MarkerOf;
use super::state::{self, EndOutcome, InitOutcome, TxnError, TxnMetadata, TxnState};

use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::groups::OffsetToCommit;
use crate::shard::Shard;
use crate::topic_partition::TopicPartition;

/// Kafka's `transaction.max.timeout.ms` (15 minutes).
pub const MAX_TIMEOUT_MS: i32 = 900_000;

/// Kafka's `transactional.id.expiration.ms` (7 days).
pub const ID_EXPIRATION_MS: i64 = 7 * 24 * 3600 * 1000;

impl Shard {
    /// InitProducerId with a transactional id: its producer id and the
    /// epoch that fences every earlier producer of the id. An ongoing
    /// transaction of the id is aborted first (fencing its producer), as a
    /// retry after Kafka's CONCURRENT_TRANSACTIONS would find it.
    pub async fn txn_init_producer_id(
        self: &Rc<Self>,
        id: String,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnFailure> {
        let key = id.clone();
        self.on_group(&key, move |s| async move {
            // Once to abort what is ongoing, once more to start afresh.
            for _ in 0..3 {
                let pid = s.allocate_producer_id().await?;
                let outcome = s
                    .groups
                    .txn_init(&id, timeout_ms, MAX_TIMEOUT_MS, expected, pid)
                    .await?;
                match outcome {
                    InitOutcome::Ready(m) => return Ok((m.producer_id, m.producer_epoch)),
                    InitOutcome::AbortFirst(m) => s.finish_txn(&id, m).await?,
                }
            }
            Err(TxnFailure::Refused(TxnError::ConcurrentTransactions))
        })
        .await?
    }

    /// Changes the id's state on its coordinator with `change` (durably).
    async fn txn_change(
        self: &Rc<Self>,
        id: String,
        change: impl FnOnce(Option<&TxnMetadata>) -> Result<TxnMetadata, TxnError> + Send + 'static,
    ) -> Result<(), TxnFailure> {
        let key = id.clone();
        self.on_group(&key, move |s| async move {
            s.groups.txn_update(&id, change).await.map(|_| ())
        })
        .await?
    }

    /// AddPartitionsToTxn: the partitions join the producer's transaction
    /// (starting it).
    pub async fn txn_add_partitions(
        self: &Rc<Self>,
        id: String,
        producer_id: i64,
        epoch: i16,
        partitions: Vec<TopicPartition>,
    ) -> Result<(), TxnFailure> {
        self.txn_change(id, move |cur| {
            state::add_partitions(cur, producer_id, epoch, &partitions, now_ms())
        })
        .await
    }

    /// Whether every partition is in the producer's ongoing transaction
    /// (AddPartitionsToTxn v4+ with verify_only).
    pub async fn txn_verify(
        self: &Rc<Self>,
        id: String,
        producer_id: i64,
        epoch: i16,
        partitions: Vec<TopicPartition>,
    ) -> Result<bool, TxnFailure> {
        let key = id.clone();
        let all_in = self
            .on_group(&key, move |s| async move {
                let current = s.groups.txn_state(&id);
                partitions.iter().all(|tp| {
                    state::in_transaction(
                        current.as_ref(),
                        producer_id,
                        epoch,
                        tp.topic(),
                        tp.partition,
                    )
                })
            })
            .await?;
        Ok(all_in)
    }

    /// AddOffsetsToTxn: the group's offsets join the transaction.
    pub async fn txn_add_offsets(
        self: &Rc<Self>,
        id: String,
        producer_id: i64,
        epoch: i16,
        group: String,
    ) -> Result<(), TxnFailure> {
        self.txn_change(id, move |cur| {
            state::add_offsets(cur, producer_id, epoch, &group, now_ms())
        })
        .await
    }

    /// EndTxn: commits or aborts, answered once every marker is durable.
    pub async fn txn_end(
        self: &Rc<Self>,
        id: String,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), TxnFailure> {
        let key = id.clone();
        self.on_group(&key, move |s| async move {
            match s.groups.txn_end(&id, producer_id, epoch, commit).await? {
                EndOutcome::AlreadyDone => Ok(()),
                EndOutcome::Prepare(meta) => {
                    weir_storage::crash_point::reached("txn-prepared");
                    Ok(s.finish_txn(&id, meta).await?)
                }
            }
        })
        .await?
    }

    /// TxnOffsetCommit, on the shard owning the group: the offsets wait for
    /// the producer's transaction to end.
    pub async fn txn_offset_commit(
        self: &Rc<Self>,
        group: String,
        producer_id: i64,
        member: Option<(String, Option<String>, i32)>,
        offsets: Vec<OffsetToCommit>,
    ) -> Result<Vec<ErrorCode>, KafkaError> {
        let key = group.clone();
        self.on_group(&key, move |s| async move {
            let catalog = s.catalog();
            let member = member
                .as_ref()
                .map(|(m, i, g)| (m.as_str(), i.as_deref(), *g));
            s.groups
                .txn_offset_commit(&group, producer_id, member, offsets, &catalog)
                .await
        })
        .await
    }

    /// DescribeTransactions: each id's state, from its coordinator.
    pub async fn txn_describe(
        self: &Rc<Self>,
        id: String,
    ) -> Result<Option<TxnMetadata>, KafkaError> {
        let key = id.clone();
        self.on_group(&key, move |s| async move { s.groups.txn_state(&id) })
            .await
    }

    /// ListTransactions: the ids this broker coordinates, with their
    /// states: every shard's when the node is one broker, this shard's when
    /// each shard is a broker of its own (`--shard-ports`), so a client
    /// asking every broker lists each id once.
    pub async fn txn_list(self: &Rc<Self>) -> Result<Vec<(String, TxnMetadata)>, KafkaError> {
        if self.config.shard_port_base.is_some() {
            return Ok(self.groups.txn_states());
        }
        let all = (0..self.nr_shards)
            .map(|i| self.invoke_on(i, |s| async move { s.groups.txn_states() }));
        let mut out = Vec::new();
        for part in futures::future::join_all(all).await {
            out.extend(part?);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Writes a prepared transaction's markers and settles its groups'
    /// offsets, then completes it. Runs on the id's shard; one completion
    /// per id at a time (another caller finds it under way and returns).
    pub(crate) async fn finish_txn(
        self: &Rc<Self>,
        id: &str,
        prepared: TxnMetadata,
    ) -> Result<(), KafkaError> {
        if !self
            .groups
            .txns
            .borrow_mut()
            .completing
            .insert(id.to_string())
        {
            return Err(KafkaError::new(
                ErrorCode::ConcurrentTransactions,
                format!("transaction {id:?} is being completed"),
            ));
        }
        let coordinator_epoch = self.groups.coordinator_epoch(id);
        let result = self.write_markers(&prepared, coordinator_epoch).await;
        let result = match result {
            Ok(()) => {
                weir_storage::crash_point::reached("txn-marked");
                self.groups.txn_complete(id, &prepared).await
            }
            Err(e) => {
                log::warn!("transaction {id:?}: its markers are not all written ({e}); retrying");
                Err(e)
            }
        };
        self.groups.txns.borrow_mut().completing.remove(id);
        result
    }

    /// Every marker of a prepared transaction, durable, and its groups'
    /// offsets settled. The markers carry `coordinator_epoch`: a partition
    /// refuses them once a newer coordinator wrote one for the producer.
    async fn write_markers(
        self: &Rc<Self>,
        prepared: &TxnMetadata,
        coordinator_epoch: i32,
    ) -> Result<(), KafkaError> {
        let commit = prepared.state == TxnState::PrepareCommit;
        let (pid, epoch) = (prepared.producer_id, prepared.producer_epoch);
        let marker = MarkerOf {
            commit,
            producer_id: pid,
            producer_epoch: epoch,
            coordinator_epoch,
        };
        // Those another node leads get theirs from that node, as Kafka's
        // WriteTxnMarkers (`remote`).
        let elsewhere = self
            .append_markers_here(marker, prepared.partitions.iter().cloned().collect())
            .await?;
        let mut by_node: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        for (node, tp) in elsewhere {
            by_node.entry(node).or_default().push(tp);
        }
        let carried = by_node
            .into_iter()
            .map(|(node, tps)| self.append_markers_on(node, marker, tps));
        for r in join_all(carried).await {
            r?;
        }
        for group in &prepared.groups {
            self.settle_offsets(group, pid, commit).await?;
        }
        Ok(())
    }

    /// Once a second: completes prepared transactions (after a failed
    /// marker write, or a restart) and aborts ongoing ones past their
    /// timeout, each in a task of its own; once a minute forgets ids idle
    /// for `ID_EXPIRATION_MS`.
    pub fn txn_tick(self: &Rc<Self>, expire: bool) {
        let (prepared, timed_out) = self.groups.txns_to_finish(now_ms());
        for id in prepared {
            if self.groups.txns.borrow().completing.contains(&id) {
                continue;
            }
            let s = self.clone();
            glommio::spawn_local(async move {
                if let Some(meta) = s.groups.txn_state(&id) {
                    if let Err(e) = s.finish_txn(&id, meta).await {
                        log::debug!("transaction {id:?}: {e}");
                    }
                }
            })
            .detach();
        }
        for id in timed_out {
            let s = self.clone();
            glommio::spawn_local(async move {
                let aborting = s
                    .groups
                    .txn_update(&id, |cur| {
                        cur.and_then(|m| state::timed_out(m, now_ms()))
                            .ok_or(TxnError::InvalidTxnState)
                    })
                    .await;
                if let Ok(meta) = aborting {
                    log::info!(
                        "transaction {id:?} of producer {} ran past its timeout ({} ms): aborting",
                        meta.producer_id,
                        meta.timeout_ms
                    );
                    if let Err(e) = s.finish_txn(&id, meta).await {
                        log::debug!("transaction {id:?}: {e}");
                    }
                }
            })
            .detach();
        }
        if expire {
            let s = self.clone();
            glommio::spawn_local(async move { s.groups.txn_expire(ID_EXPIRATION_MS).await })
                .detach();
        }
    }
}
