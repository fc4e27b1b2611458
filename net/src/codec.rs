//! Kafka framing and message codec. Pure functions on bytes: no I/O.
//!
//! Message bodies are the `kafka-protocol` crate's definitions (Kafka 4.1).
//! Decoding from `Bytes` keeps produce records as zero-copy slices.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use weir_core::Chunks;

use crate::apis::supported_versions;

/// A decoded request.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub version: i16,
    pub header: RequestHeader,
    pub body: RequestKind,
    /// The frame's length (without its 4-byte length prefix).
    pub size: usize,
}

/// What a frame turned out to be.
#[derive(Debug)]
pub enum Decoded {
    Request(Box<Request>),
    /// ApiVersions at a version we do not serve: answered with the v0 body
    /// and UNSUPPORTED_VERSION, as Kafka does, so the client can retry lower.
    UnsupportedApiVersions {
        correlation_id: i32,
    },
}

/// Decodes one frame (without its 4-byte length). An error means the frame
/// is malformed or asks for something not served; the connection closes.
pub fn decode_request(mut frame: Bytes) -> Result<Decoded, String> {
    let size = frame.len();
    if frame.len() < 8 {
        return Err(format!(
            "a {}-byte frame is too short for a request header",
            frame.len()
        ));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(key).map_err(|_| format!("unknown API key {key}"))?;
    let Some((min, max)) = supported_versions(api_key) else {
        return Err(format!("API {api_key:?} is not served"));
    };
    if version < min || version > max {
        if api_key == ApiKey::ApiVersions {
            return Ok(Decoded::UnsupportedApiVersions { correlation_id });
        }
        return Err(format!(
            "{api_key:?} v{version} is not served (v{min}–v{max})"
        ));
    }
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| format!("bad {api_key:?} v{version} request header: {e}"))?;
    let body = RequestKind::decode(api_key, &mut frame, version)
        .map_err(|e| format!("bad {api_key:?} v{version} request body: {e}"))?;
    Ok(Decoded::Request(Box::new(Request {
        api_key,
        version,
        header,
        size,
        body,
    })))
}

/// Encodes a response frame as chunks to write in order. Fetch responses
/// are encoded by hand so that record batches go out as they are (shared,
/// not copied): `records` holds each partition's, in response order (the
/// response's own `records` fields are not used). Everything else goes
/// through `encode_response`.
pub fn encode_response_chunks(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
    records: &[Chunks],
) -> Result<Vec<Bytes>, String> {
    match body {
        ResponseKind::Fetch(f) => Ok(fetch_encoder::encode(f, records, version, correlation_id)),
        _ => Ok(vec![encode_response(
            api_key,
            version,
            correlation_id,
            body,
        )?]),
    }
}

/// Encodes a response frame: length, header, body.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, String> {
    // ApiVersions responses always use header v0 (clients parse it before
    // they know whether the broker speaks flexible versions).
    let header_version = if api_key == ApiKey::ApiVersions {
        0
    } else {
        api_key.response_header_version(version)
    };
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, header_version)
        .map_err(|e| format!("encoding {api_key:?} response header: {e}"))?;
    body.encode(&mut buf, version)
        .map_err(|e| format!("encoding {api_key:?} v{version} response: {e}"))?;
    let len = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

/// Fetch response encoding that splices record batches in by reference.
mod fetch_encoder {
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::FetchResponse;
    use weir_core::Chunks;

    /// Pieces of records smaller than this (a batch's 61-byte header, small
    /// batches) are copied inline rather than kept as chunks of their own:
    /// each chunk is a reference count and an iovec, and the kernel copies
    /// every byte into the socket either way.
    const SPLICE_MIN: usize = 16 << 10;

    struct Frame {
        done: Vec<Bytes>,
        cur: BytesMut,
        flexible: bool,
    }

