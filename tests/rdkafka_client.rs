//! The `rdkafka` crate (librdkafka 2.12 built from source, zstd enabled)
//! against a running node: admin, produce with every codec, consume.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

mod common;

#[test]
fn rdkafka_produces_every_codec_and_consumes() {
    let node = common::start_node("rdkafka", &[]);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", node.bootstrap())
        .create()
        .unwrap();
    let created = futures::executor::block_on(admin.create_topics(
        &[NewTopic::new("rs", 3, TopicReplication::Fixed(1))],
        &AdminOptions::new(),
    ))
    .unwrap();
    assert!(created[0].is_ok(), "{created:?}");

    let mut sent = Vec::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", node.bootstrap())
            .set("compression.type", codec)
            .set("linger.ms", "5")
            .create()
            .unwrap();
        let futures: Vec<_> = (0..300)
            .map(|i| {
                let key = format!("{codec}-{i}");
                let value = format!("value {codec} {i} ").repeat(10);
                let headers = OwnedHeaders::new().insert(Header {
                    key: "codec",
                    value: Some(codec),
                });
                sent.push((key.clone(), value.clone()));
                producer
                    .send_result(
                        FutureRecord::to("rs")
                            .key(&key)
                            .payload(&value)
                            .headers(headers),
                    )
                    .unwrap()
            })
            .collect();
        for f in futures {
            let delivery = futures::executor::block_on(f).unwrap().unwrap();
            assert!(delivery.offset >= 0);
        }
    }

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", node.bootstrap())
        .set("group.id", "rs-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset("rs", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < sent.len() && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
            let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
            let codec = m
                .headers()
                .unwrap()
                .get(0)
                .value
                .map(|v| String::from_utf8(v.to_vec()).unwrap());
            assert_eq!(codec.as_deref(), Some(key.split('-').next().unwrap()));
            got.push((key, value));
        }
    }
    sent.sort();
    got.sort();
    assert_eq!(got, sent);
    for p in 0..3 {
        let (low, high) = consumer
            .fetch_watermarks("rs", p, Duration::from_secs(10))
            .unwrap();
        assert_eq!(low, 0);
        assert!(high > 0);
    }
}
