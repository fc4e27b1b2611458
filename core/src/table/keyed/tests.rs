//! Tests of keyed tables: which copy of a key wins, tombstones across
//! partitions, and the chain of snapshots (order, deletions, damage).

use super::*;

fn entry(offset: i64, timestamp: i64, row: Option<i64>) -> Entry {
    Entry {
        offset,
        timestamp,
        row: row.map(|v| vec![Value::from(v)]),
    }
}

/// A key whose home (of 4) is `home`.
fn key_at_home(home: i32) -> Vec<u8> {
    (0..)
        .map(|i| format!("{{\"id\":{i}}}").into_bytes())
        .find(|k| partition_for_key(k, 4) == home)
        .unwrap()
}

fn rows_of(entries: &[(&[u8], Entry)]) -> KeyedRows {
    let mut r = KeyedRows {
        partitions: 4,
        ..KeyedRows::default()
    };
    for (k, e) in entries {
        r.apply(k, e.clone());
    }
    r
}

#[test]
fn the_newest_copy_wins_then_the_home_one() {
    let k = key_at_home(0);
    let home = rows_of(&[(&k, entry(5, 100, Some(1)))]);
    let stray = rows_of(&[(&k, entry(9, 200, Some(2)))]);
    let claims = stray.claims(2);
    assert_eq!(claims.len(), 1);
    assert!(home.claims(0).is_empty());
    // Newer stray: the home copy loses.
    assert_eq!(home.settle(0, &claims), vec![(0, k.clone())]);
    // Same time: the home copy wins.
    let tie = rows_of(&[(&k, entry(9, 100, Some(2)))]);
    assert_eq!(home.settle(0, &tie.claims(2)), vec![(2, k.clone())]);
    // Two strays and no home copy: the newer stray wins.
    let other = rows_of(&[(&k, entry(1, 150, Some(3)))]);
    let mut both = claims.clone();
    both.extend(other.claims(3));
    assert_eq!(rows_of(&[]).settle(0, &both), vec![(3, k.clone())]);
    let losers: Losers = [(3, [k.clone()].into())].into();
    assert_eq!(other.rows_in_offset_order(3, Some(&losers)).count(), 0);
    assert_eq!(stray.rows_in_offset_order(2, Some(&losers)).count(), 1);
}

#[test]
fn a_newer_tombstone_elsewhere_hides_the_row_until_it_is_forgotten() {
    let k = key_at_home(1);
    let home = rows_of(&[(&k, entry(0, 100, Some(1)))]);
    let mut stray = rows_of(&[(&k, entry(4, 300, None))]);
    assert_eq!(home.settle(1, &stray.claims(3)), vec![(1, k.clone())]);
    assert_eq!(stray.rows_in_offset_order(3, None).count(), 0);
    stray.forget_tombstones(301);
    assert!(stray.claims(3).is_empty());
    assert!(home.settle(1, &stray.claims(3)).is_empty());
}

#[test]
fn one_partition_forgets_deletions_at_once_and_a_new_partition_count_rehomes() {
    let k = key_at_home(2);
    let mut one = KeyedRows {
        partitions: 1,
        ..KeyedRows::default()
    };
    one.apply(&k, entry(0, 1, Some(1)));
    one.apply(&k, entry(1, 2, None));
    assert!(one.get(&k).is_none());
    one.apply(&k, entry(2, 3, Some(2)));
    assert!(one.claims(0).is_empty());
    one.partitions = 4;
    assert_eq!(one.claims(0).len(), 1);
}

