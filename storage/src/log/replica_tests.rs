//! Replication's tests: the high watermark apart from the durable end,
//! follower appends, leader epochs and truncation.

use super::tests::{batches, in_log_dir, marker, producer_batch, txn_batch};
use super::*;
use std::rc::Rc;

use bytes::Bytes;
use futures::FutureExt;

use crate::batch::{BatchHeader, BatchIter, Marker};
use crate::StorageError;

/// Every batch of `log` from `from` up to its durable end (a follower's
/// reads), as stored.
async fn stored(log: &PartitionLog, from: i64) -> Vec<(BatchHeader, Bytes)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < log.durable_end() {
        let r = log.read_replica(at, 1 << 20).await.unwrap();
        let bytes = r.batches.to_bytes();
        for (pos, h) in BatchIter::new(&bytes) {
            out.push((h, bytes.slice(pos..pos + h.total_len())));
            at = h.last_offset() + 1;
        }
    }
    out
}

/// (base, last) of every batch readable below the high watermark.
async fn offsets(log: &PartitionLog) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = log.log_start();
    while at < log.high_watermark() {
        let r = log.read(at, 1 << 20).await.unwrap();
        for (_, h) in BatchIter::new(&r.batches.to_bytes()) {
            out.push((h.base_offset, h.last_offset()));
            at = h.last_offset() + 1;
        }
    }
    out
}

fn yielded<T>(rx: &mut futures::channel::oneshot::Receiver<T>) -> bool {
    matches!(rx.now_or_never(), Some(Ok(_)))
}

#[test]
fn a_replicated_high_watermark_bounds_reads_apart_from_the_durable_end() {
    in_log_dir("repl-hw", |d| async move {
        let log = Rc::new(
            PartitionLog::open(&d, LogConfig::default(), 0)
                .await
                .unwrap(),
        );
        // Unreplicated: one event for both watchers, as before.
        let mut w = log.watch();
        let mut wd = log.watch_durable();
        for i in 0..4 {
            log.append(&batches(1, i), 0).await.unwrap();
        }
        assert_eq!(log.flush().await.unwrap(), 4);
        assert_eq!((log.high_watermark(), log.durable_end()), (4, 4));
        assert!(yielded(&mut w) && yielded(&mut wd));
        assert!(!log.is_replicated());
        log.set_high_watermark(1); // nothing for an unreplicated log
        assert_eq!(log.high_watermark(), 4);

        log.set_replicated(2);
        assert_eq!((log.high_watermark(), log.durable_end()), (2, 4));
        assert_eq!(offsets(&log).await, vec![(0, 0), (1, 1)]);
        assert!(matches!(
            log.read(3, 1 << 20).await,
            Err(StorageError::OffsetOutOfRange {
                high_watermark: 2,
                ..
            })
        ));
        assert_eq!(log.read(2, 1 << 20).await.unwrap().batches.len(), 0);
        // A follower's read goes to the durable end and carries the HW.
        let r = log.read_replica(3, 1 << 20).await.unwrap();
        assert_eq!(BatchIter::new(&r.batches.to_bytes()).count(), 1);
        assert_eq!(r.high_watermark, 2);
        let r = log.read_replica(2, 1 << 20).await.unwrap();
        assert_eq!(BatchIter::new(&r.batches.to_bytes()).count(), 2);
        assert_eq!(log.read_replica(4, 10).await.unwrap().batches.len(), 0);
        assert!(matches!(
            log.read_replica(5, 10).await,
            Err(StorageError::OffsetOutOfRange {
                high_watermark: 4,
                ..
            })
        ));
        assert!(log.read_below(3, 1 << 20, 10).await.is_err());
        assert_eq!(log.last_stable_offset(), 2);

        // A flush wakes the durable watchers only.
        let mut w = log.watch();
        let mut wd = log.watch_durable();
        let (a, _) = log.append(&batches(1, 9), 0).await.unwrap();
        log.durable_past(a.last_offset).await.unwrap();
        glommio::executor().yield_task_queue_now().await;
        assert!(yielded(&mut wd));
        assert!(!yielded(&mut w));
        assert_eq!((log.high_watermark(), log.durable_end()), (2, 5));
        // Lower values are ignored; higher ones clamp to the durable end
        // and wake the readers.
        let mut w = log.watch();
        log.set_high_watermark(1);
        log.set_high_watermark(2);
        assert!(!yielded(&mut w));
        let mut w = log.watch();
        log.set_high_watermark(100);
        assert!(yielded(&mut w));
        assert_eq!(log.high_watermark(), 5);
        assert_eq!(offsets(&log).await.len(), 5);
        assert_eq!(log.delete_records_before(-1).unwrap(), 5);
    });
}

