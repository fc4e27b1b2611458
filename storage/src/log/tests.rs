//! The log's tests: append, flush, read, reopen, crashes, retention.

use super::ahead::*;
use super::*;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use crate::batch::{split_produced, tests::make_batch};
use crate::batch::{BatchHeader, BatchIter};
use crate::segment::{align_up, log_path};
use crate::StorageError;

use crate::testing::flip_bit;
use crate::testing::run_local as run;

fn tmpdir(name: &str) -> PathBuf {
    // Not /tmp: tmpfs has no O_DIRECT.
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../target/test-data/log-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs `f` on an executor with a fresh log directory ready for direct
/// I/O, and removes the directory afterwards.
pub(super) fn in_log_dir<F: std::future::Future<Output = ()> + 'static>(
    name: &str,
    f: impl FnOnce(PathBuf) -> F + Send + 'static,
) {
    let dir = tmpdir(name);
    let d = dir.clone();
    run(move || async move {
        std::fs::create_dir_all(&d).unwrap();
        crate::segment::prepare_direct_io(&d).await.unwrap();
        f(d).await
    });
    let _ = std::fs::remove_dir_all(dir);
}

pub(super) fn batches(count: i32, ts: i64) -> Vec<(BatchHeader, Bytes)> {
    split_produced(&Bytes::from(make_batch(count, ts, 0))).unwrap()
}

#[test]
fn append_flush_read_reopen() {
    in_log_dir("basic", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 300,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        let mut expected = 0;
        for i in 0..20 {
            let (a, _) = log.append(&batches(3, 1000 + i), 5).await.unwrap();
            assert_eq!(a.base_offset, expected);
            expected += 3;
            // Not readable before it is durable.
            assert_eq!(
                log.high_watermark(),
                expected - 3 - if i % 2 == 1 { 3 } else { 0 }
            );
            if i % 2 == 1 {
                assert_eq!(log.flush().await.unwrap(), expected);
            }
        }
        let r = log.read(31, 1 << 20).await.unwrap();
        let first = BatchHeader::parse(&r.batches.to_bytes()).unwrap();
        assert_eq!(first.base_offset, 30);
        // A read stays within one segment; reading on covers the rest densely.
        let mut bases = Vec::new();
        let mut at = 31;
        while at < log.high_watermark() {
            let r = log.read(at, 1 << 20).await.unwrap();
            for (_, h) in BatchIter::new(&r.batches.to_bytes()) {
                bases.push(h.base_offset);
                at = h.last_offset() + 1;
            }
        }
        assert_eq!(bases, (30..60).step_by(3).collect::<Vec<i64>>());
        assert!(matches!(
            log.read(61, 10).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.offset_for_time(1010).await.unwrap(), Some((30, 1010)));
        assert_eq!(log.max_timestamp(), Some((59, 1019)));
        log.close().await.unwrap();
        drop(log);
        // A missing index is rebuilt (and written again).
        let index = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "index"))
            .expect("a sealed segment has an index file");
        std::fs::remove_file(&index).unwrap();
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert!(index.exists());
        assert_eq!(log.high_watermark(), 60);
        let r = log.read(0, 1).await.unwrap();
        assert_eq!(BatchIter::new(&r.batches.to_bytes()).count(), 1);
        // A torn tail is cut back to the last whole batch.
        let last = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .max()
            .unwrap();
        drop(log);
        let len = std::fs::metadata(&last).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        f.set_len(len - 5).unwrap();
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.high_watermark(), 57);
        let (a, _) = log.append(&batches(1, 1), 1).await.unwrap();
        assert_eq!(a.base_offset, 57);
    });
}

/// A batch from an idempotent producer.
pub(super) fn producer_batch(
    pid: i64,
    epoch: i16,
    seq: i32,
    count: i32,
) -> Vec<(BatchHeader, Bytes)> {
    let mut b = make_batch(count, 1, 0);
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    split_produced(&Bytes::from(b)).unwrap()
}

