//! Compaction's tests: what a pass keeps, reads over its gaps, reopening
//! (with and without index files), tombstones, transactions, and a stop at
//! every step of a swap.

use super::*;
use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;

use super::tests::in_log_dir;
use crate::batch::{split_produced, BatchHeader, BatchIter, ATTR_COMPRESSION_MASK, HEADER_LEN};
use crate::compression;
use crate::records::{batch_records, build_stamped_batch, Producer, Stamped};

/// A produced batch of (key, value) records, compressed with `codec`.
fn keyed(records: &[(&str, Option<&str>)], ts: i64, codec: i16) -> Vec<(BatchHeader, Bytes)> {
    let stamped: Vec<Stamped<'_>> = records
        .iter()
        .map(|(k, v)| (ts, Some(k.as_bytes()), v.map(str::as_bytes), &[][..]))
        .collect();
    let plain = build_stamped_batch(&stamped, &Producer::NONE);
    let batch = if codec == compression::NONE {
        plain
    } else {
        let packed = compression::compress(codec, &plain[HEADER_LEN..]).unwrap();
        let mut b = plain[..HEADER_LEN].to_vec();
        b.extend_from_slice(&packed);
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let attrs = i16::from_be_bytes([b[21], b[22]]) & !ATTR_COMPRESSION_MASK | codec;
        b[21..23].copy_from_slice(&attrs.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    };
    split_produced(&batch).unwrap()
}

fn compacted(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        retention_ms: -1,
        compaction: Some(Compaction {
            delete_retention_ms: 3_600_000,
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            min_dirty_ratio_ppm: 0,
        }),
        ..LogConfig::default()
    }
}

/// Every record readable from the log start, by offset: (key, value).
/// Reads as a consumer does: from each batch's last offset + 1.
async fn records(log: &PartitionLog) -> BTreeMap<i64, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    let mut at = log.log_start();
    while at < log.high_watermark() {
        let r = log.read(at, 1 << 16).await.unwrap();
        let bytes = r.batches.to_bytes();
        assert!(!bytes.is_empty(), "a read at {at} below the high watermark");
        for (pos, h) in BatchIter::new(&bytes) {
            let batch = bytes.slice(pos..pos + h.total_len());
            assert!(
                crate::batch::crc_ok(&batch, &h),
                "batch at {}",
                h.base_offset
            );
            for r in batch_records(&batch, &h, 1 << 20).unwrap() {
                assert!(
                    r.offset >= at,
                    "record {} before the read's offset {at}",
                    r.offset
                );
                let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                let value = r.value.map(|v| String::from_utf8(v.to_vec()).unwrap());
                assert!(out.insert(r.offset, (key, value)).is_none());
            }
            at = h.last_offset() + 1;
        }
    }
    out
}

/// Writes `rounds` updates of keys k0..k4 (mixed codecs, some batches of
/// several keys), one tombstone for k4, then a record that rolls the last
/// segment. Returns every record by offset.
async fn fill(log: &PartitionLog, rounds: usize) -> BTreeMap<i64, (String, Option<String>)> {
    let codecs = [
        compression::NONE,
        compression::GZIP,
        compression::SNAPPY,
        compression::LZ4,
        compression::ZSTD,
    ];
    let mut all = BTreeMap::new();
    for i in 0..rounds {
        let v = format!("v{i}");
        let (k1, k2) = (format!("k{}", i % 5), format!("k{}", (i + 1) % 5));
        let recs: Vec<(&str, Option<&str>)> = if i % 3 == 0 {
            vec![(&k1, Some(&v)), (&k2, Some(&v))]
        } else {
            vec![(&k1, Some(&v))]
        };
        let (a, _) = log
            .append(&keyed(&recs, 1000 + i as i64, codecs[i % 5]), 1000)
            .await
            .unwrap();
        for (n, (k, v)) in recs.iter().enumerate() {
            all.insert(
                a.base_offset + n as i64,
                (k.to_string(), v.map(String::from)),
            );
        }
        log.flush().await.unwrap();
    }
    let (a, _) = log
        .append(&keyed(&[("k4", None)], 5000, 0), 1000)
        .await
        .unwrap();
    all.insert(a.base_offset, ("k4".into(), None));
    log.flush().await.unwrap();
    // Past segment.bytes: the tombstone's segment is sealed.
    let filler = "x".repeat(600);
    let (a, _) = log
        .append(&keyed(&[("k0", Some(&filler))], 6000, 0), 1000)
        .await
        .unwrap();
    all.insert(a.base_offset, ("k0".into(), Some(filler.clone())));
    log.flush().await.unwrap();
    all
}

