//! The one ingest step. A produce's records for a partition are checked
//! once on the partition's owner into `ProducedBatches` (each batch's
//! header parsed and its CRC checked, `split_produced`); then `ingest`
//! applies the topic's rules in one place — `max.message.bytes`, a
//! compacted topic's keys, a `_value` table's constraints, an Avro table's
//! writer schemas, a typed table's conversion into rows — and says what to
//! append. `Partition` then only appends, caches and waits.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::join_all;
use weir_storage::batch::{split_produced, BatchHeader};

use crate::by_partition::PartitionWork;
use crate::catalog::TopicMeta;
use crate::clock::now_ms;
use crate::error::{ErrorCode, KafkaError};
use crate::partition::{Partition, ProduceResult};
use crate::shard::Shard;

use super::schema::TableSchema;
use super::MAX_DECOMPRESSED;

/// A produce's batches for one partition, as produced, each header parsed
/// and CRC checked once.
pub struct ProducedBatches(Vec<(BatchHeader, Bytes)>);

impl ProducedBatches {
    /// Splits `records` into its batches; a malformed or corrupt batch
    /// refuses them all.
    pub fn check(records: &Bytes) -> Result<ProducedBatches, KafkaError> {
        Ok(ProducedBatches(split_produced(records)?))
    }
}

/// What the topic's rules made of a produce.
pub enum Ingest {
    /// Batches to append: as produced, or a typed table's rows.
    Append(Vec<(BatchHeader, Bytes)>),
    /// Nothing to store (no record became a row); an idempotent producer's
    /// sequence still moves past these batches.
    Skip(Vec<BatchHeader>),
}

/// Applies `topic`'s rules to a produce into partition `p` (on its owner):
/// what to append, or why the whole produce is refused.
pub async fn ingest(
    shard: &Rc<Shard>,
    p: &Partition,
    topic: Option<&TopicMeta>,
    batches: ProducedBatches,
) -> Result<Ingest, KafkaError> {
    let batches = batches.0;
    check_sizes(p, topic, &batches)?;
    if let Some(t) = topic.filter(|t| !t.config.log_append_time) {
        for (h, b) in &batches {
            check_timestamps(p, &t.config, h, b)?;
        }
    }
    let schema = topic.and_then(|t| t.schema.as_ref());
    if let Some(avro) = schema.filter(|s| s.avro_subject().is_some()) {
        // An Avro table keeps the records as produced, once each passes
        // the writer schema it names (fetched from the registry).
        super::avro::check_produced(shard, &p.topic, avro, &batches).await?;
    }
    // A keyed table's rows take their keys from their columns, so its
    // producers need not key their records.
    let rows_keyed = schema.is_some_and(|s| s.is_keyed() && !s.keeps_records());
    if topic.is_some_and(|t| t.config.cleanup_policy.compacts()) && !rows_keyed {
        for (h, b) in &batches {
            check_keys(p, h, b)?;
        }
    }
    let ingest = match schema {
        None => Ingest::Append(batches),
        Some(schema) if schema.avro_subject().is_some() => Ingest::Append(batches),
        Some(schema) if schema.keeps_records() => {
            // A `_value` table keeps the records as produced, once each
            // batch passes its checks (the whole request or nothing).
            for (h, b) in &batches {
                super::check_records(&p.topic, schema, h, b, MAX_DECOMPRESSED)?;
            }
            Ingest::Append(batches)
        }
        Some(schema) => to_rows(p, schema, batches)?,
    };
    match (ingest, topic) {
        (Ingest::Append(batches), Some(t)) if t.config.compression.codec().is_some() => {
            // As Kafka, the batches as stored are held to the limit too.
            let batches = recompressed(p, t, batches)?;
            check_sizes(p, topic, &batches)?;
            Ok(Ingest::Append(batches))
        }
        (ingest, _) => Ok(ingest),
    }
}

/// Refuses the batches if one is larger than the topic's
/// `max.message.bytes` (MESSAGE_TOO_LARGE).
fn check_sizes(
    p: &Partition,
    topic: Option<&TopicMeta>,
    batches: &[(BatchHeader, Bytes)],
) -> Result<(), KafkaError> {
    let max = topic.map_or(i32::MAX, |t| t.config.max_message_bytes);
    match batches
        .iter()
        .find(|(h, _)| h.total_len() > max.max(0) as usize)
    {
        None => Ok(()),
        Some((h, _)) => Err(KafkaError::new(
            ErrorCode::MessageTooLarge,
            format!(
                "a batch of {} bytes is larger than max.message.bytes {max} of {}-{}",
                h.total_len(),
                p.topic,
                p.index
            ),
        )),
    }
}