/// Reads the log from 0 to `end`: every batch starts where the one
/// before ended and is intact. Returns the most pieces one read had
/// (padding left out between batches splits a read).
async fn assert_reads_densely(log: &PartitionLog, end: i64) -> usize {
    let mut at = 0;
    let mut pieces = 0;
    while at < end {
        let r = log.read(at, 1 << 20).await.unwrap();
        pieces = pieces.max(r.batches.parts().len());
        let bytes = r.batches.to_bytes();
        let mut it = BatchIter::new(&bytes);
        for (pos, h) in it.by_ref() {
            assert!(crate::batch::crc_ok(&bytes[pos..pos + h.total_len()], &h));
            if h.last_offset() >= at {
                assert_eq!(h.base_offset, at);
                at = h.last_offset() + 1;
            }
        }
        assert_eq!(it.position(), bytes.len(), "a read holds only batches");
    }
    pieces
}

/// Appends a batch of each count, starting a flush after each and
/// keeping up to `in_flight` of them running, so each is prepared while
/// the one before it writes (they pad). Returns the log end and the
/// bytes of the batches.
async fn append_with_flushes_in_flight(
    log: &Rc<PartitionLog>,
    counts: impl Iterator<Item = i32>,
    in_flight: usize,
) -> (i64, u64) {
    let (mut end, mut stored) = (0i64, 0u64);
    let mut flushes = Vec::new();
    for (i, count) in counts.enumerate() {
        let b = batches(count, 100 + i as i64);
        stored += b.iter().map(|(h, _)| h.total_len() as u64).sum::<u64>();
        log.append(&b, 5).await.unwrap();
        end += count as i64;
        let l = log.clone();
        flushes.push(glommio::spawn_local(async move {
            l.flush_timed().await.unwrap();
        }));
        if flushes.len() == in_flight {
            flushes.remove(0).await;
        }
    }
    for f in flushes {
        f.await;
    }
    (end, stored)
}

/// Reopens the log in `d`: it ends at `end` and reads densely up to it,
/// the next batch takes `end`, and it is there after another reopen.
async fn assert_reopens_and_goes_on(d: &Path, cfg: LogConfig, end: i64) {
    let log = PartitionLog::open(d, cfg, 0).await.unwrap();
    assert_eq!(log.high_watermark(), end);
    assert_reads_densely(&log, end).await;
    let (a, _) = log.append(&batches(3, 1), 5).await.unwrap();
    assert_eq!(a.base_offset, end);
    assert_eq!(log.flush().await.unwrap(), end + 3);
    drop(log);
    let log = PartitionLog::open(d, cfg, 0).await.unwrap();
    assert_eq!(log.high_watermark(), end + 3);
    assert_reads_densely(&log, end + 3).await;
}

#[test]
fn flushes_in_flight_together_pad_and_read_back() {
    in_log_dir("padded", |d| async move {
        let cfg = LogConfig::default();
        let log = Rc::new(PartitionLog::open(&d, cfg, 0).await.unwrap());
        // 1.4-5.6 KB a batch: padding is at most a quarter of what a
        // flush adds.
        let counts = (0..60).map(|i| 200 * (1 + i % 4));
        let (end, stored) = append_with_flushes_in_flight(&log, counts, 3).await;
        assert_eq!(log.flush().await.unwrap(), end);
        assert!(log.size_bytes() > stored, "no flush was padded");
        assert!(assert_reads_densely(&log, end).await > 1);
        // One batch per read, each whole, from wherever it lies.
        for offset in 0..end {
            let r = log.read(offset, 1).await.unwrap();
            let h = BatchHeader::parse(&r.batches.to_bytes()).unwrap();
            assert!(h.base_offset <= offset && offset <= h.last_offset());
            assert_eq!(r.batches.len(), h.total_len());
        }
        drop(log);
        // Recovery scans across the padding, and appends go on after it.
        assert_reopens_and_goes_on(&d, cfg, end).await;
    });
}

/// A crash after appends rolled two segments and before any of their
/// batches was written leaves two empty segment files after the durable
/// end: recovery ends the log there, claiming no offset it never wrote
/// (a reader at such an offset would find nothing below the log end).
/// Found by the simulated disk.
#[test]
fn segments_rolled_to_but_never_written_end_the_log_where_its_data_ends() {
    in_log_dir("rolled-unwritten", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 300,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        log.append(&batches(3, 1), 5).await.unwrap();
        assert_eq!(log.flush().await.unwrap(), 3);
        // Each of these rolls a segment of its own; none is flushed.
        for i in 0..3 {
            log.append(&batches(40, 2 + i), 5).await.unwrap();
        }
        let rolled: Vec<i64> = log.state.borrow().segments.keys().copied().collect();
        assert!(rolled.len() >= 3, "no segments rolled: {rolled:?}");
        drop(log); // a crash: nothing more is written
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.log_end(), 3);
        assert_reads_densely(&log, 3).await;
        drop(log);
        assert_reopens_and_goes_on(&d, cfg, 3).await;
    });
}

