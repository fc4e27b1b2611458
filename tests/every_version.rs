//! Every served API at every served version, over a real socket: the node
//! must answer each with a response that decodes at that version (an
//! unencodable field would otherwise close the connection).

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

mod common;

/// Sends one request and decodes its response at the same version.
fn call<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(version as i32)
        .with_client_id(Some(StrBytes::from_static_str("every-version")))
        .encode(&mut buf, Req::header_version(version))
        .unwrap();
    req.encode(&mut buf, version).unwrap();
    s.write_all(&(buf.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&buf).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .unwrap_or_else(|e| panic!("{key:?} v{version}: connection closed: {e}"));
    let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut frame).unwrap();
    let mut frame = Bytes::from(frame);
    // ApiVersions answers always carry header v0.
    let hv = if key == ApiKey::ApiVersions {
        0
    } else {
        Resp::header_version(version)
    };
    let header = ResponseHeader::decode(&mut frame, hv).unwrap();
    assert_eq!(header.correlation_id, version as i32);
    let resp =
        Resp::decode(&mut frame, version).unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
    assert!(
        frame.is_empty(),
        "{key:?} v{version}: {} bytes left over",
        frame.len()
    );
    resp
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A valid v2 batch of one record.
fn batch(value: &[u8]) -> Bytes {
    let mut rec = vec![0u8, 0, 0, 1]; // attributes, ts delta 0, offset delta 0, key null (-1)
    rec.push((value.len() as u8) << 1);
    rec.extend_from_slice(value);
    rec.push(0); // no headers
    let mut b = Vec::new();
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + 1 + rec.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(&1i64.to_be_bytes());
    b.extend_from_slice(&1i64.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.push((rec.len() as u8) << 1);
    b.extend_from_slice(&rec);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

#[test]
fn every_api_at_every_version() {
    // No initial rebalance delay: each version's join completes at once.
    let node = common::start_node("versions", &["--group-initial-rebalance-delay-ms", "0"]);
    let mut s = TcpStream::connect(node.bootstrap()).unwrap();

    let versions: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    let served: Vec<(i16, i16, i16)> = versions
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    let range = |key: ApiKey| {
        let &(_, min, max) = served
            .iter()
            .find(|(k, _, _)| *k == key as i16)
            .expect("advertised");
        min..=max
    };
    for v in range(ApiKey::ApiVersions) {
        let r: ApiVersionsResponse = call(
            &mut s,
            ApiKey::ApiVersions,
            v,
            &ApiVersionsRequest::default(),
        );
        assert_eq!(r.error_code, 0);
    }

    for v in range(ApiKey::CreateTopics) {
        let req = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(name(&format!("ct-{v}")))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ]);
        let r: CreateTopicsResponse = call(&mut s, ApiKey::CreateTopics, v, &req);
        assert_eq!(r.topics[0].error_code, 0, "CreateTopics v{v}");
    }

    let mut topic_id = uuid::Uuid::nil();
    for v in range(ApiKey::Metadata) {
        let req = MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(name("ct-2"))),
        ]));
        let r: MetadataResponse = call(&mut s, ApiKey::Metadata, v, &req);
        assert_eq!(r.topics[0].error_code, 0, "Metadata v{v}");
        assert_eq!(r.topics[0].partitions.len(), 2);
        if v >= 10 {
            topic_id = r.topics[0].topic_id;
        }
    }
    assert!(!topic_id.is_nil());

    for v in range(ApiKey::Produce) {
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                // v13 names the topic by id, earlier versions by name.
                .with_name(name("ct-2"))
                .with_topic_id(topic_id)
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch(b"hello"))),
                ])]);
        let r: ProduceResponse = call(&mut s, ApiKey::Produce, v, &req);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(
            (p.error_code, p.base_offset),
            (0, (v - 3) as i64),
            "Produce v{v}"
        );
        if v >= 13 {
            assert_eq!(r.responses[0].topic_id, topic_id);
        }
    }
    for v in range(ApiKey::DescribeLogDirs) {
        let r: DescribeLogDirsResponse = call(
            &mut s,
            ApiKey::DescribeLogDirs,
            v,
            &DescribeLogDirsRequest::default().with_topics(None),
        );
        let dir = &r.results[0];
        let t = dir
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == "ct-2")
            .expect("the topic");
        assert!(t.partitions[0].partition_size > 0, "DescribeLogDirs v{v}");
        assert_eq!(dir.total_bytes > 0, v >= 4, "DescribeLogDirs v{v}");
    }
    // An id no topic has: UNKNOWN_TOPIC_ID, nothing written.
    let last = range(ApiKey::Produce).last().expect("a version");
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_topic_id(uuid::Uuid::from_u128(7))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(b"lost"))),
            ])]);
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, last, &req);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 100);

    for v in range(ApiKey::Fetch) {
        let topic = fetch_request::FetchTopic::default().with_partitions(vec![
            fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(1)
                .with_partition_max_bytes(1 << 20),
        ]);
        let topic = if v >= 13 {
            topic.with_topic_id(topic_id)
        } else {
            topic.with_topic(name("ct-2"))
        };
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![topic]);
        let r: FetchResponse = call(&mut s, ApiKey::Fetch, v, &req);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "Fetch v{v}");
        assert!(
            p.records.as_ref().is_some_and(|r| !r.is_empty()),
            "Fetch v{v} returned no records"
        );
    }

    for v in range(ApiKey::ListOffsets) {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                .with_name(name("ct-2"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ])]);
        let r: ListOffsetsResponse = call(&mut s, ApiKey::ListOffsets, v, &req);
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "ListOffsets v{v}");
        assert!(p.offset > 0);
    }

    for v in range(ApiKey::DescribeConfigs) {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("ct-2")),
        ]);
        let r: DescribeConfigsResponse = call(&mut s, ApiKey::DescribeConfigs, v, &req);
        assert_eq!(r.results[0].error_code, 0, "DescribeConfigs v{v}");
        assert!(r.results[0]
            .configs
            .iter()
            .any(|c| &*c.name == "retention.ms"));
    }

    for v in range(ApiKey::DeleteRecords) {
        let req = DeleteRecordsRequest::default().with_topics(vec![
            delete_records_request::DeleteRecordsTopic::default()
                .with_name(name("ct-2"))
                .with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(1 + v as i64),
                ]),
        ]);
        let r: DeleteRecordsResponse = call(&mut s, ApiKey::DeleteRecords, v, &req);
        let p = &r.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.low_watermark),
            (0, 1 + v as i64),
            "DeleteRecords v{v}"
        );
    }

    for v in range(ApiKey::IncrementalAlterConfigs) {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("ct-2"))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(format!("{}", 1000 + v)))),
                ]),
        ]);
        let r: IncrementalAlterConfigsResponse =
            call(&mut s, ApiKey::IncrementalAlterConfigs, v, &req);
        assert_eq!(r.responses[0].error_code, 0, "IncrementalAlterConfigs v{v}");
    }

    for v in range(ApiKey::AlterConfigs) {
        let req = AlterConfigsRequest::default().with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("ct-2"))
                .with_configs(vec![alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_string(format!("{}", 2000 + v))))]),
        ]);
        let r: AlterConfigsResponse = call(&mut s, ApiKey::AlterConfigs, v, &req);
        assert_eq!(r.responses[0].error_code, 0, "AlterConfigs v{v}");
    }

    for v in range(ApiKey::CreatePartitions) {
        let req = CreatePartitionsRequest::default().with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(name("ct-3"))
                .with_count(3 + v as i32),
        ]);
        let r: CreatePartitionsResponse = call(&mut s, ApiKey::CreatePartitions, v, &req);
        assert_eq!(r.results[0].error_code, 0, "CreatePartitions v{v}");
    }

    for v in range(ApiKey::DescribeCluster) {
        let r: DescribeClusterResponse = call(
            &mut s,
            ApiKey::DescribeCluster,
            v,
            &DescribeClusterRequest::default(),
        );
        assert_eq!(r.error_code, 0);
        assert_eq!(r.brokers.len(), 1);
    }

    for v in range(ApiKey::FindCoordinator) {
        let req = if v >= 4 {
            FindCoordinatorRequest::default()
                .with_coordinator_keys(vec![StrBytes::from_static_str("g")])
        } else {
            FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g"))
        };
        let _: FindCoordinatorResponse = call(&mut s, ApiKey::FindCoordinator, v, &req);
    }

    let mut ids = Vec::new();
    for v in range(ApiKey::InitProducerId) {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r: InitProducerIdResponse = call(&mut s, ApiKey::InitProducerId, v, &req);
        assert_eq!(r.error_code, 0, "InitProducerId v{v}");
        ids.push(r.producer_id.0);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        range(ApiKey::InitProducerId).count(),
        "producer ids are unique"
    );

    groups_at_every_version(&mut s, &range);

    for v in range(ApiKey::DeleteTopics) {
        let topic = format!("ct-{}", v + 1);
        let req = if v >= 6 {
            DeleteTopicsRequest::default()
                .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(name(&topic)))])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![name(&topic)])
        };
        let r: DeleteTopicsResponse = call(&mut s, ApiKey::DeleteTopics, v, &req);
        assert_eq!(r.responses[0].error_code, 0, "DeleteTopics v{v}");
    }
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A consumer protocol subscription (v0) to `topic`.
fn subscription(topic: &str) -> Bytes {
    let mut b = vec![0u8, 0, 0, 0, 0, 1];
    b.extend((topic.len() as i16).to_be_bytes());
    b.extend(topic.as_bytes());
    b.extend((-1i32).to_be_bytes()); // no user data
    Bytes::from(b)
}