/// A record's timestamp when it has none (Kafka's `RecordBatch.NO_TIMESTAMP`):
/// never out of range, as in Kafka's `LogValidator`.
const NO_TIMESTAMP: i64 = -1;

/// A CreateTime topic refuses a batch holding a record stamped further
/// before or after the node's clock than `message.timestamp.before.max.ms`
/// / `after.max.ms` allow (INVALID_TIMESTAMP, Kafka's `LogValidator`
/// message). The header's max timestamp settles the after bound; the
/// before bound (unbounded by default) reads the records.
fn check_timestamps(
    p: &Partition,
    c: &crate::catalog::TopicConfig,
    h: &BatchHeader,
    batch: &Bytes,
) -> Result<(), KafkaError> {
    let now = now_ms();
    let earliest = now.saturating_sub(c.timestamp_before_max_ms);
    let latest = now.saturating_add(c.timestamp_after_max_ms);
    let out_of_range = |i: usize, ts: i64| {
        let mut e = KafkaError::new(
            ErrorCode::InvalidTimestamp,
            format!(
                "Timestamp {ts} of message with offset {i} is out of range. The timestamp \
                 should be within [{earliest}, {latest}] (message.timestamp.before.max.ms / \
                 after.max.ms of {}-{})",
                p.topic, p.index
            ),
        );
        e.record_index = Some(i as i32);
        e
    };
    let before_bounded = c.timestamp_before_max_ms < i64::MAX;
    if h.max_timestamp <= latest && !before_bounded {
        return Ok(());
    }
    let records = weir_storage::records::batch_records(batch, h, MAX_DECOMPRESSED)
        .map_err(|e| corrupt(p, e))?;
    match records.iter().position(|r| {
        r.timestamp != NO_TIMESTAMP && (r.timestamp > latest || r.timestamp < earliest)
    }) {
        Some(i) => Err(out_of_range(i, records[i].timestamp)),
        None => Ok(()),
    }
}

/// The batches to store in the codec of the topic's `compression.type`:
/// each batch in another is recompressed (at the topic's level), as
/// Kafka's broker does; `producer` keeps every batch as sent.
fn recompressed(
    p: &Partition,
    t: &TopicMeta,
    batches: Vec<(BatchHeader, Bytes)>,
) -> Result<Vec<(BatchHeader, Bytes)>, KafkaError> {
    let Some(codec) = t.config.compression.codec() else {
        return Ok(batches);
    };
    let level = t.config.level(codec);
    batches
        .into_iter()
        .map(|(h, b)| {
            if h.attributes & weir_storage::batch::ATTR_COMPRESSION_MASK == codec {
                return Ok((h, b));
            }
            let b = weir_storage::records::recompress(&b, &h, codec, level, MAX_DECOMPRESSED)
                .map_err(|e| corrupt(p, e))?;
            let h = BatchHeader::parse(&b).expect("a rebuilt batch");
            Ok((h, b))
        })
        .collect()
}

/// A typed table stores rows: every record is converted (or the whole
/// request refused) before anything is appended.
fn to_rows(
    p: &Partition,
    schema: &TableSchema,
    batches: Vec<(BatchHeader, Bytes)>,
) -> Result<Ingest, KafkaError> {
    let now = now_ms();
    let stamp = p.log.config().log_append_time;
    let mut rows = Vec::with_capacity(batches.len());
    // The rows are held until all are converted: their total is bounded,
    // and each batch may decompress only to what is left.
    let mut budget = MAX_DECOMPRESSED;
    for (h, b) in &batches {
        if let Some(r) = super::rows_batch(&p.topic, schema, h, b, now, stamp, budget)? {
            budget = budget.checked_sub(r.1.len()).ok_or_else(|| {
                KafkaError::new(
                    ErrorCode::RecordListTooLarge,
                    format!(
                        "the rows of this request to {} are over {MAX_DECOMPRESSED} bytes",
                        p.topic
                    ),
                )
            })?;
            rows.push(r);
        }
    }
    if rows.is_empty() {
        return Ok(Ingest::Skip(batches.into_iter().map(|(h, _)| h).collect()));
    }
    Ok(Ingest::Append(rows))
}

