//! The transaction coordinator's durable half, on the shard that owns a
//! transactional id's log partition (the group log's: ids and groups hash
//! to the same 16 partitions, so a node restarted with other `--cores`
//! finds both). Each operation checks the request against the id's state
//! (`state`), writes the new state to the log (fsynced) and only then
//! installs it, under the log partition's write lock.
//!
//! The group side lives here too: offsets a transaction commits
//! (TxnOffsetCommit) are kept pending per producer until the transaction
//! ends, then written as committed offsets or dropped.

use std::collections::HashSet;

use super::state::{self, EndOutcome, InitOutcome, TxnApi, TxnError, TxnMetadata, TxnState};
use crate::catalog::Catalog;
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::groups::group;
use crate::groups::store::{Entry, GroupLog};
use crate::groups::{Coordinator, OffsetToCommit};
use crate::topic_partition::TopicPartition;

/// Why a transactional request was not done.
#[derive(Debug, Clone)]
pub enum TxnFailure {
    /// Refused by the id's state (the client's error).
    Refused(TxnError),
    /// The node could not do it (not this shard's id, a failed write).
    Node(KafkaError),
}

impl From<KafkaError> for TxnFailure {
    fn from(e: KafkaError) -> Self {
        TxnFailure::Node(e)
    }
}

impl From<TxnError> for TxnFailure {
    fn from(e: TxnError) -> Self {
        TxnFailure::Refused(e)
    }
}

impl TxnFailure {
    /// The error code for a request of `api` at `version`.
    pub fn code(&self, api: TxnApi, version: i16) -> i16 {
        match self {
            TxnFailure::Refused(e) => e.code_for(api, version).code(),
            TxnFailure::Node(e) => e.code.code(),
        }
    }
}

impl std::fmt::Display for TxnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnFailure::Refused(e) => write!(f, "{e}"),
            TxnFailure::Node(e) => write!(f, "{}", e.message),
        }
    }
}

impl Coordinator {
    /// The id's state, if it has any.
    pub fn txn_state(&self, id: &str) -> Option<TxnMetadata> {
        self.txns.borrow().ids.get(id).cloned()
    }

