//! DescribeLogDirs (key 35): the node's one log directory (its data
//! directory) with each partition's size on disk, and (v4) the file
//! system's size and free space, as `kafka-log-dirs`, kafka-ui and Cruise
//! Control read them. A partition is never behind (offset lag 0) and never
//! moving between directories. Needs DESCRIBE on the cluster, as Kafka.

use std::collections::HashSet;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use weir_core::auth::acl::{Operation, ResourceType, CLUSTER};
use weir_core::{ErrorCode, TopicPartition};

use super::{str, RequestContext};

pub const MIN: i16 = 1;
pub const MAX: i16 = 4;

pub async fn handle(cx: &RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let shard = &cx.shard;
    let version = cx.version;
    let caller = &cx.caller;
    if !caller.may(shard, Operation::Describe, ResourceType::Cluster, CLUSTER) {
        // v3+ says why at the top; earlier versions by an empty answer.
        return DescribeLogDirsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
    }
    // `None`: every partition; else those asked for.
    let wanted: Option<HashSet<TopicPartition>> = req.topics.map(|ts| {
        ts.into_iter()
            .flat_map(|t| {
                let name: std::sync::Arc<str> = t.topic.0.as_str().into();
                t.partitions
                    .into_iter()
                    .map(move |p| TopicPartition::new(name.clone(), p))
            })
            .collect()
    });
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for (tp, bytes) in shard.log_sizes().await {
        if wanted.as_ref().is_some_and(|w| !w.contains(&tp)) {
            continue;
        }
        let (topic, partition) = (tp.topic(), tp.partition);
        let entry = DescribeLogDirsPartition::default()
            .with_partition_index(partition)
            .with_partition_size(bytes as i64);
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(entry),
            _ => topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str(topic)))
                    .with_partitions(vec![entry]),
            ),
        }
    }
    let dir = &shard.config.data_dir;
    let dir_name = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(str(&dir_name.to_string_lossy()))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1);
    if version >= 4 {
        match shard.disk_space() {
            Ok((total, usable)) => {
                result = result
                    .with_total_bytes(total as i64)
                    .with_usable_bytes(usable as i64)
            }
            Err(e) => log::warn!("DescribeLogDirs: the size of {}: {e}", dir.display()),
        }
    }
    DescribeLogDirsResponse::default().with_results(vec![result])
}