/// Joins `group` as a new member at JoinGroup `version` (answering
/// MEMBER_ID_REQUIRED from v4) and returns the response.
fn join(s: &mut TcpStream, group: &str, version: i16) -> JoinGroupResponse {
    let mut req = JoinGroupRequest::default()
        .with_group_id(GroupId(str(group)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(str(""))
        .with_protocol_type(str("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(str("range"))
        .with_metadata(subscription("ct-1"))]);
    if version >= 8 {
        req = req.with_reason(Some(str("every version")));
    }
    let first: JoinGroupResponse = call(s, ApiKey::JoinGroup, version, &req);
    if version < 4 {
        return first;
    }
    assert_eq!(
        first.error_code, 79,
        "JoinGroup v{version}: MEMBER_ID_REQUIRED"
    );
    let req = req.with_member_id(first.member_id);
    call(s, ApiKey::JoinGroup, version, &req)
}

/// A one-member group made stable (JoinGroup v5, SyncGroup v3).
fn stable_group(s: &mut TcpStream, group: &str) -> (StrBytes, i32) {
    let j = join(s, group, 5);
    assert_eq!(j.error_code, 0);
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(str(group)))
        .with_generation_id(j.generation_id)
        .with_member_id(j.member_id.clone())
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(j.member_id.clone())
                .with_assignment(Bytes::from_static(b"all")),
        ]);
    let r: SyncGroupResponse = call(s, ApiKey::SyncGroup, 3, &req);
    assert_eq!(r.error_code, 0);
    (j.member_id, j.generation_id)
}

