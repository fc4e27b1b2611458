//! Latency histograms of one shard's work, for `GET /stats`: how long the
//! node itself takes, so a benchmark's client-side percentiles can be split
//! into the node's part and the rest (client, scheduler, network).
//!
//! - `produce`: a produce request (acks 1 or all) on the shard whose
//!   connection took it, from its last byte read to its response ready to
//!   send (Kafka's `TotalTimeMs` for Produce without the queueing before
//!   the read and the send after: both are spent as much by the client).
//! - `flush_write`: a partition flush's durable (O_DSYNC) write(s), on the
//!   partition's owner.
//! - `flush_wait`: how long a flush waited for an earlier write to land
//!   before its own (a flush that wrote a block it writes too, all of them
//!   before a retry after a failure, or zeros being written ahead where it
//!   writes); 0 for most.
//!
//! Cumulative since start or since the last `POST /stats/reset`; each
//! shard's are in `GET /stats`, all shards' merged in `GET /stats/latency`.

use std::cell::RefCell;
use std::time::Duration;

use hdrhistogram::Histogram;

/// The longest time recorded as itself (longer ones are clamped to it).
const MAX_MICROS: u64 = 60_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("valid histogram bounds")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = (d.as_micros() as u64).clamp(1, MAX_MICROS);
    h.record(us).expect("clamped into bounds");
}

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// What `/stats` shows of the histograms.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LatencyReport {
    pub produce: Percentiles,
    pub flush_write: Percentiles,
    pub flush_wait: Percentiles,
}

/// The histograms: one shard's, or several shards' merged.
#[derive(Clone)]
pub struct Histograms {
    produce: Histogram<u64>,
    flush_write: Histogram<u64>,
    flush_wait: Histogram<u64>,
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histograms")
            .field("produce", &self.produce.len())
            .field("flush_write", &self.flush_write.len())
            .field("flush_wait", &self.flush_wait.len())
            .finish()
    }
}

impl Default for Histograms {
    fn default() -> Self {
        Histograms {
            produce: histogram(),
            flush_write: histogram(),
            flush_wait: histogram(),
        }
    }
}

impl Histograms {
    /// Adds another shard's records (same bounds, so this cannot fail).
    pub fn merge(&mut self, other: &Histograms) {
        self.produce.add(&other.produce).expect("same bounds");
        self.flush_write
            .add(&other.flush_write)
            .expect("same bounds");
        self.flush_wait.add(&other.flush_wait).expect("same bounds");
    }

    /// One histogram (0: produce, 1: flush write, 2: flush wait) over
    /// `bounds` (seconds, ascending) for Prometheus: its sum (seconds), its
    /// count, and each bucket's own count, the last past every bound.
    pub fn buckets(&self, which: usize, bounds: &[f64]) -> (f64, u64, Vec<(f64, u64)>) {
        let h = [&self.produce, &self.flush_write, &self.flush_wait][which];
        let mut out = Vec::with_capacity(bounds.len() + 1);
        let mut below = 0u64;
        for &b in bounds {
            let upto = h.count_between(0, (b * 1e6) as u64);
            out.push((b, upto - below));
            below = upto;
        }
        out.push((f64::MAX, h.len() - below));
        (h.mean() * h.len() as f64 / 1e6, h.len(), out)
    }

    pub fn report(&self) -> LatencyReport {
        LatencyReport {
            produce: Percentiles::of(&self.produce),
            flush_write: Percentiles::of(&self.flush_write),
            flush_wait: Percentiles::of(&self.flush_wait),
        }
    }
}

/// One shard's histograms, recorded as it works.
#[derive(Default)]
pub struct Latencies(RefCell<Histograms>);

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latencies").finish_non_exhaustive()
    }
}

impl Latencies {
    pub fn produce(&self, d: Duration) {
        record(&mut self.0.borrow_mut().produce, d);
    }

    /// One flush: it waited `wait` for an earlier one, then its writes
    /// took `write`.
    pub fn flush(&self, wait: Duration, write: Duration) {
        let mut h = self.0.borrow_mut();
        record(&mut h.flush_wait, wait);
        record(&mut h.flush_write, write);
    }

    pub fn report(&self) -> LatencyReport {
        self.0.borrow().report()
    }

    /// A copy, to merge with other shards'.
    pub fn snapshot(&self) -> Histograms {
        self.0.borrow().clone()
    }

    pub fn reset(&self) {
        *self.0.borrow_mut() = Histograms::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_what_was_recorded_and_reset_empties() {
        let l = Latencies::default();
        assert_eq!(l.report().produce, Percentiles::default());
        for us in 1..=1000u64 {
            l.produce(Duration::from_micros(us));
        }
        l.flush(Duration::from_secs(3600), Duration::from_micros(200));
        let r = l.report();
        assert_eq!(r.produce.count, 1000);
        // hdrhistogram keeps 3 significant figures.
        assert!((499..=501).contains(&r.produce.p50), "{:?}", r.produce);
        assert!((989..=991).contains(&r.produce.p99), "{:?}", r.produce);
        assert_eq!(r.produce.max, 1000);
        assert_eq!(r.flush_write.count, 1);
        assert!((199..=201).contains(&r.flush_write.max));
        // Past the bound: clamped, not lost.
        assert_eq!(r.flush_wait.count, 1);
        assert!(r.flush_wait.max >= MAX_MICROS - MAX_MICROS / 1000);
        // Merged with another shard's: counts add up, the max is the larger.
        let other = Latencies::default();
        other.produce(Duration::from_micros(5000));
        let mut merged = l.snapshot();
        merged.merge(&other.snapshot());
        let m = merged.report();
        assert_eq!(m.produce.count, 1001);
        assert!((4995..=5005).contains(&m.produce.max), "{:?}", m.produce);
        assert_eq!(m.flush_write.count, 1);
        l.reset();
        assert_eq!(l.report().produce.count, 0);
        assert_eq!(l.report().flush_wait.count, 0);
    }
}