#[test]
fn a_follower_keeps_its_leaders_batches_and_producers() {
    in_log_dir("repl-append", |d| async move {
        let (ld, fd) = (d.join("leader"), d.join("follower"));
        let cfg = LogConfig {
            segment_bytes: 400,
            ..LogConfig::default()
        };
        for dir in [&ld, &fd] {
            std::fs::create_dir_all(dir).unwrap();
            crate::segment::prepare_direct_io(dir).await.unwrap();
        }
        let leader = PartitionLog::open(&ld, cfg, 0).await.unwrap();
        let follower = PartitionLog::open(&fd, cfg, 0).await.unwrap();
        leader.append(&batches(3, 1), 1).await.unwrap();
        leader.set_leader_epoch(4).unwrap();
        assert_eq!(leader.epoch_entries(), vec![(0, 0), (4, 3)]);
        let mut dup = None;
        for s in 0..6 {
            let (a, _) = leader
                .append(&producer_batch(7, 0, 2 * s, 2), 1)
                .await
                .unwrap();
            dup = Some(a);
        }
        let dup = dup.unwrap();
        leader.append(&txn_batch(9, 0, 2), 1).await.unwrap();
        leader.set_leader_epoch(6).unwrap();
        leader.append(&marker(9, Marker::Abort), 1).await.unwrap();
        leader.append(&txn_batch(11, 0, 1), 1).await.unwrap();
        leader.flush().await.unwrap();
        let all = stored(&leader, 0).await;

        // Only copies of the epoch it follows in are taken.
        let refused = |r: Result<_, StorageError>| match r {
            Err(StorageError::NotLeader(why)) => why,
            other => panic!("{other:?}"),
        };
        let why = refused(follower.append_replica(&all[..1], 6, 5).await);
        assert!(why.contains("is not following"), "{why}");
        follower.stop_leading(6);
        let why = refused(follower.append_replica(&all[..1], 5, 5).await);
        assert!(why.contains("follows in leader epoch 6 now"), "{why}");
        assert_eq!(follower.log_end(), 0);
        // In two fetches; a gap and an overlap are refused, whole.
        let (first, rest) = all.split_at(4);
        follower.append_replica(first, 6, 5).await.unwrap();
        let gap = follower.append_replica(&rest[1..], 6, 5).await;
        match gap {
            Err(StorageError::Corrupt(why)) => assert!(
                why.contains(&format!(
                    "expected a batch at offset {}",
                    rest[0].0.base_offset
                )),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(follower.append_replica(&all[..1], 6, 5).await.is_err());
        assert_eq!(follower.log_end(), rest[0].0.base_offset);
        let (a, out) = follower.append_replica(rest, 6, 5).await.unwrap();
        assert_eq!(a.base_offset, rest[0].0.base_offset);
        assert_eq!(a.last_offset, leader.log_end() - 1);
        assert_eq!(out.len(), rest.len());
        follower.flush().await.unwrap();
        // Byte for byte, offsets and epochs as the leader stored them.
        let copied = stored(&follower, 0).await;
        assert_eq!(copied, all);
        assert_eq!(follower.epoch_entries(), leader.epoch_entries());
        assert_eq!(follower.end_offset_for(4), (4, 17));
        // Producers and transactions carried over.
        assert_eq!(follower.open_transaction(11), leader.open_transaction(11));
        assert_eq!(
            follower.aborted_between(0, 100),
            leader.aborted_between(0, 100)
        );
        assert_eq!(follower.last_stable_offset(), leader.last_stable_offset());
        // After a failover (this follower leads in epoch 7), a resend of
        // an early batch is a duplicate answered with its original offsets.
        follower.set_leader_epoch(7).unwrap();
        let (again, stored_again) = follower
            .append(&producer_batch(7, 0, 10, 2), 9)
            .await
            .unwrap();
        assert_eq!(
            (again.base_offset, again.last_offset),
            (dup.base_offset, dup.last_offset)
        );
        assert!(stored_again.is_empty());
        // Reopened: the same batches, producers and epochs.
        let summary = follower.producers();
        follower.close().await.unwrap();
        drop(follower);
        let follower = PartitionLog::open(&fd, cfg, 0).await.unwrap();
        assert_eq!(stored(&follower, 0).await, all);
        assert_eq!(follower.producers(), summary);
        // Epoch 7 began at the log end and has no batch: opening drops it,
        // as Kafka's truncateFromEnd(logEndOffset) at load does.
        assert_eq!(follower.epoch_entries(), leader.epoch_entries());
        assert_eq!(follower.leader_epoch(), 6);
    });
}

/// A log of one-record batches from producer 7 (sequence = offset), in
/// segments of about four batches.
async fn log_of(d: &std::path::Path, cfg: LogConfig, n: i32) -> PartitionLog {
    let log = PartitionLog::open(d, cfg, 0).await.unwrap();
    for seq in 0..n {
        if seq == 10 {
            log.set_leader_epoch(2).unwrap();
        }
        if seq == 16 {
            log.set_leader_epoch(5).unwrap();
        }
        let (a, _) = log.append(&producer_batch(7, 0, seq, 1), 1).await.unwrap();
        assert_eq!(a.base_offset, seq as i64);
        if seq % 3 == 0 {
            log.flush().await.unwrap();
        }
    }
    log.flush().await.unwrap();
    log
}

/// Truncates to `to`, then checks the log ends there, its producer state
/// takes the sequence at `to` again, more appends and a reopen read back.
async fn truncate_and_check(d: &std::path::Path, cfg: LogConfig, log: PartitionLog, to: i64) {
    log.stop_leading(9);
    log.truncate_to(to, 9).await.unwrap();
    assert_eq!((log.log_end(), log.durable_end()), (to, to));
    assert!(log.high_watermark() <= to);
    assert_eq!(
        offsets(&log).await,
        (0..to).map(|o| (o, o)).collect::<Vec<_>>()
    );
    assert!(log.epoch_entries().iter().all(|&(_, s)| s < to));
    // A copy or truncation of another epoch is refused.
    assert!(matches!(
        log.truncate_to(0, 8).await,
        Err(StorageError::NotLeader(_))
    ));
    // This follower becomes the leader.
    log.set_leader_epoch(9).unwrap();
    assert!(matches!(
        log.truncate_to(0, 9).await,
        Err(StorageError::NotLeader(_))
    ));
    // A sequence appended after the cut is new again.
    let (a, _) = log
        .append(&producer_batch(7, 0, to as i32, 1), 2)
        .await
        .unwrap();
    assert_eq!(a.base_offset, to);
    // ... and the one before it a duplicate.
    if to > 0 {
        let (dup, _) = log
            .append(&producer_batch(7, 0, to as i32 - 1, 1), 2)
            .await
            .unwrap();
        assert_eq!(dup.base_offset, to - 1);
    }
    for seq in to + 1..to + 8 {
        log.append(&producer_batch(7, 0, seq as i32, 1), 2)
            .await
            .unwrap();
    }
    log.flush().await.unwrap();
    // (The followers caught up, for a replicated log.)
    log.set_high_watermark(i64::MAX);
    let want: Vec<_> = (0..to + 8).map(|o| (o, o)).collect();
    assert_eq!(offsets(&log).await, want);
    let (summary, epochs) = (log.producers(), log.epoch_entries());
    drop(log);
    let log = PartitionLog::open(d, cfg, 0).await.unwrap();
    assert_eq!(offsets(&log).await, want);
    assert_eq!(log.producers(), summary);
    assert_eq!(log.epoch_entries(), epochs);
    let (a, _) = log
        .append(&producer_batch(7, 0, (to + 8) as i32, 1), 3)
        .await
        .unwrap();
    assert_eq!(a.base_offset, to + 8);
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    }
}

#[test]
fn truncation_inside_the_active_segment() {
    in_log_dir("trunc-active", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 1000,
            ..LogConfig::default()
        };
        let log = log_of(&d, cfg, 25).await;
        let to = log.log_end() - 3;
        assert!(to > log.active_base() && log.active_base() > 0);
        log.set_replicated(24);
        truncate_and_check(&d, cfg, log, to).await;
    });
}