fn groups_at_every_version(
    s: &mut TcpStream,
    range: &dyn Fn(ApiKey) -> std::ops::RangeInclusive<i16>,
) {
    for v in range(ApiKey::JoinGroup) {
        let r = join(s, &format!("g-join-{v}"), v);
        assert_eq!(r.error_code, 0, "JoinGroup v{v}");
        assert_eq!(r.generation_id, 1);
        assert_eq!(r.leader, r.member_id, "the only member leads");
        assert_eq!(r.members.len(), 1);
        assert_eq!(r.members[0].metadata, subscription("ct-1"));
    }
    for v in range(ApiKey::SyncGroup) {
        let group = format!("g-sync-{v}");
        let j = join(s, &group, 5);
        let mut req = SyncGroupRequest::default()
            .with_group_id(GroupId(str(&group)))
            .with_generation_id(j.generation_id)
            .with_member_id(j.member_id.clone())
            .with_assignments(vec![
                sync_group_request::SyncGroupRequestAssignment::default()
                    .with_member_id(j.member_id.clone())
                    .with_assignment(Bytes::from_static(b"mine")),
            ]);
        if v >= 5 {
            req = req
                .with_protocol_type(Some(str("consumer")))
                .with_protocol_name(Some(str("range")));
        }
        let r: SyncGroupResponse = call(s, ApiKey::SyncGroup, v, &req);
        assert_eq!(r.error_code, 0, "SyncGroup v{v}");
        assert_eq!(&r.assignment[..], b"mine");
    }
    let (member, generation) = stable_group(s, "g-stable");
    for v in range(ApiKey::Heartbeat) {
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(str("g-stable")))
            .with_generation_id(generation)
            .with_member_id(member.clone());
        let r: HeartbeatResponse = call(s, ApiKey::Heartbeat, v, &req);
        assert_eq!(r.error_code, 0, "Heartbeat v{v}");
        let stale = req.with_generation_id(generation - 1);
        let r: HeartbeatResponse = call(s, ApiKey::Heartbeat, v, &stale);
        assert_eq!(r.error_code, 22, "Heartbeat v{v}: ILLEGAL_GENERATION");
    }
    for v in range(ApiKey::DescribeGroups) {
        let req = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(str("g-stable")), GroupId(str("nobody"))]);
        let r: DescribeGroupsResponse = call(s, ApiKey::DescribeGroups, v, &req);
        assert_eq!(r.groups[0].error_code, 0, "DescribeGroups v{v}");
        assert_eq!(r.groups[0].group_state.as_str(), "Stable");
        assert_eq!(r.groups[0].protocol_data.as_str(), "range");
        assert_eq!(r.groups[0].members.len(), 1);
        assert_eq!(&r.groups[0].members[0].member_assignment[..], b"all");
        assert_eq!(r.groups[0].members[0].client_id.as_str(), "every-version");
        assert_eq!(r.groups[1].group_state.as_str(), "Dead");
    }
    for v in range(ApiKey::ListGroups) {
        let mut req = ListGroupsRequest::default();
        if v >= 4 {
            req = req.with_states_filter(vec![str("stable")]);
        }
        let r: ListGroupsResponse = call(s, ApiKey::ListGroups, v, &req);
        assert_eq!(r.error_code, 0, "ListGroups v{v}");
        let names: Vec<&str> = r.groups.iter().map(|g| g.group_id.0.as_str()).collect();
        assert!(names.contains(&"g-stable"), "ListGroups v{v}: {names:?}");
        if v >= 4 {
            assert!(r.groups.iter().all(|g| g.group_state.as_str() == "Stable"));
            assert!(
                !names.contains(&"g-join-0"),
                "waiting in CompletingRebalance"
            );
        }
    }
    for v in range(ApiKey::OffsetCommit) {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(str("g-stable")))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(member.clone())
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(name("ct-2"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(1)
                            .with_committed_offset(100 + v as i64)
                            .with_committed_metadata(Some(str(&format!("v{v}")))),
                    ]),
            ]);
        let r: OffsetCommitResponse = call(s, ApiKey::OffsetCommit, v, &req);
        assert_eq!(r.topics[0].partitions[0].error_code, 0, "OffsetCommit v{v}");
    }
    let last = *range(ApiKey::OffsetCommit).end();
    for v in range(ApiKey::OffsetFetch) {
        let (offset, metadata) = if v >= 8 {
            let req = OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(str("g-stable")))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(name("ct-2"))
                            .with_partition_indexes(vec![0, 1]),
                    ])),
            ]);
            let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, v, &req);
            let ps = &r.groups[0].topics[0].partitions;
            assert_eq!(
                ps[0].committed_offset, -1,
                "nothing committed on partition 0"
            );
            (ps[1].committed_offset, ps[1].metadata.clone())
        } else {
            let req = OffsetFetchRequest::default()
                .with_group_id(GroupId(str("g-stable")))
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(name("ct-2"))
                        .with_partition_indexes(vec![0, 1]),
                ]));
            let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, v, &req);
            let ps = &r.topics[0].partitions;
            assert_eq!(
                ps[0].committed_offset, -1,
                "nothing committed on partition 0"
            );
            (ps[1].committed_offset, ps[1].metadata.clone())
        };
        assert_eq!(offset, 100 + last as i64, "OffsetFetch v{v}");
        assert_eq!(metadata.unwrap().as_str(), format!("v{last}"));
    }
    for v in range(ApiKey::LeaveGroup) {
        let group = format!("g-leave-{v}");
        let j = join(s, &group, 5);
        let req = if v >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(str(&group)))
                .with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(j.member_id),
                    leave_group_request::MemberIdentity::default().with_member_id(str("nobody")),
                ])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(str(&group)))
                .with_member_id(j.member_id)
        };
        let r: LeaveGroupResponse = call(s, ApiKey::LeaveGroup, v, &req);
        assert_eq!(r.error_code, 0, "LeaveGroup v{v}");
        if v >= 3 {
            let codes: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
            assert_eq!(codes, vec![0, 25], "LeaveGroup v{v}: the second is unknown");
        }
    }
    for v in range(ApiKey::OffsetDelete) {
        let req = OffsetDeleteRequest::default()
            .with_group_id(GroupId(str("g-stable")))
            .with_topics(
                ["ct-2", "ct-1"]
                    .iter()
                    .map(|t| {
                        offset_delete_request::OffsetDeleteRequestTopic::default()
                            .with_name(name(t))
                            .with_partitions(vec![
                                offset_delete_request::OffsetDeleteRequestPartition::default()
                                    .with_partition_index(1),
                            ])
                    })
                    .collect(),
            );
        let r: OffsetDeleteResponse = call(s, ApiKey::OffsetDelete, v, &req);
        assert_eq!(r.error_code, 0, "OffsetDelete v{v}");
        // The member subscribes to ct-1, not ct-2: only ct-2's offset goes.
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
        assert_eq!(
            r.topics[1].partitions[0].error_code, 86,
            "GROUP_SUBSCRIBED_TO_TOPIC"
        );
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(str("g-stable")))
            .with_topics(None);
        let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, 7, &req);
        assert!(r.topics.is_empty(), "no offsets left: {:?}", r.topics);
    }
    for v in range(ApiKey::DeleteGroups) {
        let req = DeleteGroupsRequest::default().with_groups_names(vec![
            GroupId(str(&format!("g-leave-{v}"))),
            GroupId(str("g-stable")),
            GroupId(str("nobody")),
        ]);
        let r: DeleteGroupsResponse = call(s, ApiKey::DeleteGroups, v, &req);
        let codes: Vec<i16> = r.results.iter().map(|g| g.error_code).collect();
        assert_eq!(
            codes,
            vec![0, 68, 69],
            "DeleteGroups v{v}: deleted, non-empty, unknown"
        );
    }
}
