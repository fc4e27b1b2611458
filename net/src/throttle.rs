//! Client quotas enforced on a connection's requests, as Kafka's request
//! path applies its quota managers (`weir_core::quota` keeps the limits
//! and rates): a produce counts its request's bytes, a consumer's fetch
//! its answer's bytes, and every request its handler's time on this
//! shard. Past a limit the answer carries `throttle_time_ms` (KIP-219:
//! the client waits that long before its next request to the node) and
//! the connection reads no more than its next frame's length for that
//! long; a throttled fetch is answered empty, its bytes not counted, as
//! Kafka answers it.

use std::future::Future;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FetchResponse, RequestKind, ResponseKind};
use weir_core::quota::{self, Kind};

use crate::handlers::RequestContext;

/// The user and client id a request's limits are looked up by, when the
/// catalog sets any limit at all.
pub struct Who {
    user: String,
    client_id: String,
    quotas: std::sync::Arc<weir_core::catalog::Catalog>,
}

impl Who {
    pub fn of(cx: &RequestContext) -> Option<Who> {
        if !cx.shard.quotas_set() {
            return None;
        }
        let catalog = cx.shard.catalog();
        let name = cx.caller.principal.kafka_name();
        Some(Who {
            user: name.strip_prefix("User:").unwrap_or(&name).to_string(),
            client_id: cx.client_id.as_deref().unwrap_or("").to_string(),
            quotas: catalog,
        })
    }

    fn limit(&self, kind: Kind) -> Option<quota::Limit> {
        quota::limit(&self.quotas.quotas, kind, &self.user, &self.client_id)
    }

    /// Whether requests' handler time is counted.
    pub fn timed(&self) -> bool {
        quota::any(&self.quotas.quotas, Kind::Request)
    }

    /// The most a consumer's fetch may carry under its limit (Kafka caps
    /// `fetch.max.bytes` so one answer cannot be throttled for ever).
    pub fn max_fetch_bytes(&self) -> Option<i32> {
        self.limit(Kind::Fetch)
            .map(|l| quota::max_fetch_bytes(l.bound))
    }

    /// Records a request's use that does not depend on its answer's size
    /// (a produce's request bytes, its handler time) and answers the
    /// throttle time, ms.
    pub async fn before_answer(
        &self,
        cx: &RequestContext,
        key: ApiKey,
        request_bytes: usize,
        busy: Duration,
        held: bool,
    ) -> u32 {
        let mut ms = 0;
        if key == ApiKey::Produce {
            if let Some(l) = self.limit(Kind::Produce) {
                ms = cx
                    .shard
                    .record_quota(Kind::Produce, l, request_bytes as f64)
                    .await;
            }
        }
        if held {
            if let Some(l) = self.limit(Kind::Request) {
                let percent = busy.as_secs_f64() * 100.0;
                ms = ms.max(cx.shard.record_quota(Kind::Request, l, percent).await);
            }
        }
        ms
    }

    /// Records a consumer's fetch answer of `bytes` and answers the
    /// throttle time, at least `so_far`; a throttled answer's bytes are
    /// taken back, since it is answered empty.
    pub async fn fetched(&self, cx: &RequestContext, bytes: usize, so_far: u32) -> u32 {
        let Some(l) = self.limit(Kind::Fetch) else {
            return so_far;
        };
        let ms = cx
            .shard
            .record_quota(Kind::Fetch, l.clone(), bytes as f64)
            .await;
        let ms = ms.max(so_far);
        if ms > 0 {
            cx.shard.record_quota(Kind::Fetch, l, -(bytes as f64)).await;
        }
        ms
    }
}

/// Whether a request is held to its caller's limits: a follower's fetch
/// is not (replication is not a client's traffic), nor an acks=0 produce
/// to the request limit (it has no answer to carry a throttle time), as
/// in Kafka.
pub fn held(body: &RequestKind, version: i16) -> bool {
    match body {
        RequestKind::Fetch(f) => {
            let replica = match version >= 15 {
                true => f.replica_state.replica_id.0,
                false => f.replica_id.0,
            };
            replica < 0
        }
        RequestKind::Produce(p) => p.acks != 0,
        _ => true,
    }
}

/// `work`'s output and the time spent polling it on this shard.
pub async fn timed<F: Future>(work: F) -> (F::Output, Duration) {
    let mut work = std::pin::pin!(work);
    let mut spent = Duration::ZERO;
    let out = std::future::poll_fn(|task| {
        let start = Instant::now();
        let polled = work.as_mut().poll(task);
        spent += start.elapsed();
        polled
    })
    .await;
    (out, spent)
}

/// A throttled fetch's answer: no records, the session as it was.
pub fn empty_fetch(answer: &ResponseKind, ms: u32) -> ResponseKind {
    let session_id = match answer {
        ResponseKind::Fetch(f) => f.session_id,
        _ => 0,
    };
    ResponseKind::Fetch(
        FetchResponse::default()
            .with_session_id(session_id)
            .with_throttle_time_ms(ms.min(i32::MAX as u32) as i32),
    )
}

/// Sets `throttle_time_ms` in an answer of an API that carries one (the
/// codec leaves it out of versions without it).
pub fn set_throttle_time(answer: &mut ResponseKind, ms: u32) {
    let ms = ms.min(i32::MAX as u32) as i32;
    macro_rules! set {
        ($($api:ident),*) => {
            match answer {
                $(ResponseKind::$api(r) => r.throttle_time_ms = ms,)*
                _ => {}
            }
        };
    }
    set!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        OffsetForLeaderEpoch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        DescribeLogDirs,
        CreatePartitions,
        DeleteGroups,
        AlterConfigs,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeCluster,
        DescribeClientQuotas,
        AlterClientQuotas,
        ElectLeaders,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        UnregisterBroker,
        DescribeProducers,
        DescribeTopicPartitions,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe
    );
}
