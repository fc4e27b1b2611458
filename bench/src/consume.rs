//! `consume`: catch-up read throughput of a topic that is already full.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::report::{histogram, Progress, Report};

#[derive(clap::Args)]
pub struct ConsumeArgs {
    #[arg(long)]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: crate::client::Properties,
}

pub fn run(a: ConsumeArgs) -> Result<(), String> {
    let partitions = crate::client::partitions(&a.brokers, &a.topic, &a.client)?;
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &a.brokers)
        .set("group.id", "weir-bench")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "10485760")
        .set("queued.max.messages.kbytes", "1048576")
        // A partition whose local queue is past its thresholds is not
        // fetched again for this long (librdkafka's default: 1 s). Caught
        // up in a burst, the queue drains in milliseconds and then sits
        // empty: the default held this workload to 0.4-0.9 GB/s with the
        // node and the client both mostly idle.
        .set("fetch.queue.backoff.ms", "10");
    let c: BaseConsumer = a
        .client
        .apply(&mut config)?
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(&a.topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let mut progress = Progress::new("consume");
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut start = None;
    let mut idle = Instant::now();
    while n < a.messages {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                start.get_or_insert_with(Instant::now);
                n += 1;
                bytes += m.payload_len() as u64;
                idle = Instant::now();
                progress.tick(n, a.messages);
            }
            Some(Err(e)) => return Err(e.to_string()),
            None if idle.elapsed() > Duration::from_secs(10) => {
                return Err(format!("only {n} of {} messages arrived", a.messages))
            }
            None => {}
        }
    }
    Report {
        workload: "consume",
        messages: n,
        bytes,
        elapsed: start.map(|s| s.elapsed()).unwrap_or_default(),
        latency: histogram(),
        extra: vec![],
        node: None,
    }
    .print(a.json);
    Ok(())
}
