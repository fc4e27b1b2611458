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
