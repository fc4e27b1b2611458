//! The one list of the Kafka APIs weir serves. ApiVersions advertises it
//! (`SERVED`), the codec admits requests by it (`supported_versions`) and
//! `dispatch` runs its handlers: an API is served exactly when it is here.

use kafka_protocol::messages::{ApiKey, RequestKind};

use crate::handlers::*;

/// Lists every API once: those a handler answers (`API => module`, the
/// module's `MIN`, `MAX` and `handle`), then the sign-in steps the
/// connection answers itself (`crate::sasl`), with their version ranges.
macro_rules! apis {
    (
        handlers { $($api:ident => $module:ident,)* }
        on_the_connection { $($signin:ident => ($min:expr, $max:expr),)* }
    ) => {
        /// Every API served, with its version range.
        pub const SERVED: &[(ApiKey, i16, i16)] = &[
            $((ApiKey::$api, $module::MIN, $module::MAX),)*
            $((ApiKey::$signin, $min, $max),)*
        ];

        /// Runs the handler of `body`'s API. The sign-in steps never reach
        /// here (the connection answers them in line): they get no answer.
        pub async fn dispatch(cx: &RequestContext, body: RequestKind) -> Reply {
            if let Some(refused) = authorize::refusal(&cx.shard, &cx.caller, &body) {
                return Reply::of(refused);
            }
            match body {
                $(RequestKind::$api(r) => $module::handle(cx, r).await.into_reply(),)*
                other => {
                    // The codec lets only listed APIs through.
                    log::error!("no handler for {:?}", std::mem::discriminant(&other));
                    Reply::none()
                }
            }
        }

        /// A request of every API a handler answers, each with its fields
        /// at their defaults.
        #[cfg(test)]
        fn every_handled_request() -> Vec<(ApiKey, RequestKind)> {
            vec![$((ApiKey::$api, RequestKind::$api(Default::default())),)*]
        }
    };
}

apis! {
    handlers {
        Produce => produce,
        Fetch => fetch,
        ListOffsets => list_offsets,
        Metadata => metadata,
        OffsetCommit => offset_commit,
        OffsetFetch => offset_fetch,
        OffsetForLeaderEpoch => offset_for_leader_epoch,
        FindCoordinator => find_coordinator,
        JoinGroup => join_group,
        Heartbeat => heartbeat,
        LeaveGroup => leave_group,
        SyncGroup => sync_group,
        DescribeGroups => describe_groups,
        ListGroups => list_groups,
        ApiVersions => api_versions,
        CreateTopics => create_topics,
        DeleteTopics => delete_topics,
        DeleteRecords => delete_records,
        InitProducerId => init_producer_id,
        AddPartitionsToTxn => add_partitions_to_txn,
        AddOffsetsToTxn => add_offsets_to_txn,
        EndTxn => end_txn,
        TxnOffsetCommit => txn_offset_commit,
        DescribeAcls => describe_acls,
        CreateAcls => create_acls,
        DeleteAcls => delete_acls,
        DescribeConfigs => describe_configs,
        DescribeLogDirs => describe_log_dirs,
        CreatePartitions => create_partitions,
        DeleteGroups => delete_groups,
        AlterConfigs => alter_configs,
        IncrementalAlterConfigs => incremental_alter_configs,
        OffsetDelete => offset_delete,
        DescribeClientQuotas => describe_client_quotas,
        AlterClientQuotas => alter_client_quotas,
        DescribeUserScramCredentials => describe_user_scram_credentials,
        AlterUserScramCredentials => alter_user_scram_credentials,
        DescribeCluster => describe_cluster,
        DescribeQuorum => describe_quorum,
        ElectLeaders => elect_leaders,
        AlterPartitionReassignments => alter_partition_reassignments,
        ListPartitionReassignments => list_partition_reassignments,
        UnregisterBroker => unregister_broker,
        DescribeProducers => describe_producers,
        DescribeTopicPartitions => describe_topic_partitions,
        DescribeTransactions => describe_transactions,
        ListTransactions => list_transactions,
        ConsumerGroupHeartbeat => consumer_group_heartbeat,
        ConsumerGroupDescribe => consumer_group_describe,
    }
    on_the_connection {
        SaslHandshake => (crate::sasl::HANDSHAKE_MIN, crate::sasl::HANDSHAKE_MAX),
        SaslAuthenticate => (crate::sasl::AUTHENTICATE_MIN, crate::sasl::AUTHENTICATE_MAX),
    }
}