#[test]
fn truncation_at_a_segment_boundary() {
    in_log_dir("trunc-boundary", |d| async move {
        let log = log_of(&d, small(), 22).await;
        let to = log.active_base();
        truncate_and_check(&d, small(), log, to).await;
    });
}

#[test]
fn truncation_across_several_segments_and_epochs() {
    in_log_dir("trunc-many", |d| async move {
        let log = log_of(&d, small(), 22).await;
        assert_eq!(log.epoch_entries(), vec![(0, 0), (2, 10), (5, 16)]);
        let segments = |d: &std::path::Path| {
            std::fs::read_dir(d)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "log")
                })
                .count()
        };
        let before = segments(&d);
        // Inside a sealed segment (not at its base).
        let base_of_9 = {
            let st = log.state.borrow();
            *st.segments.range(..=9).next_back().unwrap().0
        };
        let to = if base_of_9 == 9 { 10 } else { 9 };
        log.stop_leading(9);
        log.truncate_to(to, 9).await.unwrap();
        assert!(segments(&d) < before);
        assert_eq!(log.epoch_entries(), vec![(0, 0)]);
        assert_eq!(log.end_offset_for(0), (0, to));
        assert_eq!(log.end_offset_for(2), (-1, -1));
        // Below the log start: refused. At or past the end: nothing.
        log.stop_leading(9);
        log.truncate_to(100, 9).await.unwrap();
        assert_eq!(log.log_end(), to);
        truncate_and_check(&d, small(), log, to).await;
        let log = PartitionLog::open(&d, small(), 0).await.unwrap();
        log.delete_records_before(2).unwrap();
        log.stop_leading(9);
        assert!(matches!(
            log.truncate_to(1, 9).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // To the log start: nothing is left but the start.
        log.stop_leading(9);
        log.truncate_to(2, 9).await.unwrap();
        assert_eq!((log.log_start(), log.log_end()), (2, 2));
        drop(log);
        let log = PartitionLog::open(&d, small(), 0).await.unwrap();
        assert_eq!((log.log_start(), log.log_end()), (2, 2));
        assert!(log.epoch_entries().is_empty());
    });
}