#[test]
fn a_crash_before_an_earlier_flush_landed_recovers_to_before_it() {
    in_log_dir("hole", |d| async move {
        let cfg = LogConfig::default();
        let log = Rc::new(PartitionLog::open(&d, cfg, 0).await.unwrap());
        let counts = (0..40).map(|i| 300 + 100 * (i % 3));
        let (end, _) = append_with_flushes_in_flight(&log, counts, 2).await;
        assert_eq!(log.flush().await.unwrap(), end);
        drop(log);
        // As if the flush starting after the first padding never landed
        // while later ones did: its first block reads as zeros.
        let path = log_path(&d, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        let mut pos = 0usize;
        let (hole, hole_offset) = loop {
            let start = crate::batch::batch_start(&bytes[pos..], pos as u64) as usize;
            let h = BatchHeader::parse(&bytes[start..]).unwrap();
            if start != pos {
                break (start, h.base_offset);
            }
            pos = start + h.total_len();
        };
        bytes[hole..hole + 4096].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        // The log ends before the hole and goes on from there, over
        // what was after it.
        assert_reopens_and_goes_on(&d, cfg, hole_offset).await;
    });
}

#[test]
fn overlapping_flushes_make_everything_durable_in_order() {
    in_log_dir("overlap", |d| async move {
        // Small segments, so overlapping flushes also span rolls.
        let cfg = LogConfig {
            segment_bytes: 700,
            ..LogConfig::default()
        };
        let log = Rc::new(PartitionLog::open(&d, cfg, 0).await.unwrap());
        let mut flushes = Vec::new();
        let mut end = 0;
        for i in 0..40 {
            let (a, _) = log.append(&batches(2, 300 + i), 5).await.unwrap();
            assert_eq!(a.base_offset, end);
            end += 2;
            // Up to three flushes in flight: each returns only once what
            // was appended before it is durable.
            let (l, want) = (log.clone(), end);
            flushes.push(glommio::spawn_local(async move {
                let hw = l.flush().await.unwrap();
                assert!(hw >= want, "flush returned {hw} before {want} was durable");
                hw
            }));
            if flushes.len() == 3 {
                flushes.remove(0).await;
            }
        }
        for f in flushes {
            f.await;
        }
        assert_eq!(log.high_watermark(), end);
        assert!(!log.has_unwritten());
        drop(log);
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.high_watermark(), end);
        assert_reads_densely(&log, end).await;
    });
}

#[test]
fn zeros_written_ahead_never_cover_data_and_are_trimmed() {
    in_log_dir("zero-ahead", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 64 << 10,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        let file_len = |base: i64| std::fs::metadata(log_path(&d, base)).unwrap().len();
        let mut end = 0;
        let mut zeroed_once = false;
        while log.state.borrow().segments.len() < 3 {
            log.append(&batches(4, 1000 + end), 5).await.unwrap();
            end += 4;
            assert_eq!(log.flush().await.unwrap(), end);
            // Idle: zeros go ahead of the end, up to the segment limit.
            while log.zero_ahead().await.unwrap() {}
            let active = *log.state.borrow().segments.keys().next_back().unwrap();
            let (size, zeroed) = {
                let st = log.state.borrow();
                let s = &st.segments[&active];
                (s.size(), s.zeroed())
            };
            assert!(zeroed >= align_up(size) && zeroed <= align_up(64 << 10));
            zeroed_once |= zeroed > align_up(size);
            assert!(file_len(active) >= zeroed);
        }
        assert!(zeroed_once);
        // Sealed segments are cut back to their batches.
        let sealed: Vec<_> = log
            .state
            .borrow()
            .segments
            .values()
            .filter(|s| s.sealed())
            .map(|s| (s.base(), s.size()))
            .collect();
        assert!(!sealed.is_empty());
        for (base, size) in sealed {
            assert_eq!(file_len(base), size);
        }
        drop(log);
        // After a restart every record is there, densely, and the
        // zeros past the end are not batches.
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.high_watermark(), end);
        assert_reads_densely(&log, end).await;
        let (a, _) = log.append(&batches(1, 1), 5).await.unwrap();
        assert_eq!(a.base_offset, end);
    });
}

