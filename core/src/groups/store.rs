//! The group log: committed offsets and group existence, and the state of
//! the transactional ids hashed to the same partitions (with offsets their
//! transactions committed, pending until they end), written to the node's
//! own log before a request is answered, and replayed at start-up.
//!
//! Groups hash to one of `GROUP_LOG_PARTITIONS` log partitions
//! (`DATA/groups/{p}`), and a log partition belongs to shard `p % shards`.
//! The partition count is fixed, so a node restarted with another number of
//! cores still finds every group's offsets in one place.
//!
//! Each record is keyed by what it sets (a group's offset for one
//! topic-partition, or the group itself); a null value deletes it. The log
//! is kept short by checkpoints: the live entries are appended again and the
//! log start moved to where they begin, so whole older segments go.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};
use glommio::sync::Semaphore;
use weir_storage::batch::BatchIter;
use weir_storage::records::{build_batch, read_records};
use weir_storage::{LogConfig, PartitionLog};

use crate::catalog::stable_hash;
use crate::error::{ErrorCode, KafkaError};

/// How many group-log partitions there are (fixed for the life of the data
/// directory, like Kafka's `offsets.topic.num.partitions`).
pub const GROUP_LOG_PARTITIONS: u32 = 16;

/// Records per batch when a checkpoint rewrites the live entries.
const CHECKPOINT_BATCH: usize = 4096;

/// The log partition a group's records go to.
pub fn log_partition(group: &str) -> u32 {
    (stable_hash(group) % GROUP_LOG_PARTITIONS as u64) as u32
}

pub fn log_dir(data_dir: &Path, partition: u32) -> PathBuf {
    data_dir.join("groups").join(partition.to_string())
}

/// An offset committed for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_ms: i64,
}

/// One record of the group log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A group's committed offset for a topic-partition; `None` deletes it.
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<Committed>,
    },
    /// A group and its protocol type; `None` deletes the group and all its
    /// offsets.
    Group {
        group: String,
        protocol_type: Option<String>,
    },
    /// A transactional id's state (the coordinator's, for ids hashed to
    /// this partition); `None` forgets the id.
    Txn {
        id: String,
        value: Option<crate::txn::state::TxnMetadata>,
    },
    /// An offset a transaction committed (TxnOffsetCommit), pending until
    /// its producer's transaction ends; `None` drops it (the transaction
    /// ended: committed, it became an `Offset` entry written with this).
    Pending {
        group: String,
        producer_id: i64,
        topic: String,
        partition: i32,
        value: Option<Committed>,
    },
}

const KIND_OFFSET: u8 = 1;
const KIND_GROUP: u8 = 2;
const KIND_TXN: u8 = 3;
const KIND_PENDING: u8 = 4;
const FORMAT: u8 = 0;

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_u32(s.len() as u32);
    b.put_slice(s.as_bytes());
}

fn get_str(b: &[u8], at: &mut usize) -> Option<String> {
    let len = u32::from_be_bytes(b.get(*at..*at + 4)?.try_into().ok()?) as usize;
    *at += 4;
    let s = std::str::from_utf8(b.get(*at..at.checked_add(len)?)?).ok()?;
    *at += len;
    Some(s.to_string())
}

fn get_i64(b: &[u8], at: &mut usize) -> Option<i64> {
    let v = i64::from_be_bytes(b.get(*at..*at + 8)?.try_into().ok()?);
    *at += 8;
    Some(v)
}

