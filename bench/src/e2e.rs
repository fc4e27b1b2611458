//! `e2e`: a producer at a fixed rate and a long-polling consumer. Reports the
//! end-to-end latency (produce call to receipt; the send time travels in the
//! payload) and the long-poll wake latency (ack to receipt).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::report::{histogram, Report};

#[derive(clap::Args)]
pub struct E2eArgs {
    #[arg(long)]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    #[arg(long)]
    pub create_topic: bool,
    /// Replicas of a topic created with `--create-topic` (a cluster's).
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// Delete the topic after the run (a long series of runs would
    /// otherwise fill the broker's disk).
    #[arg(long)]
    pub delete_topic: bool,
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    #[arg(long, default_value_t = 20_000)]
    pub rate: u64,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// The producer sleeps only once it is this far ahead of the rate, then
    /// sends what fell due meanwhile as a burst (Kafka's own
    /// ProducerPerformance throttles in steps of 2 ms). Sleeping for every
    /// record costs the client a core of wake-ups at 20,000/s.
    #[arg(long, default_value_t = 1000)]
    pub pace_us: u64,
    /// Writes a line per record: id, and the nanoseconds (from the run's
    /// start, whose wall-clock time the first line gives) it was sent,
    /// acknowledged and received; to see when a tail happened, and with a
    /// node's own timeline (`bench/tails.py`) what the node did then.
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: crate::client::Properties,
    #[command(flatten)]
    pub node: crate::node_stats::NodeStats,
}

/// Nanoseconds since the run's clock started (shared by both sides).
fn nanos(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

struct AckTimes {
    epoch: Instant,
    acked: Mutex<HashMap<u64, u64>>,
}

impl ClientContext for AckTimes {}

impl ProducerContext for AckTimes {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, result: &DeliveryResult<'_>, id: Box<u64>) {
        if result.is_ok() {
            let now = nanos(self.epoch);
            self.acked.lock().expect("acks").insert(*id, now);
        }
    }
}

