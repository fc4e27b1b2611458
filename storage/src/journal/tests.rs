//! The journal's tests: acknowledged records come back after every
//! unsynced segment write is lost, a torn last write is not replayed,
//! forgets drop earlier records, and files are taken in turn.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::*;
use crate::batch::{split_produced, tests::make_batch, BatchHeader, BatchIter};
use crate::log::{LogConfig, PartitionLog};
use crate::testing::run_local as run;

fn tmpdir(name: &str) -> PathBuf {
    // Not /tmp: tmpfs has no O_DIRECT.
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../target/test-data/journal-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn batches(count: i32, ts: i64) -> Vec<(BatchHeader, Bytes)> {
    split_produced(&Bytes::from(make_batch(count, ts, 0))).unwrap()
}

/// Runs `f` on an executor with a fresh data directory ready for direct
/// I/O and a journal of files of `file_bytes` made for it (installed as
/// the thread's: logs opened in `f` use it); removes the directory after.
fn with_journal<F: std::future::Future<Output = ()> + 'static>(
    name: &str,
    file_bytes: u64,
    f: impl FnOnce(PathBuf, Rc<Journal>) -> F + Send + 'static,
) {
    let d = tmpdir(name);
    let data = d.clone();
    run(move || async move {
        crate::segment::prepare_direct_io(&data).await.unwrap();
        let journal = Journal::open_sized(&data, 0, 1, file_bytes).await.unwrap();
        install(Some(journal.clone()));
        f(data, journal).await;
        install(None);
    });
}

/// Opens the log in `dir`, shared as the node shares it (the journal's
/// checkpoints reach a log through its `Rc`).
async fn open_log(dir: &Path, config: LogConfig) -> Rc<PartitionLog> {
    Rc::new(PartitionLog::open(dir, config, 0).await.unwrap())
}

/// Opens the log in `dir` again and checks it ends at `end` with every
/// offset below it readable.
async fn reopens_whole(dir: &Path, end: i64) {
    let log = PartitionLog::open(dir, LogConfig::default(), 0)
        .await
        .unwrap();
    assert_eq!(log.log_end(), end);
    assert_dense(&log, end).await;
}

/// `rounds` appends of `count` records, each waited for: returns the
/// durable end.
async fn append_acked(log: &Rc<PartitionLog>, rounds: i64, count: i32) -> i64 {
    for round in 0..rounds {
        let (a, _) = log.append(&batches(count, 1000 + round), 0).await.unwrap();
        log.durable_past(a.last_offset).await.unwrap();
    }
    log.durable_end()
}

/// What a crash takes that the journal must give back: every byte of
/// every segment not yet sealed (sealed ones were synced) reads as zeros.
fn lose_unsynced_segment_writes(log_dir: &Path) {
    for entry in std::fs::read_dir(log_dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") && !path.with_extension("index").exists() {
            let len = std::fs::metadata(&path).unwrap().len();
            std::fs::write(&path, vec![0u8; len as usize]).unwrap();
        }
    }
}

/// Reads every offset from 0 to `end` back, densely.
async fn assert_dense(log: &PartitionLog, end: i64) {
    let mut at = 0;
    while at < end {
        let r = log.read(at, 1 << 20).await.unwrap();
        let mut moved = false;
        for (_, h) in BatchIter::new(&r.batches.to_bytes()) {
            assert!(
                h.base_offset <= at && at <= h.last_offset(),
                "offset {at} missing"
            );
            at = h.last_offset() + 1;
            moved = true;
        }
        assert!(moved, "nothing read at {at} (end {end})");
    }
}