#[test]
fn space_and_zeros_ahead_grow_with_the_segment() {
    in_log_dir("ahead", |d| async move {
        let log = PartitionLog::open(&d, LogConfig::default(), 0)
            .await
            .unwrap();
        let on_disk = || {
            let st = log.state.borrow();
            let s = st.segments.values().next_back().unwrap();
            let len = std::fs::metadata(log_path(&d, s.base())).unwrap().len();
            (s.size(), s.zeroed(), len)
        };
        // A quiet partition: one small batch reserves a megabyte and
        // zeros one chunk ahead, not 32 MiB and 4 MiB.
        log.append(&batches(1, 100), 5).await.unwrap();
        log.flush().await.unwrap();
        while log.zero_ahead().await.unwrap() {}
        let (size, zeroed, len) = on_disk();
        assert!(size < 4096, "{size}");
        assert_eq!(zeroed, align_up(size) + ZERO_CHUNK_BYTES);
        assert_eq!(len, align_up(size) + PREALLOCATE_MIN_BYTES);
        // Small flushes until the segment holds ~6 MiB: the zeros reach
        // as far ahead as the segment reaches, up to 4 MiB.
        let mut end = 1;
        while on_disk().0 < 6 << 20 {
            // ~170 KiB a flush: small enough to keep zeroing ahead.
            for _ in 0..1000 {
                log.append(&batches(16, 4000 + end), 5).await.unwrap();
                end += 16;
            }
            assert_eq!(log.flush().await.unwrap(), end);
            while log.zero_ahead().await.unwrap() {}
            let (size, zeroed, len) = on_disk();
            let ahead = zeroed - align_up(size);
            let want = align_up(size).clamp(ZERO_CHUNK_BYTES, ZERO_AHEAD_BYTES);
            assert!(
                ahead >= want && ahead < want + ZERO_CHUNK_BYTES,
                "{size} {ahead}"
            );
            assert!(len >= zeroed && len <= 2 * align_up(size) + PREALLOCATE_MIN_BYTES);
        }
        let (size, zeroed, _) = on_disk();
        assert!(zeroed - align_up(size) >= ZERO_AHEAD_BYTES);
        assert_reads_densely(&log, end).await;
    });
}

#[test]
fn producer_state_survives_rolls_and_reopen() {
    in_log_dir("producers", |d| async move {
        // Small segments: the producer's batches span several, so the
        // state must come from a roll snapshot plus the active segment.
        let cfg = LogConfig {
            segment_bytes: 200,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        for i in 0..10 {
            let (a, _) = log
                .append(&producer_batch(9, 0, i * 2, 2), 1)
                .await
                .unwrap();
            assert_eq!(a.base_offset, i as i64 * 2);
        }
        log.close().await.unwrap();
        drop(log);
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.producer_count(), 1);
        // The last batch, resent: its original offsets, nothing written.
        let (a, stored) = log.append(&producer_batch(9, 0, 18, 2), 1).await.unwrap();
        assert_eq!((a.base_offset, a.last_offset, stored.len()), (18, 19, 0));
        // An older batch beyond the five remembered is out of order.
        assert!(matches!(
            log.append(&producer_batch(9, 0, 4, 2), 1).await,
            Err(StorageError::Sequence(_))
        ));
        let (a, _) = log.append(&producer_batch(9, 0, 20, 1), 1).await.unwrap();
        assert_eq!(a.base_offset, 20);
    });
}

#[test]
fn delete_records_moves_start_durably() {
    in_log_dir("delete-records", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 200,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        for _ in 0..10 {
            log.append(&batches(2, 1), 1).await.unwrap();
            log.flush().await.unwrap();
        }
        assert_eq!(log.delete_records_before(7).unwrap(), 7);
        assert!(matches!(
            log.read(6, 100).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // The batch holding 7 starts at 6: it is returned whole, as Kafka does.
        assert_eq!(
            BatchHeader::parse(&log.read(7, 100).await.unwrap().batches.to_bytes())
                .unwrap()
                .base_offset,
            6
        );
        assert!(log.delete_records_before(21).is_err());
        assert_eq!(
            log.delete_records_before(3).unwrap(),
            7,
            "the start never moves back"
        );
        log.close().await.unwrap();
        drop(log);
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.log_start(), 7);
        assert_eq!(log.delete_records_before(-1).unwrap(), 20);
    });
}