pub fn run(a: E2eArgs) -> Result<(), String> {
    if a.create_topic {
        crate::client::create_topic(
            &a.brokers,
            &a.topic,
            a.partitions,
            a.replication_factor,
            &a.client,
        )?;
    }
    let partitions = crate::client::partitions(&a.brokers, &a.topic, &a.client)?;
    let epoch = Instant::now();
    // The wall clock at `epoch`, so a timeline lines up with a node's
    // (`weir serve --timeline`, on the same machine).
    let epoch_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let total = a.rate * a.seconds;

    // The consumer starts at the current end of every partition.
    let consumer: BaseConsumer = a
        .client
        .apply(
            ClientConfig::new()
                .set("bootstrap.servers", &a.brokers)
                .set("group.id", "weir-bench-e2e")
                .set("enable.auto.commit", "false")
                .set("fetch.wait.max.ms", "500")
                .set("fetch.min.bytes", "1")
                .set("socket.nagle.disable", "true"),
        )?
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(&a.topic, p, Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        tpl.add_partition_offset(&a.topic, p, Offset::Offset(high))
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let _ = consumer.poll(Duration::from_millis(200));

    let receiver = std::thread::spawn(move || {
        // id -> (sent, received). Sized for the whole run, as `acked` is:
        // growing, a map doubles at 114,688 and 229,376 entries, and the
        // copy held this thread (and `acked`'s the delivery reports) for
        // ~10 ms at 6.0 s and 11.8 s of every 20,000/s run: the run's
        // worst records, found with bench/tails.py.
        let mut received: HashMap<u64, (u64, u64)> = HashMap::with_capacity(total as usize);
        let mut idle = Instant::now();
        while (received.len() as u64) < total && idle.elapsed() < Duration::from_secs(10) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let now = nanos(epoch);
                if let Some(p) = m.payload().filter(|p| p.len() >= 16) {
                    let id = u64::from_be_bytes(p[0..8].try_into().expect("8 bytes"));
                    let sent = u64::from_be_bytes(p[8..16].try_into().expect("8 bytes"));
                    received.insert(id, (sent, now));
                }
                idle = Instant::now();
            }
        }
        received
    });

    let ctx = AckTimes {
        epoch,
        acked: Mutex::new(HashMap::with_capacity(total as usize)),
    };
    // Delivery reports are served by the producer's own polling thread, so
    // each ack is timed when it arrives, not when the pacing loop wakes.
    let producer: ThreadedProducer<AckTimes> = a
        .client
        .apply(
            ClientConfig::new()
                .set("bootstrap.servers", &a.brokers)
                .set("acks", "all")
                .set("linger.ms", "0")
                .set("socket.nagle.disable", "true"),
        )?
        .create_with_context(ctx)
        .map_err(|e| e.to_string())?;
    // One record first, outside the measurement: the producer's bootstrap
    // (metadata, the connection to the partition's leader) otherwise holds
    // the first ~50 ms of records, 0.1% of a 20,000/s run of 8 s, which
    // then made every p99.9 ~50 ms. Its payload is too short to carry an
    // id, so the receiver skips it.
    producer
        .send(
            BaseRecord::<(), [u8], Box<u64>>::with_opaque_to(&a.topic, Box::new(u64::MAX))
                .payload(b"warm-up"),
        )
        .map_err(|(e, _)| format!("warm-up record: {e}"))?;
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| format!("warm-up record: {e}"))?;
    let mut payload = vec![0u8; a.size.max(16)];
    // Each record's send time by id, so every ack is timed, received or not
    // (against the null broker nothing is received: its ack percentiles are
    // what the client and the machine add without any storage).
    let mut sent_at = Vec::with_capacity(total as usize);
    a.node.reset()?;
    let start = Instant::now();
    for i in 0..total {
        // Pace without spinning (a spinning client would take a core from
        // the broker on a small machine): once a pacing step ahead, sleep
        // until the message is due; what fell due meanwhile goes as a burst.
        let due = start + Duration::from_nanos(i * 1_000_000_000 / a.rate.max(1));
        let now = Instant::now();
        if due > now + Duration::from_micros(a.pace_us) {
            std::thread::sleep(due - now);
        }
        let sent = nanos(epoch);
        sent_at.push(sent);
        payload[0..8].copy_from_slice(&i.to_be_bytes());
        payload[8..16].copy_from_slice(&sent.to_be_bytes());
        let mut record: BaseRecord<(), [u8], Box<u64>> =
            BaseRecord::with_opaque_to(&a.topic, Box::new(i)).payload(&payload[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    let elapsed = start.elapsed();
    let received = receiver
        .join()
        .map_err(|_| "the consumer thread panicked")?;
    let acked = Arc::new(producer.context().acked.lock().expect("acks").clone());

    let mut e2e = histogram();
    let mut wake = histogram();
    let mut ack_latency = histogram();
    let mut timeline = match &a.timeline {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?,
        )),
        None => None,
    };
    if let Some(t) = timeline.as_mut() {
        use std::io::Write;
        writeln!(t, "# epoch_unix_ns {epoch_unix_ns}").map_err(|e| e.to_string())?;
        writeln!(t, "# id sent_ns acked_ns received_ns (from the epoch)")
            .map_err(|e| e.to_string())?;
    }
    for (id, ack) in acked.iter() {
        if let Some(sent) = sent_at.get(*id as usize) {
            let _ = ack_latency.record(((ack.saturating_sub(*sent)) / 1000).max(1));
        }
    }
    for (id, (sent, got)) in &received {
        let _ = e2e.record(((got.saturating_sub(*sent)) / 1000).max(1));
        if let Some(ack) = acked.get(id) {
            let _ = wake.record(((got.saturating_sub(*ack)) / 1000).max(1));
            if let Some(t) = timeline.as_mut() {
                use std::io::Write;
                writeln!(t, "{id} {sent} {ack} {got}").map_err(|e| e.to_string())?;
            }
        }
    }
    if (received.len() as u64) < total {
        eprintln!("only {} of {total} records were received", received.len());
    }
    Report {
        workload: "e2e",
        messages: received.len() as u64,
        bytes: received.len() as u64 * a.size as u64,
        elapsed,
        latency: e2e,
        extra: vec![("wake", wake), ("ack", ack_latency)],
        node: a.node.read()?,
    }
    .print(a.json);
    if a.delete_topic {
        crate::client::delete_topic(&a.brokers, &a.topic, &a.client)?;
    }
    Ok(())
}
