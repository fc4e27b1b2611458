//! What every workload prints: a progress line on stderr during long runs
//! and, with `--json`, one JSON object as the last line of stdout.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// A latency histogram in microseconds (1 µs to 60 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

pub struct Report {
    pub workload: &'static str,
    pub messages: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    /// Extra histograms by name (e2e: the long-poll wake latency).
    pub extra: Vec<(&'static str, Histogram<u64>)>,
    /// The node's own percentiles over the run (`--node-stats`).
    pub node: Option<serde_json::Value>,
}

fn percentiles(h: &Histogram<u64>) -> serde_json::Value {
    serde_json::json!({
        "p50": h.value_at_quantile(0.50),
        "p99": h.value_at_quantile(0.99),
        "p999": h.value_at_quantile(0.999),
        "max": h.max(),
    })
}

impl Report {
    pub fn print(&self, json: bool) {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let msgs_per_sec = self.messages as f64 / secs;
        let mb_per_sec = self.bytes as f64 / secs / 1e6;
        eprintln!(
            "{}: {} messages, {:.1} MB in {:.2} s: {:.0} msg/s, {:.1} MB/s; latency µs p50 {} p99 {} p99.9 {} max {}",
            self.workload,
            self.messages,
            self.bytes as f64 / 1e6,
            secs,
            msgs_per_sec,
            mb_per_sec,
            self.latency.value_at_quantile(0.5),
            self.latency.value_at_quantile(0.99),
            self.latency.value_at_quantile(0.999),
            self.latency.max()
        );
        for (name, h) in &self.extra {
            eprintln!(
                "{}: {name} µs p50 {} p99 {} p99.9 {} max {}",
                self.workload,
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            );
        }
        if let Some(node) = &self.node {
            for name in ["produce", "flush_write", "flush_wait"] {
                let p = &node[name];
                eprintln!(
                    "{}: node {name} µs p50 {} p99 {} p99.9 {} max {} ({} timed)",
                    self.workload, p["p50"], p["p99"], p["p999"], p["max"], p["count"]
                );
            }
        }
        if json {
            let mut obj = serde_json::json!({
                "workload": self.workload,
                "messages": self.messages,
                "bytes": self.bytes,
                "seconds": secs,
                "msgs_per_sec": msgs_per_sec,
                "mb_per_sec": mb_per_sec,
                "latency_us": percentiles(&self.latency),
            });
            for (name, h) in &self.extra {
                obj[format!("{name}_us")] = percentiles(h);
            }
            if let Some(node) = &self.node {
                obj["node_us"] = node.clone();
            }
            println!("{obj}");
        }
    }
}

/// Prints a progress line at most once a second.
pub struct Progress {
    last: Instant,
    start: Instant,
    what: &'static str,
}

impl Progress {
    pub fn new(what: &'static str) -> Progress {
        let now = Instant::now();
        Progress {
            last: now,
            start: now,
            what,
        }
    }

    pub fn tick(&mut self, done: u64, total: u64) {
        if self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            let rate = done as f64 / self.start.elapsed().as_secs_f64();
            eprintln!("{}: {done}/{total} ({rate:.0}/s)", self.what);
        }
    }
}
