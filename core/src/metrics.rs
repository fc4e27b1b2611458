//! `GET /metrics`: the node's metrics in the OpenMetrics text format that
//! Prometheus scrapes, written by the Prometheus project's Rust client
//! (`prometheus-client`).
//!
//! Nothing is kept for it: a scrape asks every shard for a `ShardSample`
//! (its counters, its partitions' offsets and sizes, its groups' committed
//! offsets, its histograms) over the mesh, one hop per shard, and encodes
//! what comes back. Names follow Prometheus' conventions: `weir_` first,
//! base units (`_bytes`, `_seconds`), counters ending `_total`.

use std::collections::BTreeMap;
use std::rc::Rc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeCounterValue};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::counters::{ApiLatency, Kind, LATENCY_BUCKETS, METRICS};
use crate::latency::Histograms;
use crate::shard::{Shard, ShardReport};

/// The content type of `GET /metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One partition at a scrape, from its owner.
#[derive(Debug, Clone)]
pub struct PartitionSample {
    pub topic: String,
    pub partition: i32,
    pub log_start: i64,
    pub log_end: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    /// Compacted topics only.
    pub cleaned_to: Option<i64>,
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub follower_reads: u64,
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    /// Batches found failing their CRC-32C (never served).
    pub corrupt_batches: u64,
    /// A replicated partition's copy here (`None`: not replicated).
    pub replica: Option<ReplicaSample>,
}

/// A replicated partition's copy on this node, at a scrape.
#[derive(Debug, Clone)]
pub struct ReplicaSample {
    pub leader_epoch: i32,
    /// Set on the leader's copy only.
    pub leading: Option<LeaderSample>,
}

/// What a leader knows of its partition's replicas.
#[derive(Debug, Clone)]
pub struct LeaderSample {
    pub replicas: usize,
    pub in_sync: usize,
    /// `min.insync.replicas` (capped by the replicas).
    pub min_in_sync: usize,
    /// Each follower's lag in records: the leader's log end less what it
    /// holds durably (the whole log end if it has not fetched this epoch).
    /// Each follower's lag: records, and bytes of the log.
    pub follower_lag: Vec<(i32, i64, u64)>,
}

/// Node-wide replication state, from this node's catalog and quorum.
#[derive(Debug, Clone, Default)]
pub struct ClusterSample {
    /// Replicated partitions with no leader (every in-sync replica fenced).
    pub offline_partitions: usize,
    /// Whether this node leads the metadata quorum.
    pub controller: bool,
}

/// One shard's part of a scrape.
#[derive(Debug, Clone)]
pub struct ShardSample {
    pub report: ShardReport,
    pub partitions: Vec<PartitionSample>,
    /// (group, topic, partition, committed offset) of its groups.
    pub committed: Vec<(String, String, i32, i64)>,
    pub histograms: Histograms,
    /// Requests by API key.
    pub apis: BTreeMap<i16, ApiLatency>,
    /// Error codes answered by (API key, code): name and count.
    pub errors: BTreeMap<(i16, i16), (String, u64)>,
    /// Time the shard's executor spent running tasks.
    pub busy_seconds: f64,
}