fn test_dir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-data")
        .join(format!("keyed-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Snapshots `rows` into `dir` as the node does (a delta, or a merge
/// into a full snapshot when due).
async fn snapshot_into(rows: &mut KeyedRows, dir: &std::path::Path) {
    let (writes, span) = rows.freeze(true);
    let snap = keyed_snapshot::write(dir, "schema", span, writes.iter())
        .await
        .unwrap();
    rows.adopt(snap, writes.merge);
}

fn values(rows: &KeyedRows, index: i32) -> Vec<i64> {
    rows.rows_in_offset_order(index, None)
        .map(|r| r.unwrap()[0].as_i64().unwrap())
        .collect()
}

/// The rows the snapshot chain in `dir` holds, as a restart finds them.
fn reopen(dir: &std::path::Path, partitions: i32) -> (KeyedRows, Vec<String>) {
    let chain = Snapshot::open_chain(dir, "schema");
    let rows = KeyedRows {
        upto: chain.files.last().map_or(0, |f| f.upto),
        tombstones: chain.tombstones.into(),
        snaps: chain.files.into_iter().map(Rc::new).collect(),
        partitions,
        ..KeyedRows::default()
    };
    (rows, chain.refused)
}

fn snapshot_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn a_chain_of_snapshots_keeps_the_rows_in_offset_order_and_later_writes_mask_them() {
    let dir = test_dir("layers");
    weir_storage::testing::run_local(move || async move {
        // More keys than a page holds, so lookups cross pages.
        let n = 40_000i64;
        let key = |i: i64| format!("{{\"id\":{i}}}").into_bytes();
        let mut rows = KeyedRows {
            partitions: 1,
            ..KeyedRows::default()
        };
        for i in 0..n {
            rows.apply(&key(i), entry(i, i, Some(i)));
        }
        rows.upto = n;
        snapshot_into(&mut rows, &dir).await;
        assert!(rows.rows.is_empty());
        assert_eq!(rows.snaps[0].entry_count(), n as usize);
        // After the snapshot: key 5 updated, key 7 deleted, a new key.
        rows.apply(&key(5), entry(n, n, Some(-5)));
        rows.apply(&key(7), entry(n + 1, n + 1, None));
        rows.apply(&key(n), entry(n + 2, n + 2, Some(n)));
        rows.upto = n + 3;
        let mut expect: Vec<i64> = (0..n).filter(|i| *i != 5 && *i != 7).collect();
        expect.extend([-5, n]);
        assert!(
            values(&rows, 0) == expect,
            "the rows over a snapshot differ"
        );
        assert_eq!(rows.get(&key(7)), None);
        assert_eq!(
            rows.get(&key(39_999)),
            Some(Latest {
                offset: 39_999,
                timestamp: 39_999,
                live: true
            })
        );
        assert!(
            (0..n).all(|i| rows.snaps[0].get(&key(i)).is_some_and(|h| h.offset == i)),
            "a key of any page is found through the snapshot's index"
        );
        assert!(rows.snaps[0].get(&key(n + 10)).is_none());
        // A second snapshot is a delta of those three (a mask for 7).
        snapshot_into(&mut rows, &dir).await;
        assert_eq!(rows.snaps.len(), 2);
        assert_eq!(rows.snaps[1].entry_count(), 3);
        assert!(values(&rows, 0) == expect, "the rows over a delta differ");
        let (again, refused) = reopen(&dir, 1);
        assert!(refused.is_empty(), "{refused:?}");
        assert_eq!((again.snaps.len(), again.upto), (2, n + 3));
        assert!(values(&again, 0) == expect, "the reopened rows differ");
        assert_eq!(again.get(&key(7)), None);
        assert!(again.get(&key(5)).unwrap().live);
        // Writes that add up to half the full snapshot merge the chain
        // into a new full one; the older files go.
        for i in 0..n / 2 {
            rows.apply(&key(i), entry(n + 3 + i, 0, Some(i + 1_000_000)));
        }
        rows.upto = n + 3 + n / 2;
        snapshot_into(&mut rows, &dir).await;
        assert_eq!(rows.snaps.len(), 1);
        assert_eq!(snapshot_files(&dir), 1);
        let (merged, _) = reopen(&dir, 1);
        let mut expect: Vec<i64> = (n / 2..n).collect();
        expect.push(n);
        expect.extend((0..n / 2).map(|i| i + 1_000_000));
        assert!(values(&merged, 0) == expect, "the merged rows differ");
        assert!(merged.get(&key(7)).unwrap().live);
    });
}

#[test]
fn a_snapshot_keeps_deletions_of_several_partitions_and_their_claims() {
    let dir = test_dir("claims");
    weir_storage::testing::run_local(move || async move {
        let away = key_at_home(1);
        let here = key_at_home(0);
        let mut rows = rows_of(&[(&away, entry(0, 100, None)), (&here, entry(1, 50, Some(1)))]);
        rows.upto = 2;
        snapshot_into(&mut rows, &dir).await;
        let (mut rows, _) = reopen(&dir, 4);
        let claims = rows.claims(0);
        assert_eq!(claims.len(), 1);
        assert_eq!(
            (claims[0].key.clone(), claims[0].timestamp),
            (away.clone(), 100)
        );
        assert_eq!(values(&rows, 0), vec![1]);
        assert_eq!(
            Vec::from(rows.tombstones.clone()),
            vec![(100, away.clone())]
        );
        // Forgotten after its retention: the snapshot's copy is masked.
        rows.forget_tombstones(101);
        assert!(rows.get(&away).is_none());
        assert!(rows.claims(0).is_empty());
    });
}

#[test]
fn a_damaged_snapshot_ends_the_chain_saying_why() {
    let dir = test_dir("damaged");
    let d = dir.clone();
    weir_storage::testing::run_local(move || async move {
        let mut rows = rows_of(&[(&key_at_home(0), entry(0, 1, Some(1)))]);
        rows.partitions = 1;
        for i in 0..10 {
            rows.apply(format!("k{i}").as_bytes(), entry(i + 1, 1, Some(i)));
        }
        rows.upto = 11;
        snapshot_into(&mut rows, &d).await;
        rows.apply(&key_at_home(2), entry(11, 1, Some(11)));
        rows.upto = 12;
        snapshot_into(&mut rows, &d).await;
        assert_eq!(rows.snaps.len(), 2);
    });
    let flip = |upto: i64| {
        let path = Snapshot::path(&dir, upto);
        let mut bytes = std::fs::read(&path).unwrap();
        // A flipped bit in the first page (just past the header).
        bytes[40] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
    };
    flip(12);
    let (rows, refused) = reopen(&dir, 1);
    assert_eq!((rows.snaps.len(), rows.upto), (1, 11));
    assert!(
        refused[0].contains("page 0 fails its checksum"),
        "{refused:?}"
    );
    assert_eq!(snapshot_files(&dir), 1, "the damaged delta is removed");
    flip(11);
    let (rows, refused) = reopen(&dir, 1);
    assert!(rows.snaps.is_empty());
    assert_eq!(refused.len(), 1);
    std::fs::write(Snapshot::path(&dir, 11), b"short").unwrap();
    let (_, refused) = reopen(&dir, 1);
    assert!(
        refused[0].contains("not a keyed-rows snapshot"),
        "{refused:?}"
    );
}
