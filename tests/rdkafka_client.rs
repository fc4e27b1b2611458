//! The `rdkafka` crate (librdkafka 2.12 built from source, zstd enabled)
//! against a running node: admin, produce with every codec, consume;
//! sign-in with SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; and TLS
//! (SASL_SSL, and SSL signed in by a client certificate).

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

/// A node with sign-in on (role tokens from files): the admin makes a topic
/// and a user with a grant, and the user produces and consumes with each
/// mechanism; a wrong password delivers nothing.
#[test]
fn rdkafka_signs_in_with_plain_and_scram() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rdkafka-sasl-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let admin_file = dir.join("admin.token");
    std::fs::write(&admin_file, "rs-admin-token\n").unwrap();
    let node = common::start_node(
        "rdkafka-sasl",
        &["--admin-token-file", admin_file.to_str().unwrap()],
    );
    let sasl = |mechanism: &str, user: &str, password: &str| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", node.bootstrap())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", mechanism)
            .set("sasl.username", user)
            .set("sasl.password", password);
        c
    };
    let admin: AdminClient<DefaultClientContext> =
        sasl("PLAIN", "admin", "rs-admin-token").create().unwrap();
    let created = futures::executor::block_on(admin.create_topics(
        &[NewTopic::new("secure", 1, TopicReplication::Fixed(1))],
        &AdminOptions::new(),
    ))
    .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    for statement in [
        "CREATE USER rs WITH PASSWORD 'crab'",
        "GRANT INSERT, SELECT ON secure TO rs",
    ] {
        let (status, body) = node.sql(statement, "rs-admin-token");
        assert!(status.contains("200"), "{statement}: {status} {body}");
    }
    let mut produced = 0;
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let producer: FutureProducer = sasl(mechanism, "rs", "crab").create().unwrap();
        for i in 0..10 {
            let value = format!("{mechanism}-{i}");
            let r = futures::executor::block_on(producer.send(
                FutureRecord::<(), _>::to("secure").payload(&value),
                Duration::from_secs(10),
            ));
            assert!(r.is_ok(), "{mechanism}: {r:?}");
            produced += 1;
        }
    }
    // A wrong password delivers nothing.
    let refused: FutureProducer = sasl("SCRAM-SHA-256", "rs", "rust")
        .set("message.timeout.ms", "2000")
        .create()
        .unwrap();
    let r = futures::executor::block_on(refused.send(
        FutureRecord::<(), _>::to("secure").payload("no"),
        Duration::from_secs(5),
    ));
    assert!(r.is_err(), "a wrong password produced: {r:?}");
    // The user reads back every record it wrote.
    let consumer: BaseConsumer = sasl("SCRAM-SHA-512", "rs", "crab")
        .set("group.id", "rs-readers")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("secure", 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < produced && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(500)) {
            m.unwrap();
            got += 1;
        }
    }
    assert_eq!(got, produced);
}

/// A node with TLS and a client CA: a user signs in with SCRAM over
/// SASL_SSL, and a client certificate whose CN has ACLs produces over SSL;
/// both read back what was written.
#[test]
fn rdkafka_speaks_tls() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rdkafka-tls-certs-{}", std::process::id()));
    common::make_certs(&dir, "ledger");
    let pem = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let node = common::start_node_with_env(
        "rdkafka-tls",
        &[
            "--tls-cert",
            &pem("node.pem"),
            "--tls-key",
            &pem("node.key"),
            "--tls-client-ca",
            &pem("ca.pem"),
        ],
        &[("WEIR_ADMIN_TOKEN", "tls-admin")],
    );
    let tls = |protocol: &str| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", node.bootstrap())
            .set("security.protocol", protocol)
            .set("ssl.ca.location", pem("ca.pem"));
        c
    };
    let sasl_ssl = |mechanism: &str, user: &str, password: &str| {
        let mut c = tls("SASL_SSL");
        c.set("sasl.mechanism", mechanism)
            .set("sasl.username", user)
            .set("sasl.password", password);
        c
    };
    let admin: AdminClient<DefaultClientContext> =
        sasl_ssl("PLAIN", "admin", "tls-admin").create().unwrap();
    let created = futures::executor::block_on(admin.create_topics(
        &[NewTopic::new("sealed", 1, TopicReplication::Fixed(1))],
        &AdminOptions::new(),
    ))
    .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    // Over HTTPS with `weir sql --ca`: a SCRAM user, and grants for the
    // certificate's CN (GRANT names users; this one's password goes unused).
    for statement in [
        "CREATE USER rs WITH PASSWORD 'crab'",
        "GRANT INSERT, SELECT ON sealed TO rs",
        "CREATE USER ledger WITH PASSWORD 'unused'",
        "GRANT INSERT, SELECT ON sealed TO ledger",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["sql", "--addr", &node.http_addr(), "--ca", &pem("ca.pem")])
            .args(["--token", "tls-admin", statement])
            .output()
            .unwrap();
        assert!(out.status.success(), "{statement}: {out:?}");
    }
    let scram: FutureProducer = sasl_ssl("SCRAM-SHA-512", "rs", "crab").create().unwrap();
    let mut certified = tls("SSL");
    certified
        .set("ssl.certificate.location", pem("client.pem"))
        .set("ssl.key.location", pem("client.key"));
    let by_cert: FutureProducer = certified.create().unwrap();
    for (who, producer) in [("scram", &scram), ("cert", &by_cert)] {
        for i in 0..5 {
            let value = format!("{who}-{i}");
            let r = futures::executor::block_on(producer.send(
                FutureRecord::<(), _>::to("sealed").payload(&value),
                Duration::from_secs(10),
            ));
            assert!(r.is_ok(), "{who}: {r:?}");
        }
    }
    for config in [sasl_ssl("SCRAM-SHA-256", "rs", "crab"), certified] {
        let mut config = config;
        let consumer: BaseConsumer = config.set("group.id", "tls-readers").create().unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("sealed", 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < 10 && Instant::now() < deadline {
            if let Some(m) = consumer.poll(Duration::from_millis(500)) {
                got.push(m.unwrap().payload().unwrap().to_vec());
            }
        }
        got.sort();
        let mut want: Vec<Vec<u8>> = ["cert", "scram"]
            .iter()
            .flat_map(|w| (0..5).map(move |i| format!("{w}-{i}").into_bytes()))
            .collect();
        want.sort();
        assert_eq!(got, want);
    }
}
