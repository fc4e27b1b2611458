//! librdkafka clients shared by the workloads.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

/// Client properties given on the command line as `-X key=value` (as
/// librdkafka's own rdkafka_performance takes them), set last so they
/// override the workload's defaults.
#[derive(clap::Args, Clone, Default)]
pub struct Properties {
    /// A librdkafka property for the workload's clients, `key=value`
    /// (repeatable); overrides the workload's own settings.
    #[arg(short = 'X', long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
}

impl Properties {
    pub fn apply<'a>(&self, c: &'a mut ClientConfig) -> Result<&'a mut ClientConfig, String> {
        for p in &self.properties {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("-X {p}: expected key=value"))?;
            c.set(k, v);
        }
        Ok(c)
    }
}

/// An admin client with the workload's properties (a secured broker needs
/// the same sign-in).
fn admin(brokers: &str, props: &Properties) -> Result<AdminClient<DefaultClientContext>, String> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    props.apply(&mut c)?.create().map_err(|e| e.to_string())
}

/// Creates a topic of `replication_factor` replicas; an existing one is
/// fine.
pub fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
    props: &Properties,
) -> Result<(), String> {
    let admin = admin(brokers, props)?;
    let results = futures::executor::block_on(admin.create_topics(
        &[NewTopic::new(
            topic,
            partitions,
            TopicReplication::Fixed(replication_factor),
        )],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
    ))
    .map_err(|e| e.to_string())?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(format!("creating {t}: {e}")),
        }
    }
    Ok(())
}

/// Deletes a topic: after a run with `--delete-topic`, so a long series of
/// alternated runs does not fill the broker's disk (each 2 GB produce run
/// stays on it otherwise).
pub fn delete_topic(brokers: &str, topic: &str, props: &Properties) -> Result<(), String> {
    let admin = admin(brokers, props)?;
    let results = futures::executor::block_on(admin.delete_topics(
        &[topic],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
    ))
    .map_err(|e| format!("deleting {topic}: {e}"))?;
    for r in results {
        r.map_err(|(t, e)| format!("deleting {t}: {e}"))?;
    }
    Ok(())
}

/// The number of partitions of a topic (asked with the workload's
/// properties: a secured broker needs the same sign-in).
pub fn partitions(brokers: &str, topic: &str, props: &Properties) -> Result<i32, String> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    let c: BaseConsumer = props
        .apply(&mut config)?
        .create()
        .map_err(|e| e.to_string())?;
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let t = md.topics().first().ok_or("no topic in metadata")?;
    if t.partitions().is_empty() {
        return Err(format!("topic {topic} has no partitions (does it exist?)"));
    }
    Ok(t.partitions().len() as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_override_the_workload_and_refuse_a_missing_value() {
        let mut c = ClientConfig::new();
        c.set("fetch.queue.backoff.ms", "10");
        let given = Properties {
            properties: vec!["fetch.queue.backoff.ms=1000".into(), "client.id=x=y".into()],
        };
        given.apply(&mut c).unwrap();
        assert_eq!(c.get("fetch.queue.backoff.ms"), Some("1000"));
        assert_eq!(c.get("client.id"), Some("x=y"));
        let bad = Properties {
            properties: vec!["linger.ms".into()],
        };
        let e = bad.apply(&mut ClientConfig::new()).unwrap_err();
        assert!(e.contains("-X linger.ms"), "{e}");
    }
}
