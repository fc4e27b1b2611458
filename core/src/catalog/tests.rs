use super::*;

#[test]
fn a_damaged_catalog_gives_way_to_the_one_before_its_last_change() {
    let dir = std::env::temp_dir().join(format!("weir-catalog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cat = Catalog::load_or_create(&dir, 2).unwrap();
    assert_eq!(cat.version, 0);
    let id = cat.cluster_id.clone();
    for v in [1, 2] {
        cat.version = v;
        cat.save(&dir).unwrap();
    }
    assert_eq!(Catalog::load_or_create(&dir, 2).unwrap().version, 2);
    // A bit flipped inside the JSON: the checksum catches it.
    let path = dir.join("catalog.json");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.iter().position(|b| *b == b'2').unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let back = Catalog::load_or_create(&dir, 2).unwrap();
    assert_eq!((back.version, back.cluster_id.as_str()), (1, id.as_str()));
    // The damaged file was set aside and the good one written back; a
    // stop between setting the old one aside and writing the new one
    // leaves only `.prev`.
    assert!(dir.join("catalog.json.damaged").exists());
    assert_eq!(Catalog::load_or_create(&dir, 2).unwrap().version, 1);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(Catalog::load_or_create(&dir, 2).unwrap().version, 1);
    // Both damaged: no start, and the error says so.
    for name in ["catalog.json", "catalog.json.prev"] {
        std::fs::write(dir.join(name), b"{\"topics\": ").unwrap();
    }
    let why = Catalog::load_or_create(&dir, 2).unwrap_err();
    assert!(
        why.contains("catalog.json is damaged") && why.contains("prev is damaged"),
        "{why}"
    );
    // A catalog written before the checksum line existed loads as it is.
    std::fs::write(&path, serde_json::to_vec(&back).unwrap()).unwrap();
    assert_eq!(Catalog::load_or_create(&dir, 2).unwrap().version, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn names() {
    assert!(validate_topic_name("orders-1.v2_x").is_ok());
    for bad in ["", ".", "..", "a b", "ü", &"x".repeat(250)] {
        assert_eq!(
            validate_topic_name(bad).unwrap_err().code,
            ErrorCode::InvalidTopicException
        );
    }
}

#[test]
fn placement_spreads_and_is_stable() {
    let shards: Vec<_> = (0..4).map(|p| placement("t", p, 2)).collect();
    assert_eq!(shards.iter().filter(|&&s| s == 0).count(), 2);
    assert_eq!(placement("t", 3, 2), shards[3]);
}

#[test]
fn configs() {
    let mut c = TopicConfig::default();
    c.set("retention.ms", "1000").unwrap();
    assert_eq!(c.get("retention.ms").unwrap(), "1000");
    assert_eq!(
        c.set("retention.ms", "abc").unwrap_err().code,
        ErrorCode::InvalidConfig
    );
    let e = c.set("no.such", "abc").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(e.message, "Unknown topic config name: no.such");
}

#[test]
fn every_kafka_topic_config_is_checked_as_kafka_checks_it() {
    let mut c = TopicConfig::default();
    for (name, good, bad) in [
        ("compression.type", "lz4", "LZ4"),
        ("compression.gzip.level", "-1", "0"),
        ("compression.zstd.level", "-131072", "23"),
        ("compression.lz4.level", "17", "18"),
        ("flush.messages", "1", "0"),
        ("flush.ms", "0", "-1"),
        ("unclean.leader.election.enable", "TRUE", "yes"),
        ("preallocate", "false", "1"),
        ("segment.bytes", "1048576", "1048575"),
        ("internal.segment.bytes", "4096", "13"),
        ("local.retention.ms", "-2", "-3"),
        ("message.timestamp.after.max.ms", "0", "-1"),
        ("segment.index.bytes", "4", "3"),
        ("max.message.bytes", "0", "2147483648"),
    ] {
        c.set(name, good)
            .unwrap_or_else(|e| panic!("{name}={good}: {e:?}"));
        assert!(c.is_set(name), "{name}");
        let e = c.set(name, bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{name}={bad}");
        assert!(e.message.contains(name), "{}", e.message);
    }
    assert_eq!(c.get("compression.type").unwrap(), "lz4");
    assert_eq!(c.compression.codec(), Some(weir_storage::compression::LZ4));
    assert_eq!(c.get("unclean.leader.election.enable").unwrap(), "true");
    assert!(c.unclean_leader_election);
    assert_eq!(c.get("flush.messages").unwrap(), "1");
    // Kafka's testing-only segment size wins over segment.bytes.
    assert_eq!(c.log_config().segment_bytes, 4096);
    c.reset("internal.segment.bytes").unwrap();
    assert_eq!(c.get("internal.segment.bytes"), None);
    assert_eq!(c.log_config().segment_bytes, 1048576);
    c.reset("flush.messages").unwrap();
    assert_eq!(c.get("flush.messages").unwrap(), i64::MAX.to_string());
    assert!(!c.is_set("flush.messages"));
    // No tiered storage here: refused as Kafka refuses it with the
    // broker's tiered storage off.
    let e = c.set("remote.storage.enable", "true").unwrap_err();
    assert!(e.message.contains("Tiered Storage"), "{}", e.message);
    c.set("remote.storage.enable", "false").unwrap();
    // Checked together once all are set.
    c.set("min.compaction.lag.ms", "10").unwrap();
    c.set("max.compaction.lag.ms", "5").unwrap();
    assert_eq!(c.validate().unwrap_err().code, ErrorCode::InvalidConfig);
    // The throttle lists are the topic's, not its TopicConfig's.
    assert!(c.set("leader.replication.throttled.replicas", "*").is_err());
    assert!(topic_config::check("leader.replication.throttled.replicas", "0:1, 1:2").is_ok());
}

#[test]
fn topics_follow_the_cluster_wide_defaults_they_do_not_override() {
    let mut c = TopicConfig::default();
    c.set("retention.ms", "1000").unwrap();
    let defaults = std::collections::BTreeMap::from([
        ("retention.ms".to_string(), "5".to_string()),
        ("segment.ms".to_string(), "60000".to_string()),
        ("flush.ms".to_string(), "10".to_string()),
    ]);
    c.follow_defaults(&defaults);
    assert_eq!(c.retention_ms, 1000, "its own stays");
    assert_eq!(c.segment_ms, 60000);
    assert_eq!(c.get("flush.ms").unwrap(), "10");
    assert!(!c.is_set("segment.ms") && !c.is_set("flush.ms"));
    // The defaults deleted: back to the spec's.
    c.follow_defaults(&Default::default());
    assert_eq!(c.segment_ms, 604_800_000);
    assert_eq!(c.get("flush.ms").unwrap(), i64::MAX.to_string());
    assert!(c.kept.is_empty(), "{:?}", c.kept);
    // A config reset follows the default again.
    c.reset("retention.ms").unwrap();
    c.follow_defaults(&defaults);
    assert_eq!(c.retention_ms, 5);
    // Catalogs from before `explicit`: a value not the default was set.
    let old = r#"{"retention_ms":1,"retention_bytes":-1,"max_message_bytes":1048588,"segment_bytes":1073741824,"segment_ms":604800000}"#;
    let mut o: TopicConfig = serde_json::from_str(old).unwrap();
    assert!(o.is_set("retention.ms") && !o.is_set("segment.ms"));
    o.follow_defaults(&defaults);
    assert_eq!((o.retention_ms, o.segment_ms), (1, 60000));
    // Settled at that first change: segment.ms follows the default on.
    assert!(!o.is_set("segment.ms") && o.is_set("retention.ms"));
    o.follow_defaults(&Default::default());
    assert_eq!((o.retention_ms, o.segment_ms), (1, 604_800_000));
    assert!(!serde_json::to_string(&o).unwrap().contains("\"?\""));
}

#[test]
fn older_catalogs_explicit_bits_read_as_names() {
    let old = r#"{"retention_ms":1,"retention_bytes":-1,"max_message_bytes":10,"segment_bytes":100,"segment_ms":5,"explicit":2052}"#;
    let c: TopicConfig = serde_json::from_str(old).unwrap();
    assert!(c.is_set("retention.ms") && c.is_set("min.insync.replicas"));
    assert!(!c.is_set("cleanup.policy"));
    let again: TopicConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(again, c);
}

#[test]
fn cleanup_policy_and_retention() {
    let mut c = TopicConfig::default();
    assert_eq!(c.get("cleanup.policy").unwrap(), "delete");
    c.set("retention.ms", "1000").unwrap();
    c.set("retention.bytes", "5000").unwrap();
    assert_eq!(c.log_config().retention_ms, 1000);
    // Compact alone: nothing goes by retention.
    c.set("cleanup.policy", "compact").unwrap();
    assert_eq!(c.get("cleanup.policy").unwrap(), "compact");
    let l = c.log_config();
    assert_eq!((l.retention_ms, l.retention_bytes), (-1, -1));
    // Both, in either order: retention applies.
    c.set("cleanup.policy", " delete,compact").unwrap();
    assert_eq!(c.get("cleanup.policy").unwrap(), "compact,delete");
    assert_eq!(c.log_config().retention_bytes, 5000);
    let e = c.set("cleanup.policy", "shred").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert!(e.message.contains("String must be one of: compact, delete"));
    assert!(
        c.set("cleanup.policy", "Delete").is_err(),
        "case matters, as in Kafka"
    );
    // Empty (Kafka 4.1 takes it): neither retention nor compaction.
    c.set("cleanup.policy", "").unwrap();
    assert_eq!(c.get("cleanup.policy").unwrap(), "");
    let l = c.log_config();
    assert_eq!(
        (l.retention_ms, l.retention_bytes, l.compaction),
        (-1, -1, None)
    );
    // A catalog written before the policy existed reads as `delete`.
    let old = r#"{"retention_ms":1,"retention_bytes":-1,"max_message_bytes":10,"segment_bytes":100,"segment_ms":5}"#;
    let c: TopicConfig = serde_json::from_str(old).unwrap();
    assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
    assert!(!c.log_append_time);
}

#[test]
fn compaction_configs() {
    let mut c = TopicConfig::default();
    assert_eq!(c.log_config().compaction, None);
    assert_eq!(c.get("min.cleanable.dirty.ratio").unwrap(), "0.5");
    assert_eq!(c.get("delete.retention.ms").unwrap(), "86400000");
    c.set("cleanup.policy", "compact").unwrap();
    c.set("min.cleanable.dirty.ratio", "0.01").unwrap();
    c.set("delete.retention.ms", "100").unwrap();
    c.set("max.compaction.lag.ms", "60000").unwrap();
    c.set("min.compaction.lag.ms", "5").unwrap();
    assert_eq!(c.get("min.cleanable.dirty.ratio").unwrap(), "0.01");
    let l = c.log_config();
    let k = l.compaction.unwrap();
    assert_eq!(
        (
            k.delete_retention_ms,
            k.min_lag_ms,
            k.max_lag_ms,
            k.min_dirty_ratio_ppm
        ),
        (100, 5, 60000, 10_000)
    );
    // The active segment rolls by the max lag.
    assert_eq!(l.segment_ms, 60000);
    for (name, bad) in [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "x"),
        ("delete.retention.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
    ] {
        let e = c.set(name, bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{name}={bad}");
    }
    assert!(c.is_set("min.cleanable.dirty.ratio"));
    c.reset("min.cleanable.dirty.ratio").unwrap();
    assert_eq!(c.min_cleanable_dirty_ratio_ppm, 500_000);
    assert!(!c.is_set("min.cleanable.dirty.ratio"));
    // Older catalogs read with Kafka's defaults.
    let old = r#"{"retention_ms":1,"retention_bytes":-1,"max_message_bytes":10,"segment_bytes":100,"segment_ms":5,"explicit":3}"#;
    let c: TopicConfig = serde_json::from_str(old).unwrap();
    assert_eq!(c.max_compaction_lag_ms, i64::MAX);
    assert_eq!(c.delete_retention_ms, 86_400_000);
}

#[test]
fn message_timestamp_type() {
    let mut c = TopicConfig::default();
    assert_eq!(c.get("message.timestamp.type").unwrap(), "CreateTime");
    c.set("message.timestamp.type", "LogAppendTime").unwrap();
    assert!(c.log_config().log_append_time);
    assert_eq!(c.get("message.timestamp.type").unwrap(), "LogAppendTime");
    let e = c.set("message.timestamp.type", "Now").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    c.reset("message.timestamp.type").unwrap();
    assert!(!c.log_config().log_append_time);
}

#[test]
fn a_topic_default_comes_from_the_node_then_the_cluster_then_the_flags() {
    use crate::catalog::DefaultFrom;
    let dir = std::env::temp_dir();
    let addr = "127.0.0.1:1".parse().unwrap();
    let mut node = crate::NodeConfig::new(dir.clone(), addr, addr);
    node.node_id = 3;
    node.topic_defaults
        .insert("retention.ms".into(), "86400000".into());
    let cat_dir = dir.join(format!("weir-defaults-{}", std::process::id()));
    std::fs::create_dir_all(&cat_dir).unwrap();
    let mut cat = Catalog::load_or_create(&cat_dir, 1).unwrap();
    std::fs::remove_dir_all(&cat_dir).unwrap();
    let topic = |name: &str| TopicMeta {
        shards: vec![0],
        nodes: Vec::new(),
        replication: Vec::new(),
        name: name.to_string(),
        id: new_topic_id(),
        config: TopicConfig::default(),
        schema: None,
        throttled_replicas: Default::default(),
    };
    cat.topics.insert("t".into(), topic("t"));
    cat.topics.insert(GROUPS_TOPIC.into(), topic(GROUPS_TOPIC));
    let default = |cat: &Catalog| cat.topic_default(&node, "retention.ms").unwrap();
    assert_eq!(default(&cat), ("86400000".into(), DefaultFrom::Static));
    assert_eq!(
        cat.topic_default(&node, "min.insync.replicas").unwrap(),
        ("2".into(), DefaultFrom::Static),
        "weir's own default"
    );
    assert_eq!(
        cat.topic_default(&node, "segment.ms").unwrap().1,
        DefaultFrom::Kafka
    );
    // A snapshot from a node with other defaults is copied to follow ours;
    // one that already does is installed as it is.
    use std::sync::Arc;
    let theirs = Arc::new(cat.clone());
    let ours = Catalog::with_topic_defaults(theirs.clone(), &node);
    assert_eq!(ours.topics["t"].config.retention_ms, 86_400_000);
    assert_eq!(
        ours.topics[GROUPS_TOPIC].config.retention_ms, 604_800_000,
        "the group log keeps its own"
    );
    assert!(Arc::ptr_eq(
        &ours,
        &Catalog::with_topic_defaults(ours.clone(), &node)
    ));
    // Set at run time: the cluster-wide default outranks the flags, and
    // this node's own outranks both; another node's is not ours.
    let set = |cat: &mut Catalog, resource: &str, v: &str| {
        cat.node_configs
            .entry(resource.to_string())
            .or_default()
            .insert("log.retention.ms".to_string(), v.to_string());
    };
    set(&mut cat, "", "7200000");
    set(&mut cat, "4", "1000");
    assert_eq!(default(&cat), ("7200000".into(), DefaultFrom::Cluster));
    set(&mut cat, "3", "3600000");
    assert_eq!(default(&cat), ("3600000".into(), DefaultFrom::Node));
    // Node 4's catalog, as the quorum carries it after node 4 changed it:
    // node 3 installs its own copy, following its own defaults.
    let mut node4 = node.clone();
    node4.node_id = 4;
    node4.topic_defaults.clear();
    let mut from4 = cat.clone();
    from4.follow_topic_defaults(&node4);
    assert_eq!(from4.topics["t"].config.retention_ms, 1000);
    let mine = Catalog::with_topic_defaults(Arc::new(from4), &node);
    assert_eq!(mine.topics["t"].config.retention_ms, 3_600_000);
    assert!(Arc::ptr_eq(
        &mine,
        &Catalog::with_topic_defaults(mine.clone(), &node)
    ));
    // The quorum's elections read unclean.leader.election.enable: no one
    // node's setting counts, only the cluster-wide one.
    let unclean = "unclean.leader.election.enable";
    node.topic_defaults.insert(unclean.into(), "true".into());
    cat.node_configs
        .get_mut("3")
        .unwrap()
        .insert(unclean.into(), "true".into());
    assert_eq!(
        cat.topic_default(&node, unclean).unwrap(),
        ("false".into(), DefaultFrom::Kafka)
    );
    assert!(check_node_config("3", unclean, "true").is_err());
    assert_eq!(check_node_config("", unclean, "TRUE").unwrap(), "true");
    // Flags that no topic could follow together stop the start.
    let statics = std::collections::BTreeMap::from([
        ("min.compaction.lag.ms".to_string(), "10000".to_string()),
        ("max.compaction.lag.ms".to_string(), "5000".to_string()),
    ]);
    let why = check_static_defaults(&statics).unwrap_err();
    assert!(
        why.contains("the topic defaults given to the node"),
        "{why}"
    );
    assert!(check_static_defaults(&node.topic_defaults).is_ok());
}