#[test]
fn retention_by_bytes_moves_start() {
    in_log_dir("retention", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 200,
            retention_bytes: 400,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        for _ in 0..30 {
            log.append(&batches(2, 1), 1).await.unwrap();
            log.flush().await.unwrap();
        }
        assert!(log.enforce_retention(2) > 0);
        assert!(log.log_start() > 0);
        assert!(log.size_bytes() >= 400);
        assert!(matches!(
            log.read(0, 10).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        let start = log.log_start();
        assert_eq!(
            BatchHeader::parse(&log.read(start, 10).await.unwrap().batches.to_bytes())
                .unwrap()
                .base_offset,
            start
        );
    });
}

/// Appends one batch at a time, each after the previous one was durable:
/// between them the log goes idle and its flushers zero ahead, so a batch
/// often arrives while every flusher is zeroing. Each must still be
/// flushed and its appender answered (a lost flusher once left such a
/// batch waiting for the next append).
#[test]
fn every_appender_is_answered_when_appends_arrive_during_zeroing() {
    in_log_dir("acks-zeroing", |d| async move {
        let log = Rc::new(
            PartitionLog::open(&d, LogConfig::default(), 0)
                .await
                .unwrap(),
        );
        log.set_flushing(2, |_| {});
        for i in 0..300i64 {
            let (a, _) = log.append(&batches(1, i), 0).await.unwrap();
            assert_eq!(a.base_offset, i);
            let durable = futures::future::select(
                Box::pin(log.durable_past(a.last_offset)),
                Box::pin(glommio::timer::sleep(std::time::Duration::from_secs(10))),
            )
            .await;
            match durable {
                futures::future::Either::Left((r, _)) => r.unwrap(),
                futures::future::Either::Right(_) => {
                    panic!("offset {i} was not durable within 10 s")
                }
            }
            assert!(log.high_watermark() > a.last_offset);
        }
        assert_eq!(log.high_watermark(), 300);
    });
}

/// The watermark the flushers publish: a watcher wakes when it moves, an
/// appender is answered only once it passed the appender's last offset,
/// and `close` answers what is still waiting.
#[test]
fn watchers_wake_when_the_watermark_moves() {
    in_log_dir("watermark", |d| async move {
        let log = Rc::new(
            PartitionLog::open(&d, LogConfig::default(), 0)
                .await
                .unwrap(),
        );
        let moved = log.watch();
        let (a, _) = log.append(&batches(4, 1), 0).await.unwrap();
        // Nothing moves until a flush lands: not even after a yield.
        glommio::executor().yield_task_queue_now().await;
        assert_eq!(log.high_watermark(), 0);
        log.durable_past(a.last_offset).await.unwrap();
        moved.await.expect("woken when the watermark moved");
        assert_eq!(log.high_watermark(), 4);
        // An appender that does not wait (acks=0) is still flushed, and
        // close answers one registered after it.
        let (b, _) = log.append(&batches(2, 2), 0).await.unwrap();
        log.flush_soon();
        let waiting = log.durable_past(b.last_offset);
        log.close().await.unwrap();
        waiting.await.unwrap();
        assert_eq!(log.high_watermark(), 6);
    });
}

/// A flush called directly (a shard retrying after a failed write) that
/// takes everything the flushers would have written answers their
/// appenders: the flusher finds nothing left, publishes the watermark it
/// had, and stops, so no one else would. (Found by the simulated disk.)
#[test]
fn a_direct_flush_answers_the_appenders_it_made_durable() {
    in_log_dir("direct-flush", |d| async move {
        use futures::FutureExt;
        let log = Rc::new(
            PartitionLog::open(&d, LogConfig::default(), 0)
                .await
                .unwrap(),
        );
        let (a, _) = log.append(&batches(4, 1), 0).await.unwrap();
        // Starts a flusher task; it has not run yet.
        let first = log.durable_past(a.last_offset);
        let (b, _) = log.append(&batches(2, 2), 0).await.unwrap();
        // One flusher at most: this one starts none.
        let second = log.durable_past(b.last_offset);
        assert_eq!(log.flush().await.unwrap(), 6);
        glommio::executor().yield_task_queue_now().await;
        let answered = |r: Option<Result<(), StorageError>>| matches!(r, Some(Ok(())));
        assert!(
            answered(first.now_or_never()),
            "the first appender was not answered"
        );
        assert!(
            answered(second.now_or_never()),
            "the second appender was not answered"
        );
    });
}

/// A transactional batch of `count` records from producer `pid`.
pub(super) fn txn_batch(pid: i64, seq: i32, count: i32) -> Vec<(BatchHeader, Bytes)> {
    let mut b = make_batch(count, 1000, crate::batch::ATTR_TRANSACTIONAL);
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    split_produced(&Bytes::from(b)).unwrap()
}

pub(super) fn marker(pid: i64, m: crate::batch::Marker) -> Vec<(BatchHeader, Bytes)> {
    let b = crate::records::build_marker_batch(m, pid, 0, 0, 1000);
    vec![(BatchHeader::parse(&b).unwrap(), b)]
}

/// An open transaction holds the last stable offset at its first batch;
/// its abort marker, once durable, releases it and lists it as aborted;
/// both survive a reopen (rebuilt by the recovery scan).
#[test]
fn transactions_move_the_last_stable_offset_and_survive_reopen() {
    use crate::batch::Marker;
    in_log_dir("txn", |d| async move {
        let log = PartitionLog::open(&d, LogConfig::default(), 0)
            .await
            .unwrap();
        log.append(&txn_batch(7, 0, 3), 5).await.unwrap(); // 0-2
        log.append(&batches(1, 1000), 5).await.unwrap(); // 3
        log.flush().await.unwrap();
        assert_eq!((log.high_watermark(), log.last_stable_offset()), (4, 0));
        assert!(log
            .read_below(0, 1 << 20, 0)
            .await
            .unwrap()
            .batches
            .is_empty());
        assert_eq!(log.open_transaction(7), Some(0));
        log.append(&marker(7, Marker::Abort), 5).await.unwrap(); // 4
                                                                 // Not durable yet: still held.
        assert_eq!(log.last_stable_offset(), 0);
        log.flush().await.unwrap();
        assert_eq!((log.high_watermark(), log.last_stable_offset()), (5, 5));
        let aborted = log.aborted_between(0, 5);
        assert_eq!(aborted.len(), 1);
        assert_eq!((aborted[0].first_offset, aborted[0].last_offset), (0, 4));
        log.append(&txn_batch(8, 0, 2), 5).await.unwrap(); // 5-6, open
        log.append(&batches(1, 1000), 5).await.unwrap(); // 7
        log.flush().await.unwrap();
        // A read below the stable offset stops before the open transaction.
        let r = log
            .read_below(0, 1 << 20, log.last_stable_offset())
            .await
            .unwrap();
        let last = BatchIter::new(&r.batches.to_bytes()).last().unwrap().1;
        assert_eq!(last.last_offset(), 4);
        log.close().await.unwrap();
        drop(log);
        let log = PartitionLog::open(&d, LogConfig::default(), 0)
            .await
            .unwrap();
        assert_eq!((log.high_watermark(), log.last_stable_offset()), (8, 5));
        assert_eq!(log.aborted_between(0, 8).len(), 1);
        log.append(&marker(8, Marker::Commit), 5).await.unwrap(); // 8
        log.flush().await.unwrap();
        assert_eq!(log.last_stable_offset(), 9);
        assert_eq!(log.aborted_between(0, 9).len(), 1);
    });
}

/// A marker from an older coordinator than one that already wrote a
/// marker for the producer is refused (TRANSACTION_COORDINATOR_FENCED),
/// after a reopen too (the producer snapshot and the recovery scan keep
/// the epoch); a newer coordinator's is taken.
#[test]
fn a_deposed_coordinators_marker_is_refused() {
    use crate::batch::Marker;
    use crate::producer_state::SequenceError;
    fn marker_of(pid: i64, coordinator_epoch: i32) -> Vec<(BatchHeader, Bytes)> {
        let b = crate::records::build_marker_batch(Marker::Commit, pid, 0, coordinator_epoch, 1000);
        vec![(BatchHeader::parse(&b).unwrap(), b)]
    }
    in_log_dir("txn-fenced", |d| async move {
        let log = PartitionLog::open(&d, LogConfig::default(), 0)
            .await
            .unwrap();
        log.append(&txn_batch(7, 0, 1), 5).await.unwrap();
        log.append(&marker_of(7, 4), 5).await.unwrap();
        log.append(&txn_batch(7, 1, 1), 5).await.unwrap();
        let fenced = |r: Result<_, StorageError>| {
            assert!(
                matches!(
                    r,
                    Err(StorageError::Sequence(SequenceError::CoordinatorFenced {
                        current: 4,
                        got: 3
                    }))
                ),
                "{r:?}"
            )
        };
        fenced(log.append(&marker_of(7, 3), 5).await.map(|_| ()));
        assert_eq!(log.open_transaction(7), Some(2));
        log.flush().await.unwrap();
        log.close().await.unwrap();
        drop(log);
        let log = PartitionLog::open(&d, LogConfig::default(), 0)
            .await
            .unwrap();
        fenced(log.append(&marker_of(7, 3), 5).await.map(|_| ()));
        log.append(&marker_of(7, 5), 5).await.unwrap();
        assert_eq!(log.open_transaction(7), None);
    });
}

/// Retention removes nothing at or past the last stable offset: an open
/// transaction's segments stay until its marker is durable.
#[test]
fn retention_keeps_what_an_open_transaction_holds() {
    use crate::batch::Marker;
    in_log_dir("txn-retention", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 300,
            retention_bytes: 0,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        log.append(&txn_batch(7, 0, 2), 5).await.unwrap(); // 0-1, open
        for i in 0..10 {
            log.append(&batches(3, 1000 + i), 5).await.unwrap();
            log.flush().await.unwrap();
        }
        assert_eq!(log.last_stable_offset(), 0);
        assert_eq!(log.enforce_retention(10), 0);
        assert_eq!(log.log_start(), 0);
        log.append(&marker(7, Marker::Abort), 5).await.unwrap();
        log.flush().await.unwrap();
        assert_eq!(log.last_stable_offset(), log.high_watermark());
        assert!(log.enforce_retention(10) > 0);
        assert!(log.log_start() > 0);
    });
}