    /// Every id this shard coordinates, with its state.
    pub fn txn_states(&self) -> Vec<(String, TxnMetadata)> {
        let txns = self.txns.borrow();
        let mut all: Vec<_> = txns
            .ids
            .iter()
            .map(|(id, m)| (id.clone(), m.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Writes `meta` as the id's state, durably, then installs it. The
    /// caller holds the log's write lock.
    async fn persist_txn(
        &self,
        log: &GroupLog,
        id: &str,
        meta: Option<TxnMetadata>,
    ) -> Result<(), KafkaError> {
        let entry = Entry::Txn {
            id: id.to_string(),
            value: meta,
        };
        log.append_durably(std::slice::from_ref(&entry), now_ms())
            .await
            .map_err(|e| {
                log::error!("transactional id {id}: writing its state: {e}");
                e
            })?;
        self.install(vec![entry]);
        self.maybe_checkpoint(log).await;
        Ok(())
    }

    /// InitProducerId for `id`: `fresh_pid` is used if the id needs a new
    /// producer id. The outcome's state is durable when this returns.
    pub async fn txn_init(
        &self,
        id: &str,
        timeout_ms: i32,
        max_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        fresh_pid: i64,
    ) -> Result<InitOutcome, TxnFailure> {
        let log = self.log_for(id)?;
        let _write = log.lock().await;
        let current = self.txn_state(id);
        let outcome = state::init_producer_id(
            current.as_ref(),
            timeout_ms,
            max_timeout_ms,
            expected,
            now_ms(),
            &mut || fresh_pid,
        )?;
        let meta = match &outcome {
            InitOutcome::Ready(m) | InitOutcome::AbortFirst(m) => m.clone(),
        };
        self.persist_txn(&log, id, Some(meta)).await?;
        Ok(outcome)
    }

    /// Applies `change` to the id's state and persists what it gives.
    pub async fn txn_update(
        &self,
        id: &str,
        change: impl FnOnce(Option<&TxnMetadata>) -> Result<TxnMetadata, TxnError>,
    ) -> Result<TxnMetadata, TxnFailure> {
        let log = self.log_for(id)?;
        let _write = log.lock().await;
        let current = self.txn_state(id);
        let next = change(current.as_ref())?;
        if current.as_ref() != Some(&next) {
            self.persist_txn(&log, id, Some(next.clone())).await?;
        }
        Ok(next)
    }

    /// EndTxn: the Prepare state, durable, or a retry's answer.
    pub async fn txn_end(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<EndOutcome, TxnFailure> {
        let log = self.log_for(id)?;
        let _write = log.lock().await;
        let current = self.txn_state(id);
        let outcome = state::end_txn(current.as_ref(), producer_id, epoch, commit, now_ms())?;
        if let EndOutcome::Prepare(meta) = &outcome {
            self.persist_txn(&log, id, Some(meta.clone())).await?;
        }
        Ok(outcome)
    }

    /// Completes a prepared transaction whose markers are written: its
    /// Complete state, durable. Nothing if the id moved on meanwhile.
    pub async fn txn_complete(&self, id: &str, prepared: &TxnMetadata) -> Result<(), KafkaError> {
        let log = self.log_for(id)?;
        let _write = log.lock().await;
        if self.txn_state(id).as_ref() != Some(prepared) {
            return Ok(());
        }
        let done = state::complete(prepared, now_ms());
        self.persist_txn(&log, id, Some(done)).await
    }

    /// Forgets ids idle past `expiration_ms` (Kafka's
    /// `transactional.id.expiration.ms`), durably.
    pub async fn txn_expire(&self, expiration_ms: i64) {
        let now = now_ms();
        let idle: Vec<String> = self
            .txns
            .borrow()
            .ids
            .iter()
            .filter(|(_, m)| state::expired(m, now, expiration_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            let Ok(log) = self.log_for(&id) else { continue };
            let _write = log.lock().await;
            let still = self
                .txn_state(&id)
                .is_some_and(|m| state::expired(&m, now, expiration_ms));
            if still {
                let _ = self.persist_txn(&log, &id, None).await;
            }
        }
    }

    /// Prepared transactions (to complete) and ongoing ones past their
    /// timeout (to abort), among this shard's ids.
    pub fn txns_to_finish(&self, now_ms: i64) -> (Vec<String>, Vec<String>) {
        let txns = self.txns.borrow();
        let mut prepared = Vec::new();
        let mut timed_out = Vec::new();
        for (id, m) in &txns.ids {
            match m.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort => prepared.push(id.clone()),
                TxnState::Ongoing if state::timed_out(m, now_ms).is_some() => {
                    timed_out.push(id.clone())
                }
                _ => {}
            }
        }
        (prepared, timed_out)
    }

    // ---- the group side ------------------------------------------------

    /// TxnOffsetCommit: the offsets are written pending under the
    /// producer, durably, and count once its transaction commits. A member
    /// and generation, when given, are checked as OffsetCommit checks them.
    pub async fn txn_offset_commit(
        &self,
        group_id: &str,
        producer_id: i64,
        member: Option<(&str, Option<&str>, i32)>,
        offsets: Vec<OffsetToCommit>,
        catalog: &Catalog,
    ) -> Vec<ErrorCode> {
        if !group::valid_group_id(group_id) {
            return vec![ErrorCode::InvalidGroupId; offsets.len()];
        }
        let log = match self.log_for(group_id) {
            Ok(l) => l,
            Err(e) => return vec![e.code; offsets.len()],
        };
        let _write = log.lock().await;
        if let Some((member_id, instance_id, generation)) = member {
            let groups = self.groups.borrow();
            if let Some(g) = groups.get(group_id) {
                let check = crate::groups::member_may_commit(g, member_id, instance_id, generation);
                if check != ErrorCode::None {
                    return vec![check; offsets.len()];
                }
            }
        }
        let now = now_ms();
        let mut answers = vec![ErrorCode::None; offsets.len()];
        let mut entries = Vec::new();
        for (o, answer) in offsets.iter().zip(answers.iter_mut()) {
            match o.checked(catalog, now) {
                Ok(c) => entries.push(Entry::Pending {
                    group: group_id.to_string(),
                    producer_id,
                    topic: o.topic.clone(),
                    partition: o.partition,
                    value: Some(c),
                }),
                Err(code) => *answer = code,
            }
        }
        if let Err(e) = log.append_durably(&entries, now).await {
            log::error!("group {group_id}: writing transactional offsets: {e}");
            return crate::groups::storage_failed(answers);
        }
        self.install(entries);
        self.maybe_checkpoint(&log).await;
        answers
    }

    /// Ends `producer_id`'s pending offsets in `group_id`: committed ones
    /// become the group's offsets, aborted ones go; durably.
    pub async fn txn_settle_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), KafkaError> {
        let log = self.log_for(group_id)?;
        let _write = log.lock().await;
        let mut entries = Vec::new();
        if let Some(pending) = self.txns.borrow().pending.get(group_id) {
            for ((pid, topic, partition), c) in pending {
                if *pid != producer_id {
                    continue;
                }
                if commit {
                    entries.push(Entry::Offset {
                        group: group_id.to_string(),
                        topic: topic.clone(),
                        partition: *partition,
                        value: Some(c.clone()),
                    });
                }
                entries.push(Entry::Pending {
                    group: group_id.to_string(),
                    producer_id,
                    topic: topic.clone(),
                    partition: *partition,
                    value: None,
                });
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        if commit && !self.groups.borrow().contains_key(group_id) {
            entries.insert(
                0,
                Entry::Group {
                    group: group_id.to_string(),
                    protocol_type: Some(String::new()),
                },
            );
        }
        log.append_durably(&entries, now_ms()).await?;
        self.install(entries);
        self.maybe_checkpoint(&log).await;
        Ok(())
    }

    /// The partitions of `group_id` with offsets pending in a transaction
    /// (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT).
    pub fn pending_partitions(&self, group_id: &str) -> HashSet<TopicPartition> {
        self.txns
            .borrow()
            .pending
            .get(group_id)
            .map(|p| {
                p.keys()
                    .map(|(_, t, p)| TopicPartition::new(t.as_str(), *p))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::group::GroupConfig;
    use crate::groups::tests::catalog;
    use std::path::PathBuf;
    use weir_storage::testing::run_local as run;

    fn offset(partition: i32, offset: i64) -> OffsetToCommit {
        OffsetToCommit {
            topic: "t".into(),
            partition,
            offset,
            leader_epoch: -1,
            metadata: None,
        }
    }

    /// Every step of a transaction is in the log when it is answered: a
    /// coordinator reopened after its decision (PrepareCommit) finds it
    /// there to complete, with the transaction's offsets still pending;
    /// settling them makes them the group's, and the completed state and
    /// the offsets survive another reopen.
    #[test]
    fn a_prepared_transaction_and_its_offsets_survive_a_reopen() {
        run(|| async {
            // Not /tmp: tmpfs has no O_DIRECT.
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../target/test-data/txn-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            weir_storage::segment::prepare_direct_io(&dir)
                .await
                .unwrap();
            let cfg = GroupConfig::default();
            let cat = catalog();
            let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
            let InitOutcome::Ready(m) = c.txn_init("tx", 60_000, 900_000, None, 42).await.unwrap()
            else {
                panic!("a new id is ready at once")
            };
            assert_eq!((m.producer_id, m.producer_epoch), (42, 0));
            let parts = vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
            c.txn_update("tx", |cur| {
                state::add_partitions(cur, 42, 0, &parts, now_ms())
            })
            .await
            .unwrap();
            c.txn_update("tx", |cur| state::add_offsets(cur, 42, 0, "g", now_ms()))
                .await
                .unwrap();
            let codes = c
                .txn_offset_commit("g", 42, None, vec![offset(0, 7), offset(1, 9)], &cat)
                .await;
            assert_eq!(codes, vec![ErrorCode::None; 2]);
            // Pending: not the group's yet, and unstable.
            assert!(c.committed("g", None).is_empty());
            assert_eq!(c.pending_partitions("g").len(), 2);
            let EndOutcome::Prepare(prepared) = c.txn_end("tx", 42, 0, true).await.unwrap() else {
                panic!("an ongoing transaction prepares")
            };
            assert_eq!(prepared.state, TxnState::PrepareCommit);
            c.close().await;
            drop(c);

            let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
            assert_eq!(c.txn_state("tx"), Some(prepared.clone()));
            assert_eq!(c.txns_to_finish(now_ms()).0, vec!["tx".to_string()]);
            assert_eq!(c.pending_partitions("g").len(), 2);
            // What the tick does once the markers are written.
            c.txn_settle_offsets("g", 42, true).await.unwrap();
            c.txn_complete("tx", &prepared).await.unwrap();
            let committed = c.committed("g", None);
            assert_eq!(committed[0].1[1].1.as_ref().unwrap().offset, 9);
            c.close().await;
            drop(c);

            let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
            assert_eq!(c.txn_state("tx").unwrap().state, TxnState::CompleteCommit);
            assert!(c.pending_partitions("g").is_empty());
            assert_eq!(c.committed("g", None)[0].1[0].1.as_ref().unwrap().offset, 7);
            // A retried EndTxn is answered as it ended.
            assert_eq!(
                c.txn_end("tx", 42, 0, true).await.unwrap(),
                EndOutcome::AlreadyDone
            );
            c.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
}
