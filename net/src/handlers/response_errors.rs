//! The error codes a response carries, for `/metrics`' `weir_errors_total`:
//! every one a client would see, at whatever level the API puts them (the
//! request, a topic, a partition, a group, a resource, an ACL filter).

use std::collections::BTreeMap;

use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::ResponseError;
use weir_core::Shard;

/// Counts the errors in `body`, a response to API `key`, on `shard`.
pub fn record(shard: &Shard, key: ApiKey, body: &ResponseKind) {
    let mut counts: BTreeMap<i16, u64> = BTreeMap::new();
    visit(body, &mut |code| {
        if code != 0 {
            *counts.entry(code).or_default() += 1;
        }
    });
    for (code, n) in counts {
        shard.record_error(key as i16, code, || name(code), n);
    }
}

/// Kafka's name for an error code (`UnknownTopicOrPartition`).
fn name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(e) => format!("{e:?}"),
        None => format!("Code{code}"),
    }
}

/// Calls `f` with every error code in `body` (zeros included).
fn visit(body: &ResponseKind, f: &mut impl FnMut(i16)) {
    use ResponseKind as R;
    match body {
        R::ApiVersions(r) => f(r.error_code),
        R::Metadata(r) => {
            f(r.error_code);
            for t in &r.topics {
                f(t.error_code);
                t.partitions.iter().for_each(|p| f(p.error_code));
            }
        }
        R::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| f(p.error_code)),
        R::Fetch(r) => {
            f(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| f(p.error_code));
        }
        R::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        R::CreateTopics(r) => r.topics.iter().for_each(|t| f(t.error_code)),
        R::DeleteTopics(r) => r.responses.iter().for_each(|t| f(t.error_code)),
        R::CreatePartitions(r) => r.results.iter().for_each(|t| f(t.error_code)),
        R::DescribeConfigs(r) => r.results.iter().for_each(|t| f(t.error_code)),
        R::DescribeCluster(r) => f(r.error_code),
        R::DescribeQuorum(r) => {
            f(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| f(p.error_code));
        }
        R::FindCoordinator(r) => {
            f(r.error_code);
            r.coordinators.iter().for_each(|c| f(c.error_code));
        }
        R::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        R::IncrementalAlterConfigs(r) => r.responses.iter().for_each(|t| f(t.error_code)),
        R::AlterConfigs(r) => r.responses.iter().for_each(|t| f(t.error_code)),
        R::InitProducerId(r) => f(r.error_code),
        R::JoinGroup(r) => f(r.error_code),
        R::SyncGroup(r) => f(r.error_code),
        R::Heartbeat(r) => f(r.error_code),
        R::LeaveGroup(r) => {
            f(r.error_code);
            r.members.iter().for_each(|m| f(m.error_code));
        }
        R::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        R::OffsetFetch(r) => {
            f(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| f(p.error_code));
            for g in &r.groups {
                f(g.error_code);
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .for_each(|p| f(p.error_code));
            }
        }
        R::DescribeGroups(r) => r.groups.iter().for_each(|g| f(g.error_code)),
        R::ConsumerGroupHeartbeat(r) => f(r.error_code),
        R::ConsumerGroupDescribe(r) => r.groups.iter().for_each(|g| f(g.error_code)),
        R::DescribeLogDirs(r) => {
            f(r.error_code);
            r.results.iter().for_each(|d| f(d.error_code));
        }
        R::ListGroups(r) => f(r.error_code),
        R::DeleteGroups(r) => r.results.iter().for_each(|g| f(g.error_code)),
        R::DescribeAcls(r) => f(r.error_code),
        R::CreateAcls(r) => r.results.iter().for_each(|a| f(a.error_code)),
        R::DeleteAcls(r) => {
            for filter in &r.filter_results {
                f(filter.error_code);
                filter.matching_acls.iter().for_each(|a| f(a.error_code));
            }
        }
        R::DescribeUserScramCredentials(r) => {
            f(r.error_code);
            r.results.iter().for_each(|u| f(u.error_code));
        }
        R::AlterUserScramCredentials(r) => r.results.iter().for_each(|u| f(u.error_code)),
        R::AddPartitionsToTxn(r) => {
            f(r.error_code);
            r.results_by_transaction
                .iter()
                .flat_map(|t| &t.topic_results)
                .chain(&r.results_by_topic_v3_and_below)
                .flat_map(|t| &t.results_by_partition)
                .for_each(|p| f(p.partition_error_code));
        }
        R::AddOffsetsToTxn(r) => f(r.error_code),
        R::EndTxn(r) => f(r.error_code),
        R::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        R::DescribeTransactions(r) => r.transaction_states.iter().for_each(|t| f(t.error_code)),
        R::ListTransactions(r) => f(r.error_code),
        R::DescribeProducers(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        R::OffsetDelete(r) => {
            f(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| f(p.error_code));
        }
        R::SaslHandshake(r) => f(r.error_code),
        R::SaslAuthenticate(r) => f(r.error_code),
        // APIs the node does not serve answer nothing to count.
        _ => {}
    }
}