/// An offset inside a batch cuts at that batch's start, never lower.
#[test]
fn truncation_inside_a_batch_cuts_at_its_start() {
    in_log_dir("trunc-inside", |d| async move {
        let log = PartitionLog::open(&d, small(), 0).await.unwrap();
        for _ in 0..3 {
            log.append(&batches(3, 1), 1).await.unwrap();
        }
        log.flush().await.unwrap();
        log.stop_leading(9);
        log.truncate_to(4, 9).await.unwrap();
        assert_eq!(log.log_end(), 3);
        assert_eq!(offsets(&log).await, vec![(0, 2)]);
    });
}

/// A crash inside a truncation (the later segments removed, the cut one
/// not yet cut) reopens to a prefix, and the epoch cache follows it.
#[test]
fn a_truncation_cut_short_reopens_to_a_prefix() {
    in_log_dir("trunc-crash", |d| async move {
        let log = log_of(&d, small(), 22).await;
        let last = log.active_base();
        log.close().await.unwrap();
        drop(log);
        // As truncate_to leaves it after removing the last segment's log
        // file only (its clean-stop state and snapshot left behind).
        std::fs::remove_file(crate::segment::log_path(&d, last)).unwrap();
        let log = PartitionLog::open(&d, small(), 0).await.unwrap();
        assert_eq!(log.log_end(), last);
        assert_eq!(
            offsets(&log).await,
            (0..last).map(|o| (o, o)).collect::<Vec<_>>()
        );
        assert!(log.epoch_entries().iter().all(|&(_, s)| s < last));
        assert!(!crate::segment::clean_path(&d, last).exists());
        // The producer state as of the new end: the next sequence goes on.
        let (a, _) = log
            .append(&producer_batch(7, 0, last as i32, 1), 1)
            .await
            .unwrap();
        assert_eq!(a.base_offset, last);
    });
}

/// Kafka's truncateFullyAndStartAt: a follower whose log ends below its
/// leader's log start empties its log and starts again there; the
/// leader's batches from its start then copy in, and all of it reopens.
#[test]
fn a_follower_behind_its_leaders_start_starts_over_there() {
    in_log_dir("start-over", |d| async move {
        let (ld, fd) = (d.join("leader"), d.join("follower"));
        for dir in [&ld, &fd] {
            std::fs::create_dir_all(dir).unwrap();
            crate::segment::prepare_direct_io(dir).await.unwrap();
        }
        let leader = log_of(&ld, small(), 30).await;
        let follower = PartitionLog::open(&fd, small(), 0).await.unwrap();
        follower.stop_leading(5);
        follower.set_replicated(0);
        let early = stored(&leader, 0).await;
        follower.append_replica(&early[..5], 5, 1).await.unwrap();
        follower.flush().await.unwrap();
        // The leader deletes what the follower has not copied yet.
        assert_eq!(leader.delete_records_before(20).unwrap(), 20);
        // Only in the epoch it follows in, and only past its end.
        assert!(matches!(
            follower.start_over_at(20, 4).await,
            Err(StorageError::NotLeader(_))
        ));
        assert!(matches!(
            follower.start_over_at(3, 5).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        follower.start_over_at(20, 5).await.unwrap();
        assert_eq!(
            (
                follower.log_start(),
                follower.log_end(),
                follower.high_watermark()
            ),
            (20, 20, 20)
        );
        assert!(follower.epoch_entries().is_empty());
        assert!(follower.producers().is_empty());
        let rest = stored(&leader, 20).await;
        follower.append_replica(&rest, 5, 1).await.unwrap();
        follower.flush().await.unwrap();
        follower.set_high_watermark(30);
        assert_eq!(
            offsets(&follower).await,
            (20..30).map(|o| (o, o)).collect::<Vec<_>>()
        );
        assert_eq!(follower.epoch_entries(), vec![(5, 20)]);
        follower.close().await.unwrap();
        drop(follower);
        let follower = PartitionLog::open(&fd, small(), 0).await.unwrap();
        assert_eq!((follower.log_start(), follower.log_end()), (20, 30));
        assert_eq!(stored(&follower, 20).await, rest);
        assert_eq!(follower.epoch_entries(), vec![(5, 20)]);
    });
}