    impl Frame {
        fn varint(&mut self, mut v: u32) {
            while v >= 0x80 {
                self.cur.put_u8((v as u8) | 0x80);
                v >>= 7;
            }
            self.cur.put_u8(v as u8);
        }
        fn array_len(&mut self, n: usize) {
            if self.flexible {
                self.varint(n as u32 + 1);
            } else {
                self.cur.put_i32(n as i32);
            }
        }
        fn string(&mut self, s: &str) {
            if self.flexible {
                self.varint(s.len() as u32 + 1);
            } else {
                self.cur.put_i16(s.len() as i16);
            }
            self.cur.put_slice(s.as_bytes());
        }
        fn tags(&mut self) {
            if self.flexible {
                self.cur.put_u8(0);
            }
        }
        fn records(&mut self, r: &Chunks) {
            if self.flexible {
                self.varint(r.len() as u32 + 1);
            } else {
                self.cur.put_i32(r.len() as i32);
            }
            for part in r.parts() {
                if part.len() < SPLICE_MIN {
                    self.cur.put_slice(part);
                } else {
                    let head = self.cur.split().freeze();
                    self.done.push(head);
                    self.done.push(part.clone());
                }
            }
        }
    }

    /// The whole frame (length prefix included) as chunks. `records`: each
    /// partition's, in response order.
    pub fn encode(
        f: &FetchResponse,
        records: &[Chunks],
        version: i16,
        correlation_id: i32,
    ) -> Vec<Bytes> {
        let mut records = records.iter();
        let flexible = version >= 12;
        let mut c = Frame {
            done: Vec::new(),
            cur: BytesMut::with_capacity(1024),
            flexible,
        };
        c.cur.put_i32(0); // length, patched below
        c.cur.put_i32(correlation_id);
        c.tags(); // response header v1 (flexible) tagged fields
        c.cur.put_i32(f.throttle_time_ms);
        if version >= 7 {
            c.cur.put_i16(f.error_code);
            c.cur.put_i32(f.session_id);
        }
        c.array_len(f.responses.len());
        for t in &f.responses {
            if version >= 13 {
                c.cur.put_slice(t.topic_id.as_bytes());
            } else {
                c.string(&t.topic.0);
            }
            c.array_len(t.partitions.len());
            for p in &t.partitions {
                c.cur.put_i32(p.partition_index);
                c.cur.put_i16(p.error_code);
                c.cur.put_i64(p.high_watermark);
                c.cur.put_i64(p.last_stable_offset);
                if version >= 5 {
                    c.cur.put_i64(p.log_start_offset);
                }
                match &p.aborted_transactions {
                    None if flexible => c.cur.put_u8(0),
                    None => c.cur.put_i32(-1),
                    Some(list) => {
                        c.array_len(list.len());
                        for a in list {
                            c.cur.put_i64(a.producer_id.0);
                            c.cur.put_i64(a.first_offset);
                            c.tags();
                        }
                    }
                }
                if version >= 11 {
                    c.cur.put_i32(p.preferred_read_replica.0);
                }
                // The handler gives one per partition, in this order.
                c.records(records.next().unwrap_or(&Chunks::default()));
                c.tags();
            }
            c.tags();
        }
        c.tags();
        let tail = c.cur.split().freeze();
        c.done.push(tail);
        let total: usize = c.done.iter().map(|b| b.len()).sum();
        let mut first = BytesMut::from(&c.done[0][..]);
        first[0..4].copy_from_slice(&((total - 4) as i32).to_be_bytes());
        c.done[0] = first.freeze();
        c.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest, RequestHeader};
    use kafka_protocol::protocol::StrBytes;

