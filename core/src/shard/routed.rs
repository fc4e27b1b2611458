//! Partition work routed to the shard that owns each partition
//! (`on_partitions`, which `table::ingest` produces through), fetch (long
//! poll, gathered across shards), list offsets, delete records.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::future::{join_all, select, select_all, Either};

use crate::by_partition::PartitionWork;
use crate::catalog::Catalog;
use crate::error::{ErrorCode, KafkaError};
use crate::memory::Grant;
use crate::partition::{Partition, PartitionRead};

use super::Shard;

/// What ListOffsets asks of a partition (its `timestamp` field: a time,
/// or one of Kafka's negative specials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetQuery {
    /// -1: the high watermark.
    Latest,
    /// -1 asked with isolation level read_committed: the last stable
    /// offset.
    LatestStable,
    /// -2: the log start.
    Earliest,
    /// -3: the record with the largest timestamp (KIP-734).
    MaxTimestamp,
    /// -4: the first offset on local storage (KIP-405; all of it is local).
    EarliestLocal,
    /// -5: the last offset in tiered storage (KIP-1005, ListOffsets v9):
    /// none is tiered, so no offset, as Kafka answers without tiering.
    LatestTiered,
    /// A time in ms: the first offset whose timestamp is at or after it.
    AtTime(i64),
}

impl OffsetQuery {
    /// The query a ListOffsets `timestamp` field asks, at the request's
    /// `isolation_level` (1: read_committed).
    pub fn from_wire(timestamp: i64, isolation_level: i8) -> Result<OffsetQuery, KafkaError> {
        Ok(match timestamp {
            -1 if isolation_level == 1 => OffsetQuery::LatestStable,
            -1 => OffsetQuery::Latest,
            -2 => OffsetQuery::Earliest,
            -3 => OffsetQuery::MaxTimestamp,
            -4 => OffsetQuery::EarliestLocal,
            -5 => OffsetQuery::LatestTiered,
            t if t >= 0 => OffsetQuery::AtTime(t),
            t => {
                return Err(KafkaError::new(
                    ErrorCode::InvalidRequest,
                    format!("timestamp {t} is not a valid ListOffsets query"),
                ))
            }
        })
    }
}

/// One partition of a fetch request.
#[derive(Debug, Clone)]
pub struct FetchPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
    /// Isolation level read_committed: up to the last stable offset.
    pub committed: bool,
    /// The leader epoch the fetcher knows (KIP-320; -1: unchecked).
    pub current_leader_epoch: i32,
    /// A consumer's Fetch v11+ (KIP-392): its `client.rack` (empty if it
    /// set none). Such a fetch may be served by a follower here, and the
    /// leader may send it to a replica in its rack.
    pub client_rack: Option<std::sync::Arc<str>>,
    /// Set on the leader: the node in the consumer's rack, and its
    /// broker, to fetch from instead (answered with no records, if that
    /// replica holds the offset asked).
    pub redirect: Option<(i32, i32)>,
}

impl Shard {
    /// Runs `op` on each partition of `work`, on the shard that owns it:
    /// one hop per owning shard, the partitions of a shard concurrently.
    /// Each answer carries its place in the request (`PartitionWork::at`);
    /// every item gets one (an unknown partition, or a lost hop, an error).
    pub async fn on_partitions<A, R, F, Fut>(
        self: &Rc<Self>,
        work: Vec<PartitionWork<A>>,
        op: F,
    ) -> Vec<(usize, Result<R, KafkaError>)>
    where
        A: Send + 'static,
        R: Send + 'static,
        F: Fn(Rc<Shard>, Rc<Partition>, A) -> Fut + Send + Clone + 'static,
        Fut: Future<Output = Result<R, KafkaError>> + 'static,
    {
        let catalog = self.catalog();
        let mut out = Vec::with_capacity(work.len());
        let mut routed = Vec::with_capacity(work.len());
        let mut routed_places = Vec::with_capacity(work.len());
        for w in work {
            match self.owner_here(&catalog, &w.tp.topic, w.tp.partition) {
                Ok(shard) => {
                    routed_places.push(w.at);
                    routed.push((shard, w));
                }
                Err(e) => out.push((w.at, Err(e))),
            }
        }
        let answers = self
            .scatter(routed, move |s, group| {
                let op = op.clone();
                async move {
                    join_all(group.into_iter().map(|w| {
                        let (s, op) = (s.clone(), op.clone());
                        async move {
                            let r = match s.partition(&w.tp.topic, w.tp.partition) {
                                Some(p) => op(s.clone(), p, w.arg).await,
                                None => Err(s.not_here(&w.tp.topic, w.tp.partition)),
                            };
                            (w.at, r)
                        }
                    }))
                    .await
                }
            })
            .await;
        let answered = out.len();
        out.extend(answers.into_iter().flatten().flatten());
        if out.len() - answered < routed_places.len() {
            // A hop failed (its shard stopped): its items still get answers.
            let have: std::collections::HashSet<usize> = out.iter().map(|(i, _)| *i).collect();
            for at in routed_places.into_iter().filter(|i| !have.contains(i)) {
                log::error!("a hop to the shard owning request item {at} was lost");
                let lost = KafkaError::new(
                    ErrorCode::UnknownServerError,
                    "the owning shard did not answer",
                );
                out.push((at, Err(lost)));
            }
        }
        out
    }

