//! A shard's counters, each declared once here: the list below makes the
//! `Cell`s the code bumps, the values `GET /stats` shows (`CounterValues`,
//! one field per counter, named as declared) and the families `GET
//! /metrics` encodes (`METRICS`: each counter's metric name, kind, unit and
//! help, the help being its doc comment). A new counter is one entry.

use std::cell::Cell;

/// Upper bounds (seconds) of the request latency buckets.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// One API's requests on a shard: how many, and how long each took from
/// its last byte read to its answer ready (a histogram over
/// `LATENCY_BUCKETS`, the last bucket past them all).
#[derive(Debug, Clone, Default)]
pub struct ApiLatency {
    pub count: u64,
    pub sum_seconds: f64,
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
}

impl ApiLatency {
    pub fn record(&mut self, seconds: f64) {
        self.count += 1;
        self.sum_seconds += seconds;
        let i = LATENCY_BUCKETS.partition_point(|b| *b < seconds);
        self.buckets[i] += 1;
    }

    pub fn add(&mut self, other: &ApiLatency) {
        self.count += other.count;
        self.sum_seconds += other.sum_seconds;
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
    }
}

/// How a counter is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows (Prometheus adds `_total`).
    Counter,
    /// Goes up and down (connections open now).
    Gauge,
}

/// The unit of a counter's metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    None,
    Bytes,
}

/// How one counter reaches `/metrics`.
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub help: &'static str,
    pub value: fn(&CounterValues) -> u64,
}

/// Adds `n` to `counter`.
pub fn add(counter: &Cell<u64>, n: u64) {
    counter.set(counter.get() + n);
}

macro_rules! counters {
    ($( #[doc = $help:literal] $name:ident: $kind:ident($metric:literal, $unit:ident); )*) => {
        /// One shard's counters (plain `Cell`s: a shard is one thread).
        #[derive(Debug, Default)]
        pub struct Counters {
            $( #[doc = $help] pub $name: Cell<u64>, )*
        }

        /// The counters' values at one moment.
        #[derive(Debug, Clone, Default, serde::Serialize)]
        pub struct CounterValues {
            $( pub $name: u64, )*
        }

        impl Counters {
            pub fn values(&self) -> CounterValues {
                CounterValues { $( $name: self.$name.get(), )* }
            }
        }

        /// Every counter's metric, in declaration order.
        pub const METRICS: &[Metric] = &[
            $( Metric {
                name: $metric,
                kind: Kind::$kind,
                unit: Unit::$unit,
                help: $help.trim_ascii(),
                value: |v| v.$name,
            }, )*
        ];
    };
}

counters! {
    /// Kafka requests received on the shard's connections.
    requests: Counter("weir_requests", None);
    /// Appends to the shard's partitions (one per partition of a produce).
    partition_appends: Counter("weir_partition_appends", None);
    /// Bytes of record batches appended to the shard's partitions, as produced.
    appended_bytes: Counter("weir_appended", Bytes);
    /// Fetch parts the shard served: one per shard a fetch touched.
    fetch_parts: Counter("weir_fetch_parts", None);
    /// Kafka connections accepted.
    connections: Counter("weir_connections_accepted", None);
    /// Kafka connections open.
    connections_open: Gauge("weir_connections_open", None);
    /// Jobs sent to another shard (the hops requests cost).
    hops_sent: Counter("weir_cross_shard_hops", None);
    /// Cleaning passes that rewrote segments.
    compactions: Counter("weir_compactions", None);
    /// Bytes cleaning passes read.
    compacted_bytes_in: Counter("weir_compaction_read", Bytes);
    /// Bytes cleaning passes wrote.
    compacted_bytes_out: Counter("weir_compaction_written", Bytes);
    /// Records cleaning passes removed.
    compacted_records_removed: Counter("weir_compaction_removed_records", None);
    /// Cleaning passes that failed.
    compaction_errors: Counter("weir_compaction_errors", None);
    /// Long-polling fetches that waited for data on the shard.
    fetch_waits: Counter("weir_fetch_waits", None);
    /// Fetch waits an append woke.
    fetch_wakes: Counter("weir_fetch_wakes", None);
    /// Fetch waits that reached their max wait.
    fetch_expiries: Counter("weir_fetch_expiries", None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_one_metric_with_its_value() {
        let c = Counters::default();
        c.fetch_wakes.set(7);
        c.appended_bytes.set(1024);
        let v = c.values();
        let value = |name: &str| {
            let m = METRICS.iter().find(|m| m.name == name).expect("listed");
            (m.value)(&v)
        };
        assert_eq!(value("weir_fetch_wakes"), 7);
        assert_eq!(value("weir_appended"), 1024);
        assert_eq!(value("weir_requests"), 0);
        let mut names: Vec<_> = METRICS.iter().map(|m| m.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), METRICS.len(), "a metric name used twice");
        assert!(METRICS.iter().all(|m| !m.help.is_empty()));
        // The /stats fields are the counters' names.
        let json = serde_json::to_value(&v).expect("serialises");
        assert_eq!(json["fetch_wakes"], 7);
    }
}