/// The latest record of each key written before `upto`, by offset.
fn latest(
    all: &BTreeMap<i64, (String, Option<String>)>,
    upto: i64,
) -> BTreeMap<i64, (String, Option<String>)> {
    let mut by_key: BTreeMap<String, i64> = BTreeMap::new();
    for (o, (k, _)) in all.range(..upto) {
        by_key.insert(k.clone(), *o);
    }
    by_key.values().map(|o| (*o, all[o].clone())).collect()
}

/// What the log must read after cleaning below `cleaned_to`: the latest
/// record per key there, everything from it on.
fn expected(
    all: &BTreeMap<i64, (String, Option<String>)>,
    cleaned_to: i64,
) -> BTreeMap<i64, (String, Option<String>)> {
    let mut e = latest(all, cleaned_to);
    // A record cleaned away may be superseded only by a later one of its key.
    e.retain(|o, (k, _)| {
        !all.range(o + 1..)
            .any(|(later, (k2, _))| k2 == k && *later < cleaned_to)
    });
    e.extend(all.range(cleaned_to..).map(|(o, r)| (*o, r.clone())));
    e
}

fn segment_files(d: &Path) -> usize {
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
}

#[test]
fn a_pass_keeps_the_latest_record_per_key_at_its_offset_and_reads_over_the_gaps() {
    in_log_dir("latest", |d| async move {
        let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
        let all = fill(&log, 120).await;
        let before = segment_files(&d);
        let done = log
            .compact(10_000, 1 << 20)
            .await
            .unwrap()
            .expect("a pass ran");
        assert!(done.records_removed > 100, "{done:?}");
        assert!(done.segments_out < done.segments_in, "{done:?}");
        assert!(segment_files(&d) < before);
        let cleaned_to = log.cleaned_to();
        assert!(cleaned_to > 100, "{cleaned_to}");
        let got = records(&log).await;
        assert_eq!(got, expected(&all, cleaned_to));
        // Each key at most once below the cleaned offset; k4's tombstone
        // is still there (delete.retention.ms has not passed).
        let keys: Vec<_> = got
            .range(..cleaned_to)
            .map(|(_, (k, _))| k.clone())
            .collect();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(keys.len(), unique.len(), "{keys:?}");
        assert!(got.values().any(|(k, v)| k == "k4" && v.is_none()));
        // Nothing more to do right away.
        assert_eq!(log.compact(10_000, 1 << 20).await.unwrap(), None);
        // The same after a reopen (from the index files), and after losing
        // every index file (a scan that allows gaps).
        drop(log);
        let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
        assert_eq!(records(&log).await, got);
        assert_eq!(log.cleaned_to(), cleaned_to);
        drop(log);
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.extension()
                .is_some_and(|x| x == "index" || x == "timeindex")
            {
                std::fs::remove_file(p).unwrap();
            }
        }
        let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
        assert_eq!(records(&log).await, got);
        // Appends go on at the same offsets.
        let end = log.log_end();
        let (a, _) = log
            .append(&keyed(&[("k1", Some("new"))], 7000, 0), 7000)
            .await
            .unwrap();
        assert_eq!(a.base_offset, end);
    });
}

#[test]
fn tombstones_go_after_delete_retention_and_their_key_with_them() {
    in_log_dir("tombstones", |d| async move {
        let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
        let all = fill(&log, 60).await;
        let now = 10_000;
        log.compact(now, 1 << 20)
            .await
            .unwrap()
            .expect("a pass ran");
        let kept = records(&log).await;
        assert!(kept.values().any(|(k, v)| k == "k4" && v.is_none()));
        // The tombstone's batch now carries its delete horizon; its record
        // keeps the timestamp it was produced with.
        let (&at, _) = kept
            .iter()
            .find(|(_, (k, v))| k == "k4" && v.is_none())
            .unwrap();
        let bytes = log.read(at, 1).await.unwrap().batches.to_bytes();
        let h = BatchHeader::parse(&bytes).unwrap();
        assert_ne!(h.attributes & crate::batch::ATTR_DELETE_HORIZON, 0);
        assert_eq!(h.base_timestamp, now + 3_600_000);
        let r = batch_records(&bytes.slice(..h.total_len()), &h, 1 << 20).unwrap();
        assert_eq!((r[0].offset, r[0].timestamp), (at, 5000));
        // Past the horizon the tombstone is due: a pass runs for it alone.
        let later = now + 3_600_000 + 1;
        let done = log
            .compact(later, 1 << 20)
            .await
            .unwrap()
            .expect("a pass for the tombstone");
        assert!(done.records_removed >= 1, "{done:?}");
        let got = records(&log).await;
        assert!(!got.values().any(|(k, _)| k == "k4"), "k4 is gone: {got:?}");
        // The other keys' latest records are all there.
        let mut want = expected(&all, log.cleaned_to());
        want.retain(|_, (k, _)| k != "k4");
        assert_eq!(got, want);
    });
}