    // ---- fetch ---------------------------------------------------------

    /// A fetch across shards: each owner reads (and waits, if nothing is
    /// there) for its partitions; the first owner to answer with data
    /// releases the others early, as Kafka completes a delayed fetch.
    /// Answers each partition's read, and the answer memory the reads hold
    /// (`memory`) until the answer is sent.
    ///
    /// `replica`: a follower's fetch (Kafka's replica id), which reads past
    /// the high watermark up to the leader's durable end, waits for that
    /// to move, and tells the leader how far the follower holds the log.
    pub async fn fetch(
        self: &Rc<Self>,
        parts: Vec<FetchPartition>,
        min_bytes: i32,
        max_bytes: i32,
        max_wait: Duration,
        replica: Option<i32>,
    ) -> (Vec<Result<PartitionRead, KafkaError>>, Vec<Grant>) {
        let catalog = self.catalog();
        let deadline = crate::clock::long_poll_deadline(Instant::now(), max_wait);
        let mut results: Vec<Option<Result<PartitionRead, KafkaError>>> = vec![None; parts.len()];
        let mut groups: BTreeMap<usize, Vec<(usize, FetchPartition)>> = BTreeMap::new();
        for (i, mut p) in parts.into_iter().enumerate() {
            let place = match replica {
                None => self.read_place(&catalog, &mut p),
                Some(_) => self.owner_here(&catalog, &p.topic, p.partition),
            };
            match place {
                Ok(shard) => groups.entry(shard).or_default().push((i, p)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let mut cancels = Vec::new();
        let mut pending: Vec<Pin<Box<dyn Future<Output = _>>>> = Vec::new();
        for (shard, group) in groups {
            let (tx, rx) = oneshot::channel::<()>();
            cancels.push(tx);
            pending.push(Box::pin(self.invoke_on(shard, move |s| async move {
                s.fetch_local(group, min_bytes, max_bytes, deadline, rx, replica)
                    .await
            })));
        }
        let mut answers = Vec::new();
        if !pending.is_empty() {
            let (first, _, rest) = select_all(pending).await;
            // Whatever the first owner found, the fetch can complete now.
            cancels.clear();
            answers.push(first);
            answers.extend(join_all(rest).await);
        }
        let mut held = Vec::with_capacity(answers.len());
        for a in answers {
            match a {
                Ok((v, grant)) => {
                    for (i, r) in v {
                        results[i] = Some(r);
                    }
                    held.push(grant);
                }
                Err(e) => log::error!("fetch hop failed: {e}"),
            }
        }
        let results: Vec<_> = results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(KafkaError::new(ErrorCode::UnknownServerError, "fetch lost"))
                })
            })
            .collect();
        (results, held)
    }

    /// Where a consumer's fetch of a partition is read: its leader's
    /// shard, or (KIP-392, Fetch v11+) this node's copy as a follower. A
    /// leader asked by a consumer in a rack where a live in-sync replica
    /// is, while the leader is not, names that replica (Kafka's
    /// RackAwareReplicaSelector) for the consumer to fetch from instead.
    fn read_place(&self, cat: &Catalog, p: &mut FetchPartition) -> Result<usize, KafkaError> {
        let me = self.config.node_id;
        let Some(rack) = p.client_rack.clone() else {
            return self.owner_here(cat, &p.topic, p.partition);
        };
        let Some(t) = cat.topic(&p.topic) else {
            return self.owner_here(cat, &p.topic, p.partition);
        };
        let (Some(r), Some((Some(leader), shard))) =
            (t.replicas_of(p.partition), t.place(p.partition))
        else {
            return self.owner_here(cat, &p.topic, p.partition);
        };
        if leader != me && r.replicas.contains(&me) {
            return Ok(self.local_shard(shard));
        }
        if leader == me && !rack.is_empty() {
            let rack_of = |n: i32| cat.nodes.get(&n).and_then(|c| c.rack.as_deref());
            if rack_of(me) != Some(&*rack) {
                p.redirect = r
                    .replicas
                    .iter()
                    .copied()
                    .filter(|&n| n != me && r.isr.contains(&n))
                    .filter(|&n| cat.nodes.get(&n).is_some_and(|c| !c.fenced))
                    .find(|&n| rack_of(n) == Some(&*rack))
                    .map(|n| (n, self.node_broker(n, shard)));
            }
        }
        self.owner_here(cat, &p.topic, p.partition)
    }

    /// Reads this shard's part of a fetch; with less than `min_bytes`
    /// waits until an append wakes it, the deadline passes or `cancel`.
    /// Each read takes what it reads from the shard's answer memory: no
    /// more than is free, but at least its first batch (so a fetch always
    /// progresses); waiting for data holds none.
    async fn fetch_local(
        self: &Rc<Self>,
        parts: Vec<(usize, FetchPartition)>,
        min_bytes: i32,
        max_bytes: i32,
        deadline: Instant,
        cancel: oneshot::Receiver<()>,
        replica: Option<i32>,
    ) -> (Vec<(usize, Result<PartitionRead, KafkaError>)>, Grant) {
        crate::counters::add(&self.counters.fetch_parts, 1);
        let mut cancel = cancel;
        let mut cancelled = false;
        loop {
            // Watch before reading, so an append during the read still wakes us.
            let mut watches = Vec::with_capacity(parts.len());
            let mut out = Vec::with_capacity(parts.len());
            // Read every partition at once (their disk reads overlap), then
            // apply the response budget in request order, as Kafka does: the
            // first partition with data always gets at least one batch.
            let want = (max_bytes.max(1) as usize).min(self.config.fetch_max_bytes);
            let mut grant = self.answer_memory.take_up_to(want);
            let budget = grant.bytes().max(1);
            let limits = read_limits(parts.iter().map(|(_, fp)| fp.max_bytes), budget);
            let reads = join_all(parts.iter().zip(limits).map(|((_, fp), limit)| {
                let part = self.partition(&fp.topic, fp.partition);
                if let Some(p) = &part {
                    watches.push(match replica {
                        Some(_) => p.watch_durable(),
                        None => p.watch(),
                    });
                }
                weir_storage::crash_point::panic_point("fetch", &fp.topic);
                let not_here = part
                    .is_none()
                    .then(|| self.not_here(&fp.topic, fp.partition));
                async move {
                    let Some(p) = part else {
                        return Err(not_here.expect("made when there is no partition"));
                    };
                    let epoch = fp.current_leader_epoch;
                    match replica {
                        Some(node) => p.read_for_follower(node, epoch, fp.offset, limit).await,
                        // Only to a replica that has the offset asked (Kafka
                        // checks the same), else read here.
                        None if fp
                            .redirect
                            .is_some_and(|(node, _)| p.follower_holds(node, fp.offset)) =>
                        {
                            p.check_serving(epoch)?;
                            Ok(PartitionRead {
                                high_watermark: p.log.high_watermark(),
                                log_start: p.log.log_start(),
                                last_stable_offset: p.log.last_stable_offset(),
                                preferred_read_replica: fp.redirect.map(|(_, broker)| broker),
                                ..Default::default()
                            })
                        }
                        None => {
                            match fp.client_rack {
                                Some(_) => p.check_follower_serving(epoch)?,
                                None => p.check_serving(epoch)?,
                            };
                            p.read(fp.offset, limit, fp.committed).await
                        }
                    }
                }
            }))
            .await;
            let mut total = 0usize;
            let mut errors = false;
            for ((i, _), mut r) in parts.iter().zip(reads) {
                match &mut r {
                    // Sent elsewhere: answered at once, as Kafka does.
                    Ok(read) if read.preferred_read_replica.is_some() => errors = true,
                    Ok(read) => {
                        if total > 0 && total + read.records.len() > budget {
                            read.records = Default::default();
                        }
                        total += read.records.len();
                    }
                    Err(_) => errors = true,
                }
                out.push((*i, r));
            }
            grant.resize_to(total);
            let now = Instant::now();
            if total >= min_bytes.max(1) as usize
                || errors
                || watches.is_empty()
                || now >= deadline
                || cancelled
                || self.is_stopping()
            {
                return (out, grant);
            }
            let timer = Box::pin(glommio::timer::sleep(deadline - now));
            // An append wakes us, or the deadline passes (the check above
            // then ends the loop), or another shard answered first: in each
            // case read once more.
            let bump = |c: &std::cell::Cell<u64>| c.set(c.get() + 1);
            bump(&self.counters.fetch_waits);
            match select(select(select_all(watches), timer), &mut cancel).await {
                Either::Left((Either::Left(_), _)) => bump(&self.counters.fetch_wakes),
                Either::Left((Either::Right(_), _)) => bump(&self.counters.fetch_expiries),
                Either::Right(_) => cancelled = true,
            }
        }
    }

    // ---- list offsets --------------------------------------------------

    /// Answers ListOffsets for partitions wherever they live: (offset,
    /// timestamp, leader epoch) for each partition's (query, the leader
    /// epoch the client knows: KIP-320-checked).
    pub async fn list_offsets(
        self: &Rc<Self>,
        work: Vec<PartitionWork<(OffsetQuery, i32)>>,
    ) -> Vec<(usize, Result<(i64, i64, i32), KafkaError>)> {
        self.on_partitions(work, |_, p, (q, known): (OffsetQuery, i32)| async move {
            let epoch = p.check_serving(known)?;
            if matches!(q, OffsetQuery::Latest | OffsetQuery::LatestStable) {
                p.check_high_watermark_known()?;
            }
            let found: Result<(i64, i64), KafkaError> = match q {
                OffsetQuery::Latest => Ok((p.log.high_watermark(), -1)),
                OffsetQuery::LatestStable => Ok((p.log.last_stable_offset(), -1)),
                // Every segment is local: the earliest local offset is the
                // log start.
                OffsetQuery::Earliest | OffsetQuery::EarliestLocal => Ok((p.log.log_start(), -1)),
                OffsetQuery::LatestTiered => Ok((-1, -1)),
                OffsetQuery::MaxTimestamp => {
                    Ok(p.log.max_timestamp_record().await?.unwrap_or((-1, -1)))
                }
                OffsetQuery::AtTime(t) => Ok(p.log.offset_for_time(t).await?.unwrap_or((-1, -1))),
            };
            let (offset, ts) = found?;
            Ok((offset, ts, epoch))
        })
        .await
    }

    /// DeleteRecords for partitions wherever they live: each moves its log
    /// start to the given offset (-1: the high watermark); answers the new
    /// low watermark.
    pub async fn delete_records(
        self: &Rc<Self>,
        work: Vec<PartitionWork<i64>>,
    ) -> Vec<(usize, Result<i64, KafkaError>)> {
        self.on_partitions(work, |_, p, offset: i64| async move {
            Ok(p.log.delete_records_before(offset)?)
        })
        .await
    }

    /// OffsetForLeaderEpoch: for each partition's `(current leader epoch,
    /// asked epoch)`, the epoch's end (`leader_epoch`), on its owner.
    pub async fn offsets_for_leader_epoch(
        self: &Rc<Self>,
        work: Vec<PartitionWork<(i32, i32)>>,
    ) -> Vec<(usize, Result<(i32, i64), KafkaError>)> {
        self.on_partitions(work, |_, p, (current, asked): (i32, i32)| async move {
            p.check_serving(current)?;
            Ok(p.log.end_offset_for(asked))
        })
        .await
    }
}