/// The clean-stop state file of the log's last segment in `d`.
fn clean_file(d: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "clean"))
        .collect();
    assert!(found.len() <= 1, "one clean-stop state at most: {found:?}");
    found.pop().unwrap_or_default()
}

#[test]
fn a_clean_stop_is_loaded_once_and_a_stale_or_damaged_state_is_not_trusted() {
    in_log_dir("clean-stop", |d| async move {
        let cfg = LogConfig::default();
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        for i in 0..10 {
            log.append(&producer_batch(7, 0, i * 3, 3), 1)
                .await
                .unwrap();
        }
        log.close().await.unwrap();
        drop(log);
        let state = clean_file(&d);
        let saved = std::fs::read(&state).unwrap();
        // Loaded: the same end, timestamps and producers; the file is gone.
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert!(!state.exists(), "a clean-stop state is used once");
        assert_eq!(log.high_watermark(), 30);
        assert_eq!(log.producer_count(), 1);
        assert_reads_densely(&log, 30).await;
        let (a, stored) = log.append(&producer_batch(7, 0, 27, 3), 1).await.unwrap();
        assert_eq!(
            (a.base_offset, stored.len()),
            (27, 0),
            "a duplicate is known"
        );
        // More records, then a crash (no close): the old state put back
        // must not hide them.
        log.append(&producer_batch(7, 0, 30, 3), 1).await.unwrap();
        assert_eq!(log.flush().await.unwrap(), 33);
        drop(log);
        std::fs::write(&state, &saved).unwrap();
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.high_watermark(), 33, "a stale state is not trusted");
        assert_reads_densely(&log, 33).await;
        log.close().await.unwrap();
        drop(log);
        // A damaged state is ignored: the segment is scanned.
        let mut bad = std::fs::read(clean_file(&d)).unwrap();
        bad[20] ^= 0x40;
        std::fs::write(clean_file(&d), &bad).unwrap();
        assert_reopens_and_goes_on(&d, cfg, 33).await;
        assert_eq!(clean_file(&d), PathBuf::new(), "no state left behind");
    });
}

