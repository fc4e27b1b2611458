//! `produce`: producer throughput and the distribution of ack latency.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::report::{histogram, Progress, Report};

#[derive(clap::Args, Clone)]
pub struct ProduceArgs {
    #[arg(long)]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    /// Create the topic first (an existing one is used as it is).
    #[arg(long)]
    pub create_topic: bool,
    /// Replicas of a topic created with `--create-topic` (a cluster's).
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// Delete the topic after the run (a long series of runs would
    /// otherwise fill the broker's disk).
    #[arg(long)]
    pub delete_topic: bool,
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    pub acks: String,
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// Distinct keys (0: no keys).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
    /// Producer clients, each on its own thread.
    #[arg(long, default_value_t = 1)]
    pub producers: u64,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_bytes: u64,
    /// Values are JSON objects `{"n": …, "pad": "…"}` of `--size` bytes (for
    /// a typed table made with `CREATE TABLE t (n BIGINT, pad VARCHAR)`).
    #[arg(long)]
    pub json_values: bool,
    /// Values are the same record in Avro, `{"n": long, "pad": string}`,
    /// framed with this schema registry id (the registry's wire format), of
    /// `--size` bytes (for an Avro table: `bench/avro_ingest.py`).
    #[arg(long)]
    pub avro_schema_id: Option<u32>,
    /// Produce in transactions of this many records each (a transactional
    /// producer per thread, `weir-bench-txn-{thread}`, committing every N
    /// records); 0: no transactions.
    #[arg(long, default_value_t = 0)]
    pub transaction_records: u64,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: crate::client::Properties,
    #[command(flatten)]
    pub node: crate::node_stats::NodeStats,
}

/// A JSON object value of exactly `size` bytes (at least its fixed part).
fn json_value(size: usize) -> Vec<u8> {
    let fixed = br#"{"n":12345,"pad":""}"#.len();
    let pad = "x".repeat(size.saturating_sub(fixed));
    format!(r#"{{"n":12345,"pad":"{pad}"}}"#).into_bytes()
}

/// An Avro long or length: a zig-zag varint.
fn avro_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// `{"n": 12345, "pad": "x…"}` as an Avro datum framed with schema `id`
/// (a magic 0 byte, the id big-endian), `size` bytes in all (at least its
/// fixed part).
fn avro_value(id: u32, size: usize) -> Vec<u8> {
    let mut pad_len = size.saturating_sub(5 + 3 + 1);
    loop {
        let mut out = vec![0];
        out.extend(id.to_be_bytes());
        avro_long(&mut out, 12345);
        avro_long(&mut out, pad_len as i64);
        out.resize(out.len() + pad_len, b'x');
        // A longer pad may take another byte of length: trim and retry.
        if out.len() <= size || pad_len == 0 {
            return out;
        }
        pad_len -= out.len() - size;
    }
}

/// Records each message's ack latency and counts failures.
struct Acks {
    latency: Mutex<Histogram<u64>>,
    failed: std::sync::atomic::AtomicU64,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Instant>) {
        match result {
            Ok(_) => {
                let us = sent.elapsed().as_micros() as u64;
                let _ = self.latency.lock().expect("histogram").record(us.max(1));
            }
            Err((e, _)) => {
                if self
                    .failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    == 0
                {
                    eprintln!("delivery failed: {e}");
                }
            }
        }
    }
}

pub fn producer_config(a: &ProduceArgs) -> Result<ClientConfig, String> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &a.brokers)
        .set("acks", &a.acks)
        .set("compression.type", &a.compression)
        .set("linger.ms", a.linger_ms.to_string())
        .set("batch.size", a.batch_bytes.to_string())
        .set("queue.buffering.max.kbytes", "1048576")
        .set("queue.buffering.max.messages", "1000000");
    a.client.apply(&mut c)?;
    Ok(c)
}

/// Commits the producer's transaction once every record of it is
/// delivered. The deliveries are served here in 1 ms polls: the crate's
/// `flush` waits out a last 100 ms poll after them (measured: every
/// 1,000-record transaction took 100 ms more), and `commit_transaction`
/// alone waits for them in 100 ms checks too.
fn commit(p: &BaseProducer<Acks>, timeout: std::time::Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while p.in_flight_count() > 0 {
        if Instant::now() > deadline {
            return Err("records of a transaction were not delivered in time".into());
        }
        p.poll(std::time::Duration::from_millis(1));
    }
    p.commit_transaction(timeout).map_err(|e| e.to_string())
}