#[test]
fn acknowledged_records_of_every_partition_survive_losing_unsynced_segment_writes() {
    with_journal("lose", FILE_BYTES, |data, journal| async move {
        let cfg = LogConfig {
            segment_bytes: 1000,
            ..LogConfig::default()
        };
        let dirs: Vec<_> = (0..3).map(|p| data.join(format!("topics/t/{p}"))).collect();
        let mut logs = Vec::new();
        for dir in &dirs {
            logs.push(open_log(dir, cfg).await);
        }
        // Appends to all three partitions, acknowledged together: the
        // journal carries several partitions' records per write.
        for round in 0..40 {
            let mut waits = Vec::new();
            for log in &logs {
                let (a, _) = log.append(&batches(5, 1000 + round), 0).await.unwrap();
                waits.push(log.durable_past(a.last_offset));
            }
            for w in waits {
                w.await.unwrap();
            }
        }
        let ends: Vec<i64> = logs.iter().map(|l| l.durable_end()).collect();
        assert!(
            journal.counters().0 < 40 * 3,
            "one write per round or fewer"
        );
        // Sealing runs after acks: let it end, then the crash.
        for log in &logs {
            log.flush().await.unwrap();
        }
        drop(logs);
        install(None);
        drop(journal);
        for dir in &dirs {
            lose_unsynced_segment_writes(dir);
        }
        let replayed = replay(&data).unwrap();
        assert!(replayed.records > 0, "{replayed:?}");
        assert!(
            replayed.skipped > 0,
            "sealed segments' records are forgotten: {replayed:?}"
        );
        for (dir, end) in dirs.iter().zip(ends) {
            let log = PartitionLog::open(dir, cfg, 0).await.unwrap();
            assert_eq!(log.log_end(), end, "{}", dir.display());
            assert_dense(&log, end).await;
        }
        // Replayed once: a second replay finds nothing.
        assert_eq!(replay(&data).unwrap().records, 0);
    });
}

#[test]
fn a_torn_last_journal_write_is_not_replayed_and_the_log_ends_before_it() {
    with_journal("torn", FILE_BYTES, |data, journal| async move {
        let dir = data.join("topics/t/0");
        let log = open_log(&dir, LogConfig::default()).await;
        let before_last = append_acked(&log, 5, 4).await;
        let (a, _) = log.append(&batches(4, 2000), 0).await.unwrap();
        log.durable_past(a.last_offset).await.unwrap();
        drop(log);
        install(None);
        drop(journal);
        lose_unsynced_segment_writes(&dir);
        // Tear the last write: one byte of its records changed.
        let jpath = journal_dir(&data).join("0-a.wj");
        let bytes = std::fs::read(&jpath).unwrap();
        let mut at = 0;
        let mut last = 0;
        while let Some((_, _, next)) = replay::write_at_for_tests(&bytes, at) {
            last = at;
            at = next;
        }
        assert!(last > 0, "several writes");
        crate::testing::flip_bit(&jpath, (last + WRITE_HEAD + 10) as u64);
        replay(&data).unwrap();
        let log = PartitionLog::open(&dir, LogConfig::default(), 0)
            .await
            .unwrap();
        assert_eq!(log.log_end(), before_last);
        assert_dense(&log, before_last).await;
    });
}

#[test]
fn a_forget_drops_earlier_records_and_files_are_taken_in_turn() {
    with_journal("forget", 64 << 10, |data, journal| async move {
        let dir = data.join("topics/t/0");
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.log"), dir.join("b.log"));
        for p in [&a, &b] {
            std::fs::write(p, b"").unwrap();
        }
        let put = |path: &Path, pos: u64, bytes: &[u8]| {
            let pieces = [Bytes::copy_from_slice(bytes)];
            journal.record_flush(
                &dir,
                std::rc::Weak::new(),
                [SegmentBytes {
                    path,
                    pos,
                    pieces: &pieces,
                }],
            )
        };
        // b: 200 records of 1 KiB, each a position of its own; the
        // journal goes round its two 64 KiB files several times (no log
        // to check: the test writes b itself, as a log's write-out would).
        let chunk = vec![7u8; 1024];
        let plain_b = std::fs::OpenOptions::new().write(true).open(&b).unwrap();
        for i in 0..200u64 {
            // As a flush: the segment write (plain), and the journal's.
            use std::os::unix::fs::FileExt;
            plain_b.write_all_at(&chunk, i * 1024).unwrap();
            put(&b, i * 1024, &chunk).await.unwrap();
        }
        assert!(journal.counters().1 > 4 * (64 << 10), "went round");
        put(&a, 0, b"AAAA").await.unwrap();
        journal.forget(&a).await.unwrap();
        put(&a, 4, b"BBBB").await.unwrap();
        // A record of a file deleted since is skipped.
        let gone = dir.join("gone.log");
        std::fs::write(&gone, b"").unwrap();
        put(&gone, 0, b"GGGG").await.unwrap();
        std::fs::remove_file(&gone).unwrap();
        drop(journal);
        std::fs::write(&a, [0u8; 8]).unwrap();
        let replayed = replay(&data).unwrap();
        // "AAAA" was forgotten, "BBBB" came back.
        assert_eq!(std::fs::read(&a).unwrap(), b"\0\0\0\0BBBB");
        // Only b's records since the last checkpoint were still there.
        assert!(replayed.records < 200, "{replayed:?}");
        assert!(std::fs::read(&b).unwrap() == vec![7u8; 200 * 1024]);
        assert!(!gone.exists());
        assert!(replayed.skipped >= 2, "{replayed:?}");
    });
}

