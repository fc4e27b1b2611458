//! `null-broker`: a Kafka responder that stores nothing. Produce is
//! acknowledged at once, Fetch answers empty after its max wait. It is the
//! limit the client and the machine can reach; weir's figures are quoted as
//! ratios to it. Thread per connection, blocking sockets: it does no work
//! worth optimising.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

#[derive(clap::Args)]
pub struct NullBrokerArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub listen: String,
    /// Partitions of a topic made by CreateTopics with -1 or by Metadata.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
}

const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
];

#[derive(Default)]
struct State {
    /// topic -> next offset per partition
    topics: HashMap<String, (uuid::Uuid, Vec<i64>)>,
    next_producer_id: i64,
}

pub fn run(a: NullBrokerArgs) -> Result<(), String> {
    let listener =
        TcpListener::bind(&a.listen).map_err(|e| format!("listen on {}: {e}", a.listen))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    eprintln!("null broker listening on {}", a.listen);
    let state = Arc::new(Mutex::new(State::default()));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let state = state.clone();
        let partitions = a.partitions;
        std::thread::spawn(move || {
            let _ = serve(stream, state, port, partitions);
        });
    }
    Ok(())
}

fn serve(
    stream: TcpStream,
    state: Arc<Mutex<State>>,
    port: u16,
    partitions: i32,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::with_capacity(1 << 20, stream.try_clone()?);
    let mut writer = BufWriter::with_capacity(1 << 20, stream);
    loop {
        let mut len = [0u8; 4];
        reader.read_exact(&mut len)?;
        let len = i32::from_be_bytes(len).clamp(0, 256 << 20) as usize;
        let mut frame = BytesMut::zeroed(len);
        reader.read_exact(&mut frame)?;
        let mut frame = frame.freeze();
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let Ok(api) = ApiKey::try_from(key) else {
            return Ok(());
        };
        let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let body = RequestKind::decode(api, &mut frame, version)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let Some(response) = respond(body, version, &state, port, partitions) else {
            continue;
        };
        let hv = if api == ApiKey::ApiVersions {
            0
        } else {
            api.response_header_version(version)
        };
        let mut out = BytesMut::new();
        out.put_i32(0);
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut out, hv)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        response
            .encode(&mut out, version)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let n = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&n.to_be_bytes());
        writer.write_all(&out)?;
        // Answer now unless more requests are already buffered.
        if reader.buffer().is_empty() {
            writer.flush()?;
        }
    }
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn respond(
    body: RequestKind,
    version: i16,
    state: &Mutex<State>,
    port: u16,
    partitions: i32,
) -> Option<ResponseKind> {
    let mut st = state.lock().expect("state");
    Some(match body {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(
            ApiVersionsResponse::default().with_api_keys(
                SERVED
                    .iter()
                    .map(|&(k, min, max)| {
                        api_versions_response::ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect(),
            ),
        ),
        RequestKind::Metadata(r) => {
            let names: Vec<String> = match r.topics {
                Some(t) if !t.is_empty() => t.iter().filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())).collect(),
                _ => st.topics.keys().cloned().collect(),
            };
            let topics = names
                .into_iter()
                .map(|name| {
                    let (id, parts) = st
                        .topics
                        .entry(name.clone())
                        .or_insert_with(|| (uuid::Uuid::new_v4(), vec![0; partitions as usize]))
                        .clone();
                    metadata_response::MetadataResponseTopic::default()
                        .with_name(Some(TopicName(s(&name))))
                        .with_topic_id(id)
                        .with_partitions(
                            (0..parts.len() as i32)
                                .map(|p| {
                                    metadata_response::MetadataResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_leader_id(BrokerId(0))
                                        .with_replica_nodes(vec![BrokerId(0)])
                                        .with_isr_nodes(vec![BrokerId(0)])
                                })
                                .collect(),
                        )
                })
                .collect();
            ResponseKind::Metadata(
                MetadataResponse::default()
                    .with_brokers(vec![metadata_response::MetadataResponseBroker::default()
                        .with_node_id(BrokerId(0))
                        .with_host(s("127.0.0.1"))
                        .with_port(port as i32)])
                    .with_cluster_id(Some(s("null")))
                    .with_controller_id(BrokerId(0))
                    .with_topics(topics),
            )
        }
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .into_iter()
                    .map(|t| {
                        let n = if t.num_partitions > 0 { t.num_partitions } else { partitions };
                        let id = uuid::Uuid::new_v4();
                        st.topics.entry(t.name.0.to_string()).or_insert((id, vec![0; n as usize]));
                        create_topics_response::CreatableTopicResult::default()
                            .with_name(t.name)
                            .with_num_partitions(n)
                            .with_replication_factor(1)
                            .with_topic_id(id)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteTopics(r) => {
            // By name (v1–5; v6 names or ids, and librdkafka names them).
            let names = r.topic_names.into_iter().chain(r.topics.into_iter().filter_map(|t| t.name));
            ResponseKind::DeleteTopics(
                DeleteTopicsResponse::default().with_responses(
                    names
                        .map(|n| {
                            let known = st.topics.remove(n.0.as_str()).is_some();
                            let code = if known { 0 } else { 3 }; // UNKNOWN_TOPIC_OR_PARTITION
                            delete_topics_response::DeletableTopicResult::default()
                                .with_name(Some(n))
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::Produce(r) => {
            let acks = r.acks;
            let responses = r
                .topic_data
                .into_iter()
                .map(|t| {
                    let name = t.name.0.to_string();
                    let parts = t
                        .partition_data
                        .into_iter()
                        .map(|p| {
                            let count = p.records.as_ref().map_or(0, record_count);
                            let entry = st.topics.entry(name.clone()).or_insert_with(|| (uuid::Uuid::new_v4(), vec![0; partitions as usize]));
                            let base = entry.1.get(p.index as usize).copied().unwrap_or(0);
                            if let Some(o) = entry.1.get_mut(p.index as usize) {
                                *o += count;
                            }
                            produce_response::PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_base_offset(base)
                                .with_log_append_time_ms(-1)
                        })
                        .collect();
                    produce_response::TopicProduceResponse::default().with_name(t.name).with_partition_responses(parts)
                })
                .collect();
            if acks == 0 {
                return None;
            }
            ResponseKind::Produce(ProduceResponse::default().with_responses(responses))
        }
        RequestKind::Fetch(r) => {
            drop(st);
            std::thread::sleep(Duration::from_millis(r.max_wait_ms.max(0) as u64));
            ResponseKind::Fetch(
                FetchResponse::default().with_responses(
                    r.topics
                        .into_iter()
                        .map(|t| {
                            fetch_response::FetchableTopicResponse::default()
                                .with_topic(if version >= 13 { TopicName::default() } else { t.topic })
                                .with_topic_id(t.topic_id)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            fetch_response::PartitionData::default()
                                                .with_partition_index(p.partition)
                                                .with_high_watermark(p.fetch_offset)
                                                .with_last_stable_offset(p.fetch_offset)
                                                .with_preferred_read_replica(BrokerId(-1))
                                                .with_records(Some(Bytes::new()))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(
            ListOffsetsResponse::default().with_topics(
                r.topics
                    .into_iter()
                    .map(|t| {
                        let ends = st.topics.get(&t.name.0.to_string()).map(|e| e.1.clone()).unwrap_or_default();
                        list_offsets_response::ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    let end = ends.get(p.partition_index as usize).copied().unwrap_or(0);
                                    list_offsets_response::ListOffsetsPartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_offset(if p.timestamp == -2 { 0 } else { end })
                                        .with_timestamp(-1)
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            ),
        ),
        RequestKind::InitProducerId(_) => {
            st.next_producer_id += 1;
            ResponseKind::InitProducerId(
                InitProducerIdResponse::default().with_producer_id(ProducerId(st.next_producer_id)).with_producer_epoch(0),
            )
        }
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(if version >= 4 {
            FindCoordinatorResponse::default().with_coordinators(
                r.coordinator_keys
                    .into_iter()
                    .map(|k| find_coordinator_response::Coordinator::default().with_key(k).with_error_code(15).with_node_id(BrokerId(-1)).with_port(-1))
                    .collect(),
            )
        } else {
            FindCoordinatorResponse::default().with_error_code(15).with_node_id(BrokerId(-1)).with_port(-1)
        }),
        _ => return None,
    })
}

/// Records in the batches of a produce payload (from the v2 headers).
fn record_count(records: &Bytes) -> i64 {
    let mut at = 0usize;
    let mut n = 0i64;
    while at + 61 <= records.len() {
        let len =
            i32::from_be_bytes(records[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
        n += i32::from_be_bytes(records[at + 57..at + 61].try_into().expect("4 bytes")) as i64;
        at += 12 + len;
    }
    n
}