pub fn run(a: ProduceArgs) -> Result<(), String> {
    if a.create_topic {
        crate::client::create_topic(
            &a.brokers,
            &a.topic,
            a.partitions,
            a.replication_factor,
            &a.client,
        )?;
    }
    let value: Vec<u8> = if let Some(id) = a.avro_schema_id {
        avro_value(id, a.size)
    } else if a.json_values {
        json_value(a.size)
    } else {
        (0..a.size).map(|i| (i * 31 % 251) as u8).collect()
    };
    let acks = Arc::new(Acks {
        latency: Mutex::new(histogram()),
        failed: Default::default(),
    });
    a.node.reset()?;
    let start = Instant::now();
    let per = a.messages / a.producers.max(1);
    let threads: Vec<_> = (0..a.producers.max(1))
        .map(|t| {
            let (a, value, acks) = (a.clone(), value.clone(), acks.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let ctx = Acks {
                    latency: Mutex::new(histogram()),
                    failed: Default::default(),
                };
                let mut config = producer_config(&a)?;
                let txn = a.transaction_records;
                if txn > 0 {
                    config.set("transactional.id", format!("weir-bench-txn-{t}"));
                }
                let p: BaseProducer<Acks> =
                    config.create_with_context(ctx).map_err(|e| e.to_string())?;
                let timeout = std::time::Duration::from_secs(60);
                if txn > 0 {
                    p.init_transactions(timeout).map_err(|e| e.to_string())?;
                }
                let mut progress = Progress::new("produce");
                for i in 0..per {
                    if txn > 0 && i % txn == 0 {
                        if i > 0 {
                            commit(&p, timeout)?;
                        }
                        p.begin_transaction().map_err(|e| e.to_string())?;
                    }
                    let key = (a.keys > 0).then(|| ((t * per + i) % a.keys).to_string());
                    let mut record = BaseRecord::with_opaque_to(&a.topic, Box::new(Instant::now()))
                        .payload(&value);
                    if let Some(k) = &key {
                        record = record.key(k.as_str());
                    }
                    let mut record = record;
                    loop {
                        match p.send(record) {
                            Ok(()) => break,
                            Err((_, r)) => {
                                record = r;
                                p.poll(std::time::Duration::from_millis(1));
                            }
                        }
                    }
                    p.poll(std::time::Duration::ZERO);
                    if t == 0 {
                        progress.tick(i * a.producers, a.messages);
                    }
                }
                if txn > 0 {
                    commit(&p, timeout)?;
                }
                p.flush(std::time::Duration::from_secs(120))
                    .map_err(|e| e.to_string())?;
                let ctx = p.context();
                acks.latency
                    .lock()
                    .expect("histogram")
                    .add(&*ctx.latency.lock().expect("histogram"))
                    .map_err(|e| e.to_string())?;
                acks.failed.fetch_add(
                    ctx.failed.load(std::sync::atomic::Ordering::Relaxed),
                    std::sync::atomic::Ordering::Relaxed,
                );
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a producer thread panicked")??;
    }
    let elapsed = start.elapsed();
    let failed = acks.failed.load(std::sync::atomic::Ordering::Relaxed);
    let messages = per * a.producers.max(1) - failed;
    if failed > 0 {
        eprintln!("{failed} messages failed");
    }
    let latency = acks.latency.lock().expect("histogram").clone();
    Report {
        workload: "produce",
        messages,
        bytes: messages * a.size as u64,
        elapsed,
        latency,
        extra: vec![],
        node: a.node.read()?,
    }
    .print(a.json);
    if a.delete_topic {
        crate::client::delete_topic(&a.brokers, &a.topic, &a.client)?;
    }
    if failed > 0 {
        return Err(format!("{failed} messages were not delivered"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_avro_value_is_framed_and_of_its_size() {
        for size in [16, 127, 200, 1024, 70_000] {
            let v = avro_value(7, size);
            assert_eq!(v.len(), size, "{size}");
            assert_eq!(&v[..5], &[0, 0, 0, 0, 7]);
            // n = 12345 as a zig-zag varint.
            assert_eq!(&v[5..8], &[0xf2, 0xc0, 0x01]);
        }
    }
}