impl Shard {
    /// Every shard's part of a `/metrics` scrape, gathered over the mesh
    /// (hops not counted).
    pub async fn samples(self: &Rc<Self>) -> Vec<ShardSample> {
        let all = (0..self.nr_shards).map(|i| self.send_job(i, |s| async move { s.sample() }));
        futures::future::join_all(all)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// This shard's part of a scrape.
    pub fn sample(&self) -> ShardSample {
        let partitions = self
            .owned_partitions()
            .into_iter()
            .map(|p| {
                let c = &p.counters;
                PartitionSample {
                    topic: p.topic.clone(),
                    partition: p.index,
                    log_start: p.log.log_start(),
                    log_end: p.log.log_end(),
                    high_watermark: p.log.high_watermark(),
                    size_bytes: p.log.size_bytes(),
                    cleaned_to: p.log.config().compaction.map(|_| p.log.cleaned_to()),
                    bytes_in: c.bytes_in.get(),
                    records_in: c.records_in.get(),
                    bytes_out: c.bytes_out.get(),
                    records_out: c.records_out.get(),
                    cache_hits: c.cache_hits.get(),
                    cache_misses: c.cache_misses.get(),
                    follower_reads: c.follower_reads.get(),
                    isr_shrinks: c.isr_shrinks.get(),
                    isr_expands: c.isr_expands.get(),
                    corrupt_batches: p.log.corrupt_batches(),
                    replica: replica_sample(&p),
                }
            })
            .collect();
        let committed = self.groups.committed_offsets();
        ShardSample {
            report: self.report(),
            partitions,
            committed,
            histograms: self.stats.latency.snapshot(),
            apis: self.stats.apis.borrow().clone(),
            errors: self.stats.errors.borrow().clone(),
            busy_seconds: glommio::executor()
                .executor_stats()
                .total_runtime()
                .as_secs_f64(),
        }
    }
}

/// A partition's replication state here, if it is replicated.
fn replica_sample(p: &crate::partition::Partition) -> Option<ReplicaSample> {
    use crate::replication::leader::Role;
    let role = p.role.borrow();
    let leading = match &*role {
        Role::Alone => return None,
        Role::Leader(l) => {
            let end = p.log.log_end();
            Some(LeaderSample {
                replicas: l.replicas.len(),
                in_sync: l.isr.len(),
                min_in_sync: l.min_isr,
                follower_lag: l
                    .replicas
                    .iter()
                    .filter(|&&n| n != l.me)
                    .map(|n| {
                        let held = l.followers.get(n).and_then(|f| f.end).unwrap_or(0);
                        let bytes = match held < end {
                            true => p.log.bytes_from(held),
                            false => 0,
                        };
                        (*n, (end - held).max(0), bytes)
                    })
                    .collect(),
            })
        }
        Role::Follower { .. } | Role::Leaderless { .. } => None,
    };
    Some(ReplicaSample {
        leader_epoch: role.epoch(),
        leading,
    })
}

/// Every shard's sample, encoded: the body of `GET /metrics`. `api_name`
/// names an API key as Kafka does (`Produce`, `Fetch`, ...).
pub async fn render(shard: &Rc<Shard>, api_name: fn(i16) -> String) -> String {
    let samples = shard.samples().await;
    let (disk_total, disk_free) =
        weir_storage::disk_space(&shard.config.data_dir).unwrap_or((0, 0));
    let mut registry = Registry::default();
    let cluster = match &shard.cluster {
        Some(control) => {
            let cat = shard.catalog();
            ClusterSample {
                offline_partitions: cat
                    .replicated()
                    .filter(|(_, _, leader, _)| *leader == crate::catalog::NO_LEADER)
                    .count(),
                controller: control.controller() == Some(shard.config.node_id),
            }
        }
        None => ClusterSample::default(),
    };
    let api_names = samples
        .iter()
        .flat_map(|s| s.apis.keys().chain(s.errors.keys().map(|(api, _)| api)))
        .map(|k| (*k, api_name(*k)))
        .collect();
    registry.register_collector(Box::new(Scrape {
        samples,
        api_names,
        disk_total,
        disk_free,
        cluster,
    }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[derive(Debug)]
struct Scrape {
    samples: Vec<ShardSample>,
    api_names: BTreeMap<i16, String>,
    disk_total: u64,
    disk_free: u64,
    cluster: ClusterSample,
}

type Labels = Vec<(&'static str, String)>;

/// Writes a gauge family: each sample its labels and value.
fn gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    samples: impl IntoIterator<Item = (Labels, i64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    for (labels, v) in samples {
        if labels.is_empty() {
            m.encode_gauge(&v)?;
        } else {
            m.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

/// Writes a counter family (its name gets `_total`).
fn counter<V: EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    samples: impl IntoIterator<Item = (Labels, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    for (labels, v) in samples {
        m.encode_family(&labels)?
            .encode_counter::<Labels, V, f64>(&v, None::<&Exemplar<Labels, f64>>)?;
    }
    Ok(())
}

fn shard_label(s: &ShardSample) -> Labels {
    vec![("shard", s.report.shard.to_string())]
}

fn partition_labels(p: &PartitionSample) -> Labels {
    vec![
        ("topic", p.topic.clone()),
        ("partition", p.partition.to_string()),
    ]
}

impl Collector for Scrape {
    /// The families in their order: partitions, groups, shards, memory,
    /// executors, errors, the data directory, histograms.
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.write_partitions(&mut enc)?;
        self.write_replication(&mut enc)?;
        self.write_groups(&mut enc)?;
        self.write_shards(&mut enc)?;
        self.write_memory(&mut enc)?;
        self.write_executors(&mut enc)?;
        self.write_errors(&mut enc)?;
        self.write_data_dir(&mut enc)?;
        self.write_histograms(&mut enc)
    }
}

impl Scrape {
    /// Every shard's partitions.
    fn parts(&self) -> impl Iterator<Item = &PartitionSample> {
        self.samples.iter().flat_map(|s| s.partitions.iter())
    }

    /// One value per shard, labelled with the shard.
    fn per_shard(&self, f: &dyn Fn(&ShardReport) -> u64) -> Vec<(Labels, u64)> {
        self.samples
            .iter()
            .map(|s| (shard_label(s), f(&s.report)))
            .collect::<Vec<_>>()
    }

    /// Partitions: offsets, sizes, bytes and records in and out, cache reads.
    fn write_partitions(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let parts = || self.parts();
        let each = |f: fn(&PartitionSample) -> i64| {
            parts()
                .map(move |p| (partition_labels(p), f(p)))
                .collect::<Vec<_>>()
        };
        let each_count = |f: fn(&PartitionSample) -> u64| {
            parts()
                .map(move |p| (partition_labels(p), f(p)))
                .collect::<Vec<_>>()
        };
        // Partitions.
        gauge(
            enc,
            "weir_partition_log_start_offset",
            "The first offset a reader may fetch.",
            None,
            each(|p| p.log_start),
        )?;
        gauge(
            enc,
            "weir_partition_log_end_offset",
            "The next offset to be assigned.",
            None,
            each(|p| p.log_end),
        )?;
        gauge(
            enc,
            "weir_partition_high_watermark",
            "Everything below is durable and readable.",
            None,
            each(|p| p.high_watermark),
        )?;
        gauge(
            enc,
            "weir_partition_log_size",
            "Bytes of the partition's segments.",
            Some(Unit::Bytes),
            each(|p| p.size_bytes as i64),
        )?;
        gauge(
            enc,
            "weir_partition_cleaned_offset",
            "Compaction has cleaned the log below this offset (compacted topics).",
            None,
            parts().filter_map(|p| p.cleaned_to.map(|c| (partition_labels(p), c))),
        )?;
        counter(
            enc,
            "weir_partition_in",
            "Bytes of record batches appended (as stored).",
            Some(Unit::Bytes),
            each_count(|p| p.bytes_in),
        )?;
        counter(
            enc,
            "weir_partition_in_records",
            "Records appended.",
            None,
            each_count(|p| p.records_in),
        )?;
        counter(
            enc,
            "weir_partition_out",
            "Bytes of record batches read (fetches and SQL scans).",
            Some(Unit::Bytes),
            each_count(|p| p.bytes_out),
        )?;
        counter(
            enc,
            "weir_partition_out_records",
            "Records read (fetches and SQL scans), transaction markers not counted.",
            None,
            each_count(|p| p.records_out),
        )?;
        counter(
            enc,
            "weir_partition_cache_hits",
            "Reads served from the tail cache.",
            None,
            each_count(|p| p.cache_hits),
        )?;
        counter(
            enc,
            "weir_partition_cache_misses",
            "Reads served from the log on disk.",
            None,
            each_count(|p| p.cache_misses),
        )?;
        counter(
            enc,
            "weir_partition_follower_reads",
            "Consumer fetches this node served as a follower, to a client in its rack (KIP-392).",
            None,
            each_count(|p| p.follower_reads),
        )?;
        counter(
            enc,
            "weir_partition_isr_shrinks",
            "In-sync replica sets shrunk while this node led the partition.",
            None,
            each_count(|p| p.isr_shrinks),
        )?;
        counter(
            enc,
            "weir_partition_isr_expands",
            "In-sync replica sets grown while this node led the partition.",
            None,
            each_count(|p| p.isr_expands),
        )?;
        counter(
            enc,
            "weir_partition_corrupt_batches",
            "Batches on disk found failing their CRC-32C check, never served (each counted once).",
            None,
            each_count(|p| p.corrupt_batches),
        )?;
        Ok(())
    }

    /// Replicated partitions: leadership, ISR sizes, followers' lag, and
    /// the node's counts of under-replicated, under-min-ISR, led and
    /// offline partitions (Kafka's ReplicaManager and controller gauges).
    fn write_replication(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let replicated = || {
            self.parts()
                .filter_map(|p| p.replica.as_ref().map(|r| (p, r)))
        };
        let led = || replicated().filter_map(|(p, r)| r.leading.as_ref().map(|l| (p, l)));
        gauge(
            enc,
            "weir_partition_leader",
            "1 where this node leads the replicated partition, 0 where it follows.",
            None,
            replicated().map(|(p, r)| (partition_labels(p), r.leading.is_some() as i64)),
        )?;
        gauge(
            enc,
            "weir_partition_leader_epoch",
            "The leader epoch this node's copy is in.",
            None,
            replicated().map(|(p, r)| (partition_labels(p), r.leader_epoch as i64)),
        )?;
        gauge(
            enc,
            "weir_partition_replicas",
            "Replicas of a partition this node leads.",
            None,
            led().map(|(p, l)| (partition_labels(p), l.replicas as i64)),
        )?;
        gauge(
            enc,
            "weir_partition_in_sync_replicas",
            "In-sync replicas of a partition this node leads.",
            None,
            led().map(|(p, l)| (partition_labels(p), l.in_sync as i64)),
        )?;
        gauge(
            enc,
            "weir_partition_replica_lag_records",
            "Records a follower lacks durably, as its leader (this node) sees it.",
            None,
            led().flat_map(|(p, l)| {
                l.follower_lag.iter().map(move |(n, lag, _)| {
                    let mut labels = partition_labels(p);
                    labels.push(("replica", n.to_string()));
                    (labels, *lag)
                })
            }),
        )?;
        gauge(
            enc,
            "weir_partition_replica_lag",
            "Bytes of the log a follower lacks durably, as its leader (this node) sees it (to within an index interval).",
            Some(Unit::Bytes),
            led().flat_map(|(p, l)| {
                l.follower_lag.iter().map(move |(n, _, bytes)| {
                    let mut labels = partition_labels(p);
                    labels.push(("replica", n.to_string()));
                    (labels, *bytes as i64)
                })
            }),
        )?;
        let count = |f: &dyn Fn(&LeaderSample) -> bool| led().filter(|(_, l)| f(l)).count() as i64;
        gauge(
            enc,
            "weir_leader_partitions",
            "Replicated partitions this node leads.",
            None,
            [(vec![], count(&|_| true))],
        )?;
        gauge(
            enc,
            "weir_under_replicated_partitions",
            "Partitions this node leads with a replica out of sync.",
            None,
            [(vec![], count(&|l| l.in_sync < l.replicas))],
        )?;
        gauge(
            enc,
            "weir_under_min_isr_partitions",
            "Partitions this node leads with fewer in-sync replicas than min.insync.replicas (acks=all refused).",
            None,
            [(vec![], count(&|l| l.in_sync < l.min_in_sync))],
        )?;
        gauge(
            enc,
            "weir_offline_partitions",
            "Replicated partitions of the cluster with no leader, as this node's catalog has them.",
            None,
            [(vec![], self.cluster.offline_partitions as i64)],
        )?;
        gauge(
            enc,
            "weir_controller",
            "1 where this node leads the cluster's metadata quorum.",
            None,
            [(vec![], self.cluster.controller as i64)],
        )
    }

    /// Consumer groups: committed offsets and lag.
    fn write_groups(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        // Consumer groups: lag against the high watermark.
        let hw: BTreeMap<(&str, i32), i64> = self
            .parts()
            .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
            .collect();
        let committed: Vec<_> = self
            .samples
            .iter()
            .flat_map(|s| s.committed.iter())
            .collect();
        let group_labels = |(g, t, p, _): &&(String, String, i32, i64)| -> Labels {
            vec![
                ("group", g.clone()),
                ("topic", t.clone()),
                ("partition", p.to_string()),
            ]
        };
        gauge(
            enc,
            "weir_group_committed_offset",
            "A group's committed offset.",
            None,
            committed.iter().map(|c| (group_labels(c), c.3)),
        )?;
        gauge(
            enc,
            "weir_group_lag",
            "Records between a group's committed offset and the high watermark.",
            None,
            committed.iter().filter_map(|c| {
                hw.get(&(c.1.as_str(), c.2))
                    .map(|hw| (group_labels(c), (hw - c.3).max(0)))
            }),
        )?;
        Ok(())
    }

    /// Shards: every counter a shard declares, its partitions, sign-in
    /// failures, its tail cache.
    fn write_shards(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        // Shards.
        // Every counter a shard declares (`crate::counters`).
        for m in METRICS {
            let unit = match m.unit {
                crate::counters::Unit::None => None,
                crate::counters::Unit::Bytes => Some(Unit::Bytes),
            };
            let values = self.per_shard(&|r| (m.value)(&r.counters));
            match m.kind {
                Kind::Counter => counter(enc, m.name, m.help, unit, values)?,
                Kind::Gauge => gauge(
                    enc,
                    m.name,
                    m.help,
                    unit,
                    values.into_iter().map(|(l, v)| (l, v as i64)),
                )?,
            }
        }
        gauge(
            enc,
            "weir_shard_partitions",
            "Partitions the shard owns.",
            None,
            self.samples
                .iter()
                .map(|s| (shard_label(s), s.report.partitions as i64)),
        )?;
        counter(
            enc,
            "weir_sign_in_failures",
            "Failed SASL sign-ins.",
            None,
            self.per_shard(&|r| r.sign_in_failures),
        )?;
        gauge(
            enc,
            "weir_tail_cache",
            "Bytes of batches in the shard's tail cache.",
            Some(Unit::Bytes),
            self.samples
                .iter()
                .map(|s| (shard_label(s), s.report.cache_bytes as i64)),
        )?;
        Ok(())
    }

    /// Each shard's memory for request frames and fetch answers.
    fn write_memory(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let memory = |f: fn(&crate::memory::MemoryReport) -> i64| {
            self.samples.iter().flat_map(move |s| {
                [
                    ("requests", &s.report.request_memory),
                    ("answers", &s.report.answer_memory),
                ]
                .map(|(kind, m)| {
                    let mut labels = shard_label(s);
                    labels.push(("kind", kind.to_string()));
                    (labels, f(m))
                })
            })
        };
        gauge(
            enc,
            "weir_memory_held",
            "Bytes held of the shard's memory for request frames (kind=requests) and fetch answers not yet sent (kind=answers).",
            Some(Unit::Bytes),
            memory(|m| m.held as i64),
        )?;
        gauge(
            enc,
            "weir_memory_peak",
            "The most bytes of that memory held at once since start.",
            Some(Unit::Bytes),
            memory(|m| m.peak as i64),
        )?;
        gauge(
            enc,
            "weir_memory_limit",
            "That memory's limit (--request-memory-bytes, --answer-memory-bytes).",
            Some(Unit::Bytes),
            memory(|m| m.limit as i64),
        )?;
        counter(
            enc,
            "weir_memory_waits_timed_out",
            "Requests that waited for room in that memory past --socket-timeout-ms (their connections were closed), or fetches that found none within their wait.",
            None,
            memory(|m| m.timeouts as i64).map(|(l, v)| (l, v as u64)),
        )?;
        Ok(())
    }

    /// Each shard's executor: wake-ups the watchdog made, time busy.
    fn write_executors(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        counter(
            enc,
            "weir_lost_wakeups",
            "Times the watchdog woke the shard asleep past its heartbeat.",
            None,
            self.per_shard(&|r| r.lost_wakeups),
        )?;
        counter(
            enc,
            "weir_journal_writes",
            "The shard journal's writes (--journal), each one O_DSYNC write carrying every flush handed over meanwhile.",
            None,
            self.per_shard(&|r| r.journal_writes),
        )?;
        counter(
            enc,
            "weir_journal_written",
            "Bytes the shard journal's writes wrote (--journal).",
            Some(Unit::Bytes),
            self.per_shard(&|r| r.journal_written_bytes),
        )?;
        counter(
            enc,
            "weir_shard_busy",
            "Time the shard's executor spent running tasks.",
            Some(Unit::Seconds),
            self.samples
                .iter()
                .map(|s| (shard_label(s), s.busy_seconds)),
        )?;
        Ok(())
    }

    /// Errors answered, by API and error, summed over the shards.
    fn write_errors(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut errors: BTreeMap<(i16, &str), u64> = BTreeMap::new();
        for s in &self.samples {
            for ((api, _), (name, n)) in &s.errors {
                *errors.entry((*api, name.as_str())).or_default() += n;
            }
        }
        counter(
            enc,
            "weir_errors",
            "Errors answered, by API and error: one per error code in a response (a request's, each topic's, partition's, group's or resource's).",
            None,
            errors.iter().map(|((api, name), n)| {
                let api = self.api_names.get(api).cloned().unwrap_or_default();
                (vec![("api", api), ("error", name.to_string())], *n)
            }),
        )?;
        Ok(())
    }

    /// The data directory's file system.
    fn write_data_dir(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        gauge(
            enc,
            "weir_data_dir_free",
            "Bytes free to the node in the data directory's file system.",
            Some(Unit::Bytes),
            [(Labels::new(), self.disk_free as i64)],
        )?;
        gauge(
            enc,
            "weir_data_dir_size",
            "Bytes of the data directory's file system.",
            Some(Unit::Bytes),
            [(Labels::new(), self.disk_total as i64)],
        )?;
        Ok(())
    }

    /// Histograms: requests by API, then the produce path's.
    fn write_histograms(&self, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut apis: BTreeMap<i16, ApiLatency> = BTreeMap::new();
        for s in &self.samples {
            for (k, a) in &s.apis {
                apis.entry(*k).or_default().add(a);
            }
        }
        let mut m = enc.encode_descriptor(
            "weir_request_duration",
            "Kafka requests by API: from the last byte read to the answer ready.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (key, a) in &apis {
            let name = self.api_names.get(key).cloned().unwrap_or_default();
            let labels: Labels = vec![("api", name)];
            let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                .iter()
                .copied()
                .chain([f64::MAX])
                .zip(a.buckets)
                .collect();
            m.encode_family(&labels)?.encode_histogram::<Labels>(
                a.sum_seconds,
                a.count,
                &buckets,
                None,
            )?;
        }
        let mut merged = Histograms::default();
        for s in &self.samples {
            merged.merge(&s.histograms);
        }
        for (name, help, which) in [
            (
                "weir_produce_duration",
                "Produce requests (acks 1 or all) on the node: last byte read to answer ready.",
                0,
            ),
            (
                "weir_flush_write_duration",
                "A partition flush's durable write.",
                1,
            ),
            (
                "weir_flush_wait_duration",
                "A flush's wait for an earlier write it must follow.",
                2,
            ),
        ] {
            let (sum, count, buckets) = merged.buckets(which, &LATENCY_BUCKETS);
            let mut m =
                enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
            m.encode_histogram::<Labels>(sum, count, &buckets, None)?;
        }
        Ok(())
    }
}
