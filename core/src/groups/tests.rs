use super::*;
use crate::catalog::TopicMeta;
use std::path::PathBuf;

use weir_storage::testing::run_local as run;

/// A catalog with topic `t` of 4 partitions.
pub(crate) fn catalog() -> Catalog {
    let mut c = Catalog::default();
    c.topics.insert(
        "t".into(),
        TopicMeta {
            name: "t".into(),
            id: [1; 16],
            shards: vec![0; 4],
            nodes: vec![],
            replication: vec![],
            config: Default::default(),
            schema: None,
            throttled_replicas: Default::default(),
        },
    );
    c
}

fn all(c: &Coordinator, groups: &[String]) -> Vec<(String, OffsetAnswer)> {
    groups
        .iter()
        .map(|g| (g.clone(), c.committed(g, None)))
        .collect()
}

/// Many commits over the same keys: the log is checkpointed (older
/// segments go), and a reopened coordinator has exactly the offsets and
/// groups it had, deleted ones gone.
#[test]
fn checkpoints_keep_exactly_the_live_offsets() {
    run(|| async {
        // Not /tmp: tmpfs has no O_DIRECT.
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../target/test-data/groups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        weir_storage::segment::prepare_direct_io(&dir)
            .await
            .unwrap();
        let cfg = GroupConfig {
            log_checkpoint_bytes: 64 << 10,
            ..GroupConfig::default()
        };
        let cat = catalog();
        let groups: Vec<String> = (0..6).map(|i| format!("group-{i}")).collect();
        let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
        for round in 0..400i64 {
            for g in &groups {
                let offsets = (0..4)
                    .map(|p| OffsetToCommit {
                        topic: "t".into(),
                        partition: p,
                        offset: round * 10 + p as i64,
                        leader_epoch: -1,
                        metadata: Some(format!("{g} round {round}")),
                    })
                    .collect();
                let codes = c.commit(g, "", None, -1, offsets, &cat).await;
                assert_eq!(codes, vec![ErrorCode::None; 4]);
            }
        }
        assert_eq!(c.delete(&groups[5]).await, ErrorCode::None);
        let before = all(&c, &groups);
        assert!(before[5].1.is_empty(), "a deleted group has no offsets");
        assert_eq!(before[0].1[0].1[3].1.as_ref().unwrap().offset, 3993);
        let size: u64 = c.logs.borrow().values().map(|l| l.size_bytes()).sum();
        c.close().await;
        drop(c);
        // 2,400 commits of 4 offsets wrote ~860 KB; what is kept is
        // about one checkpoint interval (64 KiB) and a segment.
        assert!(size < 128 << 10, "the group logs hold {size} bytes");

        let c = Coordinator::open(&dir, 0, 1, cfg).await.unwrap();
        assert_eq!(all(&c, &groups), before);
        let listed: Vec<_> = c.list().into_iter().map(|g| g.group_id).collect();
        assert_eq!(listed, groups[..5].to_vec());
        c.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// A slot's leadership lost and regained in a newer epoch while its load
/// in the older one is under way: the call for the newer epoch meets that
/// load and leaves the slot to it, so the load ends by loading again in
/// the newer epoch. (Before, it found "leadership moved" and the slot
/// stayed unloaded for good: COORDINATOR_LOAD_IN_PROGRESS to every group
/// of it until the next election.)
#[test]
fn a_slot_led_again_while_it_loads_is_loaded_in_the_newer_epoch() {
    use crate::catalog::Replicas;
    use crate::partition::Partition;
    use crate::replication::leader::Role;
    use weir_storage::batch::BatchHeader;
    use weir_storage::log::PartitionLog;
    use weir_storage::records::build_batch;
    run(|| async {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../target/test-data/groups-reload-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        weir_storage::segment::prepare_direct_io(&dir)
            .await
            .unwrap();
        let topic = |leader: i32, epoch: i32| TopicMeta {
            name: crate::catalog::GROUPS_TOPIC.into(),
            id: [2; 16],
            shards: vec![0],
            nodes: vec![leader],
            replication: vec![Replicas {
                replicas: vec![1, 2],
                isr: vec![1],
                leader_epoch: epoch,
                partition_epoch: epoch,
                ..Default::default()
            }],
            config: Default::default(),
            schema: None,
            throttled_replicas: Default::default(),
        };
        let t = topic(1, 1);
        let log = PartitionLog::open(&dir.join("slot-0"), t.config.log_config(), now_ms())
            .await
            .unwrap();
        let part = Rc::new(Partition::new(
            t.name.clone(),
            0,
            log,
            1,
            Rc::new(crate::latency::Latencies::default()),
        ));
        part.set_role(Role::from_catalog(&t, 0, 1)).unwrap();
        // Something for the load to read (and await).
        for i in 0..50u32 {
            let key = format!("not-an-entry-{i}");
            let b = build_batch(&[(Some(key.as_bytes()), Some(b"x"))], now_ms());
            let h = BatchHeader::parse(&b).unwrap();
            part.log.append(&[(h, b)], now_ms()).await.unwrap();
        }
        part.log.flush().await.unwrap();
        assert_eq!(part.log.durable_end(), 50);

        let c = Rc::new(
            Coordinator::open(&dir.join("own"), 0, 1, GroupConfig::default())
                .await
                .unwrap(),
        );
        c.use_slots();
        let first = glommio::spawn_local({
            let (c, part) = (c.clone(), part.clone());
            async move { c.load_slot(0, part, 1).await }
        });
        while !c.loading.borrow().contains(&SLOTTED) {
            glommio::executor().yield_now().await;
        }
        // Followed in epoch 2, led again in epoch 3, while it loads.
        part.set_role(Role::from_catalog(&topic(2, 2), 0, 1))
            .unwrap();
        c.unload_slot(0);
        part.set_role(Role::from_catalog(&topic(1, 3), 0, 1))
            .unwrap();
        c.load_slot(0, part.clone(), 3).await;
        assert!(
            c.loading.borrow().contains(&SLOTTED),
            "the first load still runs"
        );
        first.await;
        assert_eq!(c.loaded_in.borrow().get(&SLOTTED), Some(&3));
        assert!(c.logs.borrow().contains_key(&SLOTTED));
        c.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}