/// ApiVersions (key 18): the APIs and versions this node serves. Here, not
/// among the handlers, because it answers with this list.
pub mod api_versions {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

    use super::SERVED;
    use crate::handlers::RequestContext;

    pub const MIN: i16 = 0;
    pub const MAX: i16 = 4;

    pub async fn handle(_cx: &RequestContext, _req: ApiVersionsRequest) -> ApiVersionsResponse {
        response(0)
    }

    /// The full list with an error code (UNSUPPORTED_VERSION is answered
    /// with the same list, encoded as v0).
    pub fn response(error_code: i16) -> ApiVersionsResponse {
        ApiVersionsResponse::default()
            .with_error_code(error_code)
            .with_api_keys(
                SERVED
                    .iter()
                    .map(|&(k, min, max)| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect(),
            )
    }
}

/// The versions of `key` served, if it is.
pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::BytesMut;
    use kafka_protocol::messages::ResponseKind;
    use weir_core::node::ServeFn;
    use weir_core::NodeConfig;

    use super::*;
    use crate::handlers::{Caller, RequestContext};

    /// On a real one-shard node, every listed API's request reaches its
    /// handler, and the answer is that API's response: it encodes at the
    /// highest version served and decodes back as the same API's response.
    #[test]
    fn every_listed_api_dispatches_to_its_own_response() {
        let dir = std::env::temp_dir().join(format!("weir-apis-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let local = "127.0.0.1:0".parse().expect("an address");
        let mut config = NodeConfig::new(dir.clone(), local, local);
        config.shards = 1;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Result<ApiKey, String>>>();
        let tx = std::sync::Mutex::new(tx);
        let serve: ServeFn = Arc::new(move |shard| {
            let tx = tx.lock().expect("the sender").clone();
            Ok(Box::pin(async move {
                let mut outcomes = Vec::new();
                for (key, mut body) in every_handled_request() {
                    if let RequestKind::Produce(p) = &mut body {
                        p.acks = -1; // acks=0 would have no answer
                    }
                    let (_, _, max) = *SERVED.iter().find(|(k, _, _)| *k == key).expect("listed");
                    let cx = RequestContext {
                        shard: shard.clone(),
                        caller: Caller {
                            principal: std::rc::Rc::new(weir_core::auth::Principal::Anonymous),
                            host: "/127.0.0.1".into(),
                            produce_turn: std::cell::Cell::new(None),
                        },
                        version: max,
                        client_id: Some(crate::handlers::str("apis-test")),
                    };
                    outcomes.push(match dispatch(&cx, body).await.body {
                        None => Err(format!("{key:?}: no answer")),
                        Some(answer) => same_api(key, max, &answer),
                    });
                }
                let _ = tx.send(outcomes);
                Ok(())
            }) as weir_core::node::Serving)
        });
        let node = weir_core::node::start(config, serve).expect("a node starts");
        let outcomes = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("every handler answers within a minute");
        node.stop_flag()
            .store(true, std::sync::atomic::Ordering::Relaxed);
        node.join();
        let _ = std::fs::remove_dir_all(&dir);
        let handled = SERVED.len() - 2; // the two sign-in steps are the connection's
        assert_eq!(outcomes.len(), handled);
        let failed: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
        assert!(failed.is_empty(), "{failed:#?}");
    }

    /// `Ok` when `answer` is `key`'s response: encoded at `version`, it
    /// decodes as `key`'s response into the same kind.
    fn same_api(key: ApiKey, version: i16, answer: &ResponseKind) -> Result<ApiKey, String> {
        let mut bytes = BytesMut::new();
        answer
            .encode(&mut bytes, version)
            .map_err(|e| format!("{key:?}: the answer does not encode at v{version}: {e}"))?;
        let decoded = ResponseKind::decode(key, &mut bytes.freeze(), version)
            .map_err(|e| format!("{key:?}: the answer is not its response: {e}"))?;
        if std::mem::discriminant(&decoded) != std::mem::discriminant(answer) {
            return Err(format!("{key:?}: answered with another API's response"));
        }
        Ok(key)
    }
}