fn get_i32(b: &[u8], at: &mut usize) -> Option<i32> {
    let v = i32::from_be_bytes(b.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    Some(v)
}

impl Entry {
    /// The record's key and value.
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        let mut k = BytesMut::new();
        k.put_u8(FORMAT);
        match self {
            Entry::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                k.put_u8(KIND_OFFSET);
                put_str(&mut k, group);
                put_str(&mut k, topic);
                k.put_i32(*partition);
                (k.freeze(), value.as_ref().map(encode_committed))
            }
            Entry::Group {
                group,
                protocol_type,
            } => {
                k.put_u8(KIND_GROUP);
                put_str(&mut k, group);
                let v = protocol_type.as_ref().map(|t| {
                    let mut v = BytesMut::new();
                    v.put_u8(FORMAT);
                    put_str(&mut v, t);
                    v.freeze()
                });
                (k.freeze(), v)
            }
            Entry::Txn { id, value } => {
                k.put_u8(KIND_TXN);
                put_str(&mut k, id);
                (k.freeze(), value.as_ref().map(|m| Bytes::from(m.encode())))
            }
            Entry::Pending {
                group,
                producer_id,
                topic,
                partition,
                value,
            } => {
                k.put_u8(KIND_PENDING);
                put_str(&mut k, group);
                k.put_i64(*producer_id);
                put_str(&mut k, topic);
                k.put_i32(*partition);
                (k.freeze(), value.as_ref().map(encode_committed))
            }
        }
    }

    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Option<Entry> {
        if key.first() != Some(&FORMAT) {
            return None;
        }
        let mut at = 2;
        match *key.get(1)? {
            KIND_OFFSET => {
                let group = get_str(key, &mut at)?;
                let topic = get_str(key, &mut at)?;
                let partition = get_i32(key, &mut at)?;
                let value = match value {
                    None => None,
                    Some(v) => Some(decode_committed(v)?),
                };
                Some(Entry::Offset {
                    group,
                    topic,
                    partition,
                    value,
                })
            }
            KIND_GROUP => {
                let group = get_str(key, &mut at)?;
                let protocol_type = match value {
                    None => None,
                    Some(v) => Some(get_str(v, &mut 1)?),
                };
                Some(Entry::Group {
                    group,
                    protocol_type,
                })
            }
            KIND_TXN => {
                let id = get_str(key, &mut at)?;
                let value = match value {
                    None => None,
                    Some(v) => Some(crate::txn::state::TxnMetadata::decode(v)?),
                };
                Some(Entry::Txn { id, value })
            }
            KIND_PENDING => {
                let group = get_str(key, &mut at)?;
                let producer_id = get_i64(key, &mut at)?;
                let topic = get_str(key, &mut at)?;
                let partition = get_i32(key, &mut at)?;
                let value = match value {
                    None => None,
                    Some(v) => Some(decode_committed(v)?),
                };
                Some(Entry::Pending {
                    group,
                    producer_id,
                    topic,
                    partition,
                    value,
                })
            }
            _ => None,
        }
    }
}

fn encode_committed(c: &Committed) -> Bytes {
    let mut v = BytesMut::new();
    v.put_u8(FORMAT);
    v.put_i64(c.offset);
    v.put_i32(c.leader_epoch);
    v.put_i64(c.commit_ms);
    put_str(&mut v, &c.metadata);
    v.freeze()
}

fn decode_committed(v: &[u8]) -> Option<Committed> {
    let mut at = 1;
    Some(Committed {
        offset: get_i64(v, &mut at)?,
        leader_epoch: get_i32(v, &mut at)?,
        commit_ms: get_i64(v, &mut at)?,
        metadata: get_str(v, &mut at)?,
    })
}

/// Where a group log's records are kept: a log of this node's own (a
/// single node, or a cluster's group logs from before coordinators were
/// replicated), or a partition of the cluster's replicated groups topic
/// (`crate::catalog::GROUPS_TOPIC`) this node leads, whose writes wait
/// for its in-sync replicas.
enum Backing {
    Own(Box<PartitionLog>),
    Replicated {
        part: std::rc::Rc<crate::partition::Partition>,
        /// The partition's appends are not cached (a cache of no bytes).
        cache: std::cell::RefCell<crate::cache::TailCache>,
    },
}

/// One group-log partition on its owning shard.
pub struct GroupLog {
    pub partition: u32,
    backing: Backing,
    /// One write (append and fsync, then the caller's in-memory update) at a
    /// time, so memory changes in log order and a checkpoint sees every
    /// write before it.
    lock: Semaphore,
    /// Checkpoint when the log grows past this.
    checkpoint_at: Cell<u64>,
    /// The smallest `checkpoint_at`.
    checkpoint_min: u64,
}