/// A log of 12 three-record batches in segments of at most 300 bytes,
/// closed: the segments' bases.
async fn closed_log_of_segments(d: &Path, cfg: LogConfig) -> Vec<i64> {
    let log = PartitionLog::open(d, cfg, 0).await.unwrap();
    for i in 0..12 {
        log.append(&batches(3, 1000 + i), 5).await.unwrap();
        log.flush().await.unwrap();
    }
    log.close().await.unwrap();
    drop(log);
    let mut bases: Vec<i64> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log").and_then(|b| b.parse().ok())
        })
        .collect();
    bases.sort();
    assert!(bases.len() >= 3, "{bases:?}");
    bases
}

#[test]
fn a_damaged_index_is_rebuilt_and_a_damaged_segment_costs_nothing_after_it() {
    in_log_dir("damaged-index", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 300,
            ..LogConfig::default()
        };
        let bases = closed_log_of_segments(&d, cfg).await;
        // An index entry's bit flipped: the CRC trailer catches it, the
        // segment is scanned and its index written again.
        let idx = crate::segment::index_path(&d, bases[0]);
        let before = std::fs::read(&idx).unwrap();
        flip_bit(&idx, 9);
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(std::fs::read(&idx).unwrap(), before);
        assert_reads_densely(&log, 36).await;
        log.close().await.unwrap();
        drop(log);

        // A batch of a middle segment damaged and its index files gone: the
        // scan stops at the damage, but the file is kept whole, the later
        // segments stay, and only the damaged offsets are refused.
        let damaged = bases[1];
        let path = log_path(&d, damaged);
        flip_bit(&path, 40);
        std::fs::remove_file(crate::segment::index_path(&d, damaged)).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        assert_eq!(log.high_watermark(), 36);
        for offset in [damaged, bases[2] - 1] {
            match log.read(offset, 1 << 20).await {
                Err(StorageError::Corrupt(why)) => assert!(why.contains("damaged"), "{why}"),
                other => panic!("offset {offset} of a damaged segment: {other:?}"),
            }
        }
        let r = log.read(bases[2], 1 << 20).await.unwrap();
        assert_eq!(
            BatchHeader::parse(&r.batches.to_bytes())
                .unwrap()
                .base_offset,
            bases[2]
        );
        let r = log.read(0, 1 << 20).await.unwrap();
        assert_eq!(
            BatchHeader::parse(&r.batches.to_bytes())
                .unwrap()
                .base_offset,
            0
        );
        // Appends go on after the end.
        let (a, _) = log.append(&batches(3, 1), 5).await.unwrap();
        assert_eq!(a.base_offset, 36);
    });
}