    fn frame<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")))
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_every_served_metadata_version() {
        for v in 0..=13 {
            let f = frame(ApiKey::Metadata, v, &MetadataRequest::default());
            match decode_request(f).unwrap() {
                Decoded::Request(r) => {
                    assert_eq!(r.version, v);
                    assert_eq!(r.header.correlation_id, 7);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn hand_encoded_fetch_matches_the_crate_at_every_version() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::{BrokerId, FetchResponse, TopicName};
        // The first partition's records in three pieces (a batch header, a
        // spliced body, a small one), as the tail cache serves them.
        let mut pieces = Chunks::from(Bytes::from(vec![1u8; 61]));
        pieces.push(Bytes::from(vec![7u8; 40 << 10]));
        pieces.push(Bytes::from(vec![3u8; 100]));
        let big = pieces.to_bytes();
        let records = [pieces, Chunks::from(Bytes::from_static(b"small"))];
        for v in 4..=16i16 {
            let topic = FetchableTopicResponse::default()
                .with_topic(if v >= 13 {
                    TopicName::default()
                } else {
                    TopicName(StrBytes::from_static_str("t"))
                })
                .with_topic_id(if v >= 13 {
                    uuid::Uuid::from_u128(5)
                } else {
                    uuid::Uuid::nil()
                })
                .with_partitions(vec![
                    PartitionData::default()
                        .with_partition_index(0)
                        .with_high_watermark(10)
                        .with_last_stable_offset(10)
                        .with_log_start_offset(if v >= 5 { 2 } else { -1 })
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_records(Some(big.clone())),
                    PartitionData::default()
                        .with_partition_index(1)
                        .with_error_code(1)
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1)
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_records(Some(Bytes::from_static(b"small"))),
                ]);
            let f = FetchResponse::default()
                .with_session_id(0)
                .with_responses(vec![topic]);
            let body = ResponseKind::Fetch(f);
            let expected = encode_response(ApiKey::Fetch, v, 9, &body).unwrap();
            let chunks = encode_response_chunks(ApiKey::Fetch, v, 9, &body, &records).unwrap();
            assert!(chunks.len() > 1, "large records are spliced, not copied");
            let got = chunks.concat();
            let first_difference = got.iter().zip(expected.iter()).position(|(a, b)| a != b);
            assert!(
                got.len() == expected.len() && first_difference.is_none(),
                "Fetch v{v}: {} bytes vs {} expected, first difference at {first_difference:?}",
                got.len(),
                expected.len()
            );
        }
    }

    #[test]
    fn unknown_api_versions_version_is_answered() {
        let f = frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        let mut raw = f.to_vec();
        raw[2..4].copy_from_slice(&99i16.to_be_bytes());
        assert!(matches!(
            decode_request(Bytes::from(raw)).unwrap(),
            Decoded::UnsupportedApiVersions { correlation_id: 7 }
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_request(Bytes::from_static(&[0, 3])).is_err());
        assert!(decode_request(Bytes::from_static(&[
            0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xff
        ]))
        .is_err());
        assert!(decode_request(Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1])).is_err());
    }

    proptest::proptest! {
        #[test]
        fn random_frames_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = decode_request(Bytes::from(data));
        }

        #[test]
        fn random_bodies_after_valid_headers_never_panic(key in proptest::sample::select(vec![0i16, 1, 2, 3, 18, 19, 20, 32, 37, 60]), version in 0i16..14, body in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let mut raw = Vec::new();
            raw.extend_from_slice(&key.to_be_bytes());
            raw.extend_from_slice(&version.to_be_bytes());
            raw.extend_from_slice(&1i32.to_be_bytes());
            raw.extend_from_slice(&body);
            let _ = decode_request(Bytes::from(raw));
        }
    }
}

#[cfg(test)]
mod bounds {
    use super::*;

    /// A header, then a body claiming `count` elements with none following:
    /// decoding must fail cleanly, not try to allocate for the claim.
    fn huge_count_frame(key: i16, version: i16, count_bytes: &[u8]) -> Bytes {
        let mut raw = Vec::new();
        raw.extend_from_slice(&key.to_be_bytes());
        raw.extend_from_slice(&version.to_be_bytes());
        raw.extend_from_slice(&1i32.to_be_bytes());
        raw.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
        raw.extend_from_slice(count_bytes);
        Bytes::from(raw)
    }

    #[test]
    fn huge_array_counts_are_refused() {
        // Metadata v1: topics array (i32 count).
        assert!(decode_request(huge_count_frame(3, 1, &i32::MAX.to_be_bytes())).is_err());
        // Produce v3: transactional id null, acks, timeout, then the topics count.
        let mut body = Vec::new();
        body.extend_from_slice(&(-1i16).to_be_bytes());
        body.extend_from_slice(&1i16.to_be_bytes());
        body.extend_from_slice(&1000i32.to_be_bytes());
        body.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_request(huge_count_frame(0, 3, &body)).is_err());
    }
}