impl GroupLog {
    /// Opens the log and returns it with every entry from its start, in
    /// order. It is checkpointed past `checkpoint_min` bytes.
    pub async fn open(
        data_dir: &Path,
        partition: u32,
        checkpoint_min: u64,
        now_ms: i64,
    ) -> Result<(GroupLog, Vec<Entry>), KafkaError> {
        // Segments a quarter of the checkpoint size: a checkpoint frees
        // whole segments, so most of what it supersedes goes.
        let config = LogConfig {
            segment_bytes: (checkpoint_min / 4).max(4096),
            retention_ms: -1,
            retention_bytes: -1,
            ..LogConfig::default()
        };
        let dir = log_dir(data_dir, partition);
        let log = PartitionLog::open(&dir, config, now_ms).await?;
        let entries = replay(&log, log.high_watermark(), &dir.display().to_string()).await?;
        let size = log.size_bytes();
        let log = GroupLog {
            partition,
            backing: Backing::Own(Box::new(log)),
            lock: Semaphore::new(1),
            checkpoint_at: Cell::new((size * 2).max(checkpoint_min)),
            checkpoint_min,
        };
        Ok((log, entries))
    }

    /// A group log kept in `part`, a partition of the replicated groups
    /// topic this node has just come to lead, with every entry in it (up
    /// to its log end: what a leader holds is the partition's log).
    pub async fn load(
        partition: u32,
        part: std::rc::Rc<crate::partition::Partition>,
        checkpoint_min: u64,
    ) -> Result<(GroupLog, Vec<Entry>), KafkaError> {
        let name = format!("{}-{}", part.topic, part.index);
        let entries = replay(&part.log, part.log.durable_end(), &name).await?;
        let size = part.log.size_bytes();
        let log = GroupLog {
            partition,
            backing: Backing::Replicated {
                part,
                cache: std::cell::RefCell::new(crate::cache::TailCache::new(0)),
            },
            lock: Semaphore::new(1),
            checkpoint_at: Cell::new((size * 2).max(checkpoint_min)),
            checkpoint_min,
        };
        Ok((log, entries))
    }

    fn log(&self) -> &PartitionLog {
        match &self.backing {
            Backing::Own(log) => log,
            Backing::Replicated { part, .. } => &part.log,
        }
    }
}

/// Every entry of `log` from its start up to `end`, in order.
async fn replay(log: &PartitionLog, end: i64, name: &str) -> Result<Vec<Entry>, KafkaError> {
    let mut entries = Vec::new();
    let mut offset = log.log_start();
    while offset < end {
        let read = match log.is_replicated() {
            true => log.read_replica(offset, 1 << 20).await?,
            false => log.read(offset, 1 << 20).await?,
        };
        let batches = read.batches.to_bytes();
        let mut iter = BatchIter::new(&batches);
        let mut advanced = false;
        for (pos, h) in iter.by_ref() {
            let batch = batches.slice(pos..pos + h.total_len());
            let records = read_records(&batch, &h).ok_or_else(|| {
                KafkaError::new(
                    ErrorCode::KafkaStorageError,
                    format!(
                        "group log {}: the batch at offset {} does not parse",
                        name, h.base_offset
                    ),
                )
            })?;
            for r in records {
                if r.offset < offset {
                    continue;
                }
                let key = r.key.as_deref().unwrap_or_default();
                match Entry::decode(key, r.value.as_deref()) {
                    Some(e) => entries.push(e),
                    None => log::warn!(
                        "group log {}: skipping the unreadable record at offset {}",
                        name,
                        r.offset
                    ),
                }
            }
            offset = h.last_offset() + 1;
            advanced = true;
        }
        if !advanced {
            return Err(KafkaError::new(
                ErrorCode::KafkaStorageError,
                format!("group log {}: no batch at offset {offset}", name),
            ));
        }
    }
    Ok(entries)
}