/// Each partition's read limit in one fetch: its own max bytes, handed out
/// in request order from the response's `budget`, but never below an equal
/// share of it. The reads run at once, so whatever the request asks, they
/// hold at most twice the budget before the response is cut to it.
fn read_limits(partition_max: impl ExactSizeIterator<Item = i32>, budget: usize) -> Vec<usize> {
    let share = budget / partition_max.len().max(1);
    let mut left = budget;
    partition_max
        .map(|m| {
            let limit = (m.max(0) as usize).min(left.max(share));
            left = left.saturating_sub(limit);
            limit
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::read_limits;

    #[test]
    fn list_offsets_queries_from_the_wire() {
        use super::OffsetQuery as Q;
        assert_eq!(Q::from_wire(-1, 0).unwrap(), Q::Latest);
        assert_eq!(Q::from_wire(-1, 1).unwrap(), Q::LatestStable);
        assert_eq!(Q::from_wire(-2, 0).unwrap(), Q::Earliest);
        assert_eq!(Q::from_wire(-3, 0).unwrap(), Q::MaxTimestamp);
        assert_eq!(Q::from_wire(-4, 0).unwrap(), Q::EarliestLocal);
        assert_eq!(Q::from_wire(0, 0).unwrap(), Q::AtTime(0));
        assert_eq!(
            Q::from_wire(1_700_000_000_000, 0).unwrap(),
            Q::AtTime(1_700_000_000_000)
        );
        let e = Q::from_wire(-7, 0).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::InvalidRequest);
    }

    #[test]
    fn a_fetch_reads_at_most_twice_its_budget() {
        let budget = 1000;
        // Asking for everything: the first takes the budget, the rest a share.
        let l = read_limits([i32::MAX; 4].into_iter(), budget);
        assert_eq!(l, vec![1000, 250, 250, 250]);
        // Modest asks are granted as asked.
        assert_eq!(
            read_limits([100, 0, 300].into_iter(), budget),
            vec![100, 0, 300]
        );
        for n in [1usize, 3, 7, 1000] {
            let l = read_limits(std::iter::repeat_n(i32::MAX, n), budget);
            assert!(l.iter().sum::<usize>() <= 2 * budget, "{n}: {l:?}");
            assert!(l.iter().all(|&x| x >= budget / n), "{n}: {l:?}");
        }
    }
}