/// CORRUPT_MESSAGE for a batch of `p` whose records cannot be read: `why`.
fn corrupt(p: &Partition, why: String) -> KafkaError {
    KafkaError::new(
        ErrorCode::CorruptMessage,
        format!("{}-{}: {why}", p.topic, p.index),
    )
}

/// A compacted topic keeps the latest record per key, so a record without
/// one is refused (INVALID_RECORD, Kafka's own message).
fn check_keys(p: &Partition, h: &BatchHeader, batch: &Bytes) -> Result<(), KafkaError> {
    let records = weir_storage::records::batch_records(batch, h, MAX_DECOMPRESSED)
        .map_err(|e| corrupt(p, e))?;
    match records.iter().position(|r| r.key.is_none()) {
        None => Ok(()),
        Some(i) => {
            let mut e = KafkaError::new(
                ErrorCode::InvalidRecord,
                format!(
                    "Compacted topic cannot accept message without key in topic partition {}-{}.",
                    p.topic, p.index
                ),
            );
            e.record_index = Some(i as i32);
            Err(e)
        }
    }
}

/// Produces each partition's records on its owner (`ingest`, then the
/// partition appends): one hop per owning shard. With `acks` 1 or -1 each
/// answer waits until its batches are durable.
pub async fn produce(
    shard: &Rc<Shard>,
    work: Vec<PartitionWork<Bytes>>,
    acks: i16,
) -> Vec<(usize, ProduceResult)> {
    produce_then(
        shard,
        work,
        acks,
        crate::partition::REPLICATION_TIMEOUT,
        None,
    )
    .await
}

/// `produce`, calling `appended` once every partition's batches have their
/// offsets (or were refused), before they are durable: a connection's next
/// produce may then append behind them (its order is kept) and share their
/// flush rather than wait for it.
pub async fn produce_then(
    shard: &Rc<Shard>,
    work: Vec<PartitionWork<Bytes>>,
    acks: i16,
    timeout: Duration,
    appended: Option<Box<dyn FnOnce()>>,
) -> Vec<(usize, ProduceResult)> {
    let Some(appended) = appended else {
        let work = work.into_iter().map(|w| w.map(|b| (b, None))).collect();
        return produce_told(shard, work, acks, timeout).await;
    };
    let (work, told): (Vec<_>, Vec<_>) = work
        .into_iter()
        .map(|w| {
            let (tell, told) = oneshot::channel();
            (w.map(|b| (b, Some(tell))), told)
        })
        .unzip();
    // A sender dropped unsent (a refusal, a lost hop) counts as told.
    let all_told = async move {
        join_all(told).await;
        appended();
    };
    let (out, ()) = futures::join!(produce_told(shard, work, acks, timeout), all_told);
    out
}

async fn produce_told(
    shard: &Rc<Shard>,
    work: Vec<PartitionWork<(Bytes, Option<oneshot::Sender<()>>)>>,
    acks: i16,
    timeout: Duration,
) -> Vec<(usize, ProduceResult)> {
    shard
        .on_partitions(work, move |s, p, (records, tell): (Bytes, _)| async move {
            produce_here(&s, &p, &records, acks, timeout, tell).await
        })
        .await
}

/// Produces `records` to partition `p` of this shard (its owner): checks
/// them, applies the topic's rules (`ingest`) and appends, telling `tell`
/// once they have offsets.
pub async fn produce_here(
    s: &Rc<Shard>,
    p: &Rc<Partition>,
    records: &Bytes,
    acks: i16,
    timeout: Duration,
    tell: Option<oneshot::Sender<()>>,
) -> ProduceResult {
    crate::counters::add(&s.counters.partition_appends, 1);
    crate::counters::add(&s.counters.appended_bytes, records.len() as u64);
    if p.topic == crate::catalog::GROUPS_TOPIC {
        return Err(KafkaError::new(
            ErrorCode::InvalidTopicException,
            format!(
                "{} is the cluster's internal group log: only coordinators write it",
                p.topic
            ),
        ));
    }
    let batches = ProducedBatches::check(records)?;
    let catalog = s.catalog();
    match ingest(s, p, catalog.topic(&p.topic), batches).await? {
        Ingest::Append(batches) => p.append(&batches, acks, timeout, &s.cache, tell).await,
        Ingest::Skip(headers) => p.skip(&headers).await,
    }
}