#[test]
fn a_log_going_round_the_journal_many_times_reopens_whole() {
    with_journal("round", 64 << 10, |data, journal| async move {
        let cfg = LogConfig {
            segment_bytes: 100 << 10,
            ..LogConfig::default()
        };
        let dir = data.join("topics/t/0");
        let log = open_log(&dir, cfg).await;
        for round in 0..400 {
            let (a, _) = log.append(&batches(40, 1000 + round), 0).await.unwrap();
            log.durable_past(a.last_offset).await.unwrap();
            // Reads find everything, written out or still staged.
            if round % 50 == 49 {
                assert_dense(&log, log.high_watermark()).await;
            }
        }
        assert!(journal.counters().1 > 8 * (64 << 10), "went round");
        let end = log.durable_end();
        drop(log);
        install(None);
        drop(journal);
        replay(&data).unwrap();
        let log = PartitionLog::open(&dir, cfg, 0).await.unwrap();
        assert_eq!(log.log_end(), end);
        assert_dense(&log, end).await;
    });
}

#[test]
fn a_journaled_log_dropped_and_opened_again_has_every_acknowledged_record() {
    with_journal("drop", FILE_BYTES, |data, _journal| async move {
        let dir = data.join("topics/t/0");
        let log = open_log(&dir, LogConfig::default()).await;
        let end = append_acked(&log, 20, 4).await;
        // Acknowledged, in the journal, not yet in the segment: a group
        // slot handed over drops its log like this, and the node opens
        // it again later without a replay.
        drop(log);
        reopens_whole(&dir, end).await;
        install(None);
    });
}

#[test]
fn a_segment_that_cannot_be_written_fails_the_log_until_it_can() {
    use crate::sim_disk::SimDisk;
    with_journal("write-out-fails", FILE_BYTES, |data, _journal| async move {
        let dir = data.join("topics/t/0");
        let config = LogConfig {
            segment_bytes: 64 << 10,
            ..LogConfig::default()
        };
        let log = open_log(&dir, config).await;
        // Every segment write fails from here (the journal's own writes
        // do not go through the simulated disk).
        let _disk = SimDisk::install(7, &dir, &data.join("image"), u64::MAX, 1);
        let mut acked = 0;
        let refused = loop {
            assert!(acked < 10_000, "the log never failed");
            match log.append(&batches(20, 1000), 0).await {
                Ok((a, _)) => {
                    log.durable_past(a.last_offset).await.unwrap();
                    acked = a.last_offset + 1;
                }
                Err(e) => break e.to_string(),
            }
        };
        assert!(refused.contains("simulated I/O error"), "{refused}");
        // The disk heals; the write is tried again each second and the
        // log takes appends once it worked.
        SimDisk::remove();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let end = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the log stayed failed"
            );
            if let Ok((a, _)) = log.append(&batches(20, 2000), 0).await {
                log.durable_past(a.last_offset).await.unwrap();
                break a.last_offset + 1;
            }
            glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert!(end > acked);
        // Closed as the node closes a partition it stops serving (a
        // retry may still hold the log for a moment: a drop alone would
        // leave it open beside the one opened below).
        log.close().await.unwrap();
        drop(log);
        reopens_whole(&dir, end).await;
        install(None);
    });
}