#[test]
fn a_damaged_batch_in_a_closed_segment_is_never_served() {
    in_log_dir("corrupt", |d| async move {
        let cfg = LogConfig {
            segment_bytes: 300,
            ..LogConfig::default()
        };
        // A bit flipped in the CRC-covered header of the first batch of a
        // sealed segment in the middle of the log (its index files agree
        // with its size, so opening does not scan it).
        let bases = closed_log_of_segments(&d, cfg).await;
        let damaged = bases[1];
        flip_bit(&log_path(&d, damaged), 40);

        let log = PartitionLog::open(&d, cfg, 0).await.unwrap();
        assert_eq!(log.high_watermark(), 36);
        // Everything before the damage reads as written.
        let mut at = 0;
        while at < damaged {
            let r = log.read(at, 1 << 20).await.unwrap();
            for (_, h) in BatchIter::new(&r.batches.to_bytes()) {
                assert!(h.base_offset < damaged);
                at = h.last_offset() + 1;
            }
        }
        // The damaged batch is refused, every time, and counted once.
        for _ in 0..2 {
            match log.read(damaged, 1 << 20).await {
                Err(StorageError::Corrupt(why)) => {
                    assert!(why.contains("CRC-32C"), "{why}");
                    assert!(why.contains(&format!("offset {damaged}")), "{why}");
                }
                other => panic!("a damaged batch was answered with {other:?}"),
            }
        }
        assert_eq!(log.corrupt_batches(), 1);
        // What follows it is served.
        let r = log.read(damaged + 3, 1 << 20).await.unwrap();
        let first = BatchHeader::parse(&r.batches.to_bytes()).unwrap();
        assert_eq!(first.base_offset, damaged + 3);
        assert!(crate::batch::crc_ok(
            &r.batches.to_bytes()[..first.total_len()],
            &first
        ));
    });
}