impl GroupLog {
    /// Takes the write lock: hold it from before `append_durably` until the
    /// in-memory state reflects the write.
    pub async fn lock(&self) -> glommio::sync::Permit<'_> {
        self.lock.acquire_permit(1).await.expect("semaphore open")
    }

    /// Appends `entries` and returns once they are fsynced. The caller holds
    /// the lock.
    pub async fn append_durably(&self, entries: &[Entry], now_ms: i64) -> Result<(), KafkaError> {
        if entries.is_empty() {
            return Ok(());
        }
        let encoded: Vec<_> = entries.iter().map(Entry::encode).collect();
        let mut batches = Vec::new();
        for chunk in encoded.chunks(CHECKPOINT_BATCH) {
            let recs: Vec<_> = chunk
                .iter()
                .map(|(k, v)| (Some(&k[..]), v.as_deref()))
                .collect();
            let b = build_batch(&recs, now_ms);
            let h = weir_storage::batch::BatchHeader::parse(&b).expect("a built batch");
            batches.push((h, b));
        }
        let log = match &self.backing {
            Backing::Own(log) => log,
            Backing::Replicated { part, cache } => {
                // Written once every in-sync replica has it: what a new
                // coordinator replays. A partition this node no longer
                // leads (or whose replicas are too few) answers as Kafka's
                // coordinator does.
                return match part
                    .append(
                        &batches,
                        -1,
                        crate::partition::REPLICATION_TIMEOUT,
                        cache,
                        None,
                    )
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) => Err(KafkaError::new(
                        match e.code {
                            ErrorCode::NotLeaderOrFollower => ErrorCode::NotCoordinator,
                            ErrorCode::KafkaStorageError => ErrorCode::KafkaStorageError,
                            _ => ErrorCode::CoordinatorNotAvailable,
                        },
                        e.message,
                    )),
                };
            }
        };
        let (appended, _) = log.append(&batches, now_ms).await?;
        loop {
            let hw = log.flush().await?;
            if hw > appended.last_offset {
                return Ok(());
            }
        }
    }

    /// Bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.log().size_bytes()
    }

    /// Whether the log has grown enough to be checkpointed.
    pub fn wants_checkpoint(&self) -> bool {
        self.log().size_bytes() > self.checkpoint_at.get()
    }

    /// Rewrites `live` (every entry still in force) and moves the log start
    /// to it. The caller holds the lock and built `live` under it.
    pub async fn checkpoint(&self, live: Vec<Entry>, now_ms: i64) -> Result<(), KafkaError> {
        let start = self.log().log_end();
        if live.is_empty() {
            // Nothing in force: everything before the end can go (once
            // it is all below the high watermark).
            if self.log().high_watermark() < start {
                return Ok(());
            }
            self.log().delete_records_before(start)?;
        } else {
            self.append_durably(&live, now_ms).await?;
            self.log().delete_records_before(start)?;
        }
        let size = self.log().size_bytes();
        self.checkpoint_at.set((size * 2).max(self.checkpoint_min));
        log::info!(
            "group log {}: checkpointed {} entries; {} bytes kept",
            self.partition,
            live.len(),
            size
        );
        Ok(())
    }

    /// Syncs a log of this node's own (a replicated partition is closed
    /// with the shard's partitions).
    pub async fn close(&self) {
        if let Backing::Own(log) = &self.backing {
            if let Err(e) = log.close().await {
                log::error!("group log {}: closing: {e}", self.partition);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let cases = [
            Entry::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
                value: Some(Committed {
                    offset: 42,
                    leader_epoch: -1,
                    metadata: "meta ü".into(),
                    commit_ms: 99,
                }),
            },
            Entry::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
                value: None,
            },
            Entry::Group {
                group: "g".into(),
                protocol_type: Some("consumer".into()),
            },
            Entry::Group {
                group: "".into(),
                protocol_type: None,
            },
        ];
        for e in cases {
            let (k, v) = e.encode();
            assert_eq!(Entry::decode(&k, v.as_deref()), Some(e));
        }
        assert_eq!(Entry::decode(&[0, 9], None), None);
        assert_eq!(Entry::decode(&[0, 1, 0, 0, 0, 200], None), None);
    }

    #[test]
    fn groups_spread_over_partitions() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..200 {
            let p = log_partition(&format!("group-{i}"));
            assert!(p < GROUP_LOG_PARTITIONS);
            seen.insert(p);
        }
        assert_eq!(seen.len(), GROUP_LOG_PARTITIONS as usize);
    }
}