#[test]
fn aborted_transactions_and_markers_stay_whole_and_hide_nothing() {
    in_log_dir("txn", |d| async move {
        let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
        // k0 committed as "a", then a transaction writing k0 = "aborted"
        // is aborted; k0 = "a" must stay, and so must the aborted batch.
        log.append(&keyed(&[("k0", Some("a"))], 1, 0), 1)
            .await
            .unwrap();
        let txn = {
            let plain = build_stamped_batch(
                &[(2, Some(&b"k0"[..]), Some(&b"aborted"[..]), &[][..])],
                &Producer {
                    id: 7,
                    epoch: 0,
                    base_sequence: 0,
                    transactional: true,
                    ..Producer::NONE
                },
            );
            split_produced(&plain).unwrap()
        };
        log.append(&txn, 2).await.unwrap();
        let marker = crate::records::build_marker_batch(crate::batch::Marker::Abort, 7, 0, 0, 3);
        let h = BatchHeader::parse(&marker).unwrap();
        log.append(&[(h, marker)], 3).await.unwrap();
        for i in 0..30 {
            log.append(&keyed(&[("k1", Some(&"y".repeat(40 + i)))], 4, 0), 4)
                .await
                .unwrap();
            log.flush().await.unwrap();
        }
        log.compact(10_000, 1 << 20)
            .await
            .unwrap()
            .expect("a pass ran");
        let mut at = 0;
        let mut seen = Vec::new();
        while at < log.high_watermark() {
            let bytes = log.read(at, 1 << 16).await.unwrap().batches.to_bytes();
            for (pos, h) in BatchIter::new(&bytes) {
                let batch = bytes.slice(pos..pos + h.total_len());
                for r in batch_records(&batch, &h, 1 << 20).unwrap() {
                    seen.push((r.offset, h.is_control(), r.value.map(|v| v.to_vec())));
                }
                at = h.last_offset() + 1;
            }
        }
        assert_eq!(seen[0], (0, false, Some(b"a".to_vec())));
        assert_eq!(seen[1], (1, false, Some(b"aborted".to_vec())));
        assert!(seen[2].1, "the marker stays");
        assert!(
            seen.iter().filter(|(o, _, _)| *o > 2).count() < 30,
            "k1 was compacted"
        );
    });
}

#[test]
fn a_stop_at_any_step_of_a_swap_leaves_the_old_segments_or_the_new_one() {
    for point in [
        "compaction-cleaned",
        "compaction-committed",
        "compaction-replaced",
    ] {
        in_log_dir(point, move |d| async move {
            let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
            let all = fill(&log, 90).await;
            crate::crash_point::stop_here_in_tests(Some(point));
            let stopped = log.compact(10_000, 1 << 20).await;
            crate::crash_point::stop_here_in_tests(None);
            assert!(stopped.is_err(), "{point}: {stopped:?}");
            drop(log);
            let log = PartitionLog::open(&d, compacted(700), 0).await.unwrap();
            let got = records(&log).await;
            // Every key's latest record, at its offset, and nothing that
            // was not written there.
            for (o, r) in latest(&all, log.log_end()) {
                assert_eq!(got.get(&o), Some(&r), "{point}: offset {o}");
            }
            for (o, r) in &got {
                assert_eq!(all.get(o), Some(r), "{point}: offset {o}");
            }
            let names: Vec<String> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert!(
                !names
                    .iter()
                    .any(|n| n.ends_with(".cleaned") || n.ends_with(".swap")),
                "{point}: {names:?}"
            );
            // A pass now completes, and reads agree with a whole clean.
            log.compact(10_000, 1 << 20).await.unwrap();
            assert_eq!(records(&log).await, expected(&all, log.cleaned_to()));
        });
    }
}
