//! Records inside an uncompressed v2 batch: reading them (exact timestamp
//! lookups, the node's own logs) and building batches the node writes itself
//! (the group log). Compressed client batches are answered at batch level.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{
    BatchHeader, ATTR_COMPRESSION_MASK, ATTR_LOG_APPEND_TIME, HEADER_LEN, LOG_OVERHEAD,
};
use crate::varint::{read_varlong, varlong_len, write_varlong};

/// One record of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

/// A record header: its name and value (`None`: null).
pub type Header = (String, Option<Bytes>);

/// A record's key and value as `build_batch` takes them (`None`: null).
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Builds one uncompressed v2 batch (base offset 0, assigned on append)
/// holding `records` as (key, value), all stamped `timestamp_ms`.
pub fn build_batch(records: &[KeyValue<'_>], timestamp_ms: i64) -> Bytes {
    let stamped: Vec<_> = records
        .iter()
        .map(|(k, v)| (timestamp_ms, *k, *v, &[][..]))
        .collect();
    build_stamped_batch(&stamped, &Producer::NONE)
}

/// The producer fields of a batch the node builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
    /// Mark the batch LogAppendTime (its timestamps are arrival times).
    pub log_append_time: bool,
    /// Mark the batch transactional (its producer's open transaction).
    pub transactional: bool,
    /// Mark the batch a control batch (a transaction marker).
    pub control: bool,
}

impl Producer {
    pub const NONE: Producer = Producer {
        id: -1,
        epoch: -1,
        base_sequence: -1,
        log_append_time: false,
        transactional: false,
        control: false,
    };
}

/// A record as `build_stamped_batch` takes it: (timestamp, key, value,
/// headers).
pub type Stamped<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>, &'a [Header]);

/// Builds one uncompressed v2 batch of (timestamp, key, value, headers) records,
/// written once into a buffer of its exact size (a typed table builds one
/// per produced batch: growing the body and copying each record and then
/// the body were ~5% of typed-table ingest).
pub fn build_stamped_batch(records: &[Stamped<'_>], producer: &Producer) -> Bytes {
    assert!(!records.is_empty(), "a batch holds at least one record");
    let base_ts = records.iter().map(|r| r.0).min().expect("a record");
    let max_ts = records.iter().map(|r| r.0).max().expect("a record");
    let field_len = |f: &Option<&[u8]>| match f {
        Some(b) => varlong_len(b.len() as i64) + b.len(),
        None => varlong_len(-1),
    };
    // attributes, timestamp delta, offset delta, key, value, headers
    let record_len = |i: usize, (ts, key, value, headers): &Stamped<'_>| {
        1 + varlong_len(ts - base_ts)
            + varlong_len(i as i64)
            + field_len(key)
            + field_len(value)
            + varlong_len(headers.len() as i64)
            + headers
                .iter()
                .map(|(name, v)| {
                    varlong_len(name.len() as i64) + name.len() + field_len(&v.as_deref())
                })
                .sum::<usize>()
    };
    let body_len: usize = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let n = record_len(i, r);
            varlong_len(n as i64) + n
        })
        .sum();
    let n = records.len() as i32;
    let mut b = BytesMut::with_capacity(HEADER_LEN + body_len);
    b.put_i64(0);
    b.put_i32((HEADER_LEN - LOG_OVERHEAD + body_len) as i32);
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2);
    b.put_u32(0); // CRC, below
    let mut attributes = 0;
    if producer.log_append_time {
        attributes |= ATTR_LOG_APPEND_TIME;
    }
    if producer.transactional {
        attributes |= crate::batch::ATTR_TRANSACTIONAL;
    }
    if producer.control {
        attributes |= crate::batch::ATTR_CONTROL;
    }
    b.put_i16(attributes);
    b.put_i32(n - 1);
    b.put_i64(base_ts);
    b.put_i64(max_ts);
    b.put_i64(producer.id);
    b.put_i16(producer.epoch);
    b.put_i32(producer.base_sequence);
    b.put_i32(n);
    for (i, r) in records.iter().enumerate() {
        let (ts, key, value, headers) = r;
        write_varlong(&mut b, record_len(i, r) as i64);
        b.put_u8(0); // attributes
        write_varlong(&mut b, ts - base_ts);
        write_varlong(&mut b, i as i64); // offset delta
        let field = |b: &mut BytesMut, f: Option<&[u8]>| match f {
            Some(f) => {
                write_varlong(b, f.len() as i64);
                b.put_slice(f);
            }
            None => write_varlong(b, -1),
        };
        field(&mut b, *key);
        field(&mut b, *value);
        write_varlong(&mut b, headers.len() as i64);
        for (name, v) in headers.iter() {
            field(&mut b, Some(name.as_bytes()));
            field(&mut b, v.as_deref());
        }
    }
    assert_eq!(b.len(), HEADER_LEN + body_len, "batch size as computed");
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// A transaction marker: a control batch of one record whose key is
/// (version 0, type) and value (version 0, coordinator epoch), from the
/// producer whose transaction it ends, at its epoch.
pub fn build_marker_batch(
    marker: crate::batch::Marker,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&marker.control_type().to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let producer = Producer {
        id: producer_id,
        epoch: producer_epoch,
        base_sequence: -1, // markers carry no sequence
        log_append_time: false,
        transactional: true,
        control: true,
    };
    build_stamped_batch(&[(timestamp_ms, Some(&key), Some(&value), &[])], &producer)
}

/// The records of one uncompressed batch (`batch` holds exactly it).
/// `None` when the batch is compressed or a record does not parse.
pub fn read_records(batch: &Bytes, h: &BatchHeader) -> Option<Vec<Record>> {
    if h.attributes & ATTR_COMPRESSION_MASK != 0 {
        return None;
    }
    parse_records(&batch.slice(HEADER_LEN.min(batch.len())..), h).ok()
}

/// The records of any batch (`batch` holds exactly it), decompressing them
/// first (to at most `limit` bytes). The error says what is wrong.
pub fn batch_records(batch: &Bytes, h: &BatchHeader, limit: usize) -> Result<Vec<Record>, String> {
    parse_records(&batch_body(batch, h, limit)?, h)
}

/// The bytes of a batch's records (`batch` holds exactly it), decompressed
/// (to at most `limit` bytes); shared, not copied, when uncompressed.
pub fn batch_body(batch: &Bytes, h: &BatchHeader, limit: usize) -> Result<Bytes, String> {
    let body = batch.slice(HEADER_LEN.min(batch.len())..);
    match h.attributes & ATTR_COMPRESSION_MASK {
        0 => Ok(body),
        codec => Ok(Bytes::from(crate::compression::decompress(
            codec, &body, limit,
        )?)),
    }
}

/// `batch` (holding exactly it) with its records compressed with `codec`
/// at `level` instead of its own codec (decompressing to at most `limit`
/// bytes): the same records, offsets, timestamps and producer, as Kafka's
/// broker recompresses to a topic's `compression.type`.
pub fn recompress(
    batch: &Bytes,
    h: &BatchHeader,
    codec: i16,
    level: Option<i32>,
    limit: usize,
) -> Result<Bytes, String> {
    let body = batch_body(batch, h, limit)?;
    let packed = crate::compression::compress_at(codec, &body, level)?;
    let mut b = BytesMut::with_capacity(HEADER_LEN + packed.len());
    b.extend_from_slice(&batch[..HEADER_LEN]);
    b.extend_from_slice(&packed);
    let attributes = (h.attributes & !ATTR_COMPRESSION_MASK) | codec;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    crate::batch::seal(&mut b);
    Ok(b.freeze())
}

/// Parses `h.record_count` records from `body` (the bytes after the header).
fn parse_records(body: &Bytes, h: &BatchHeader) -> Result<Vec<Record>, String> {
    let bad = |what: &str, i: i32| {
        format!(
            "record {i} of the batch at offset {}: {what}",
            h.base_offset
        )
    };
    let field = |at: &mut usize| -> Option<Option<Bytes>> {
        let len = read_varlong(body, at)?;
        if len < 0 {
            return Some(None);
        }
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        if end > body.len() {
            return None;
        }
        let b = body.slice(*at..end);
        *at = end;
        Some(Some(b))
    };
    let mut out = Vec::with_capacity(h.record_count.clamp(0, 1 << 16) as usize);
    let mut at = 0;
    for i in 0..h.record_count {
        let len = read_varlong(body, &mut at).ok_or_else(|| bad("truncated length", i))?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .filter(|e| *e <= body.len())
            .ok_or_else(|| bad("length past the batch", i))?;
        at += 1; // attributes
        let parsed = (|| {
            let ts_delta = read_varlong(body, &mut at)?;
            let offset_delta = read_varlong(body, &mut at)?;
            let key = field(&mut at)?;
            let value = field(&mut at)?;
            let n = read_varlong(body, &mut at)?;
            let mut headers = Vec::with_capacity(n.clamp(0, 64) as usize);
            for _ in 0..n {
                let name = field(&mut at)??;
                let value = field(&mut at)?;
                headers.push((String::from_utf8_lossy(&name).into_owned(), value));
            }
            Some(Record {
                offset: h.base_offset.wrapping_add(offset_delta),
                timestamp: h.base_timestamp.wrapping_add(ts_delta),
                key,
                value,
                headers,
            })
        })();
        let r = parsed.ok_or_else(|| bad("malformed", i))?;
        if at > end {
            return Err(bad("fields run past its length", i));
        }
        out.push(r);
        at = end;
    }
    Ok(out)
}

/// Most bytes a batch is decompressed to when its records' timestamps are
/// looked up (a produced batch decompresses to far less: the node's
/// largest request is 100 MiB).
pub const TIME_LOOKUP_LIMIT: usize = 256 << 20;

/// The offset and timestamp of the first record at or after `ts` in a
/// batch (`batch` holds exactly it), decompressing a compressed one. `None`
/// when no record is that new, the records do not parse, or the batch's
/// timestamps are the broker's (LogAppendTime: every record has the
/// batch's, so its base offset is the answer).
pub fn first_offset_at_or_after(batch: &[u8], h: &BatchHeader, ts: i64) -> Option<(i64, i64)> {
    if h.is_log_append_time() {
        return None;
    }
    let body = batch.get(HEADER_LEN..)?;
    let codec = h.attributes & ATTR_COMPRESSION_MASK;
    let decompressed;
    let body = if codec == 0 {
        body
    } else {
        decompressed = crate::compression::decompress(codec, body, TIME_LOOKUP_LIMIT).ok()?;
        &decompressed[..]
    };
    let mut at = 0;
    for _ in 0..h.record_count {
        let len = read_varlong(body, &mut at)?;
        let start = at;
        at += 1; // attributes
        let ts_delta = read_varlong(body, &mut at)?;
        let offset_delta = read_varlong(body, &mut at)?;
        let record_ts = h.base_timestamp.wrapping_add(ts_delta);
        if record_ts >= ts {
            return Some((h.base_offset.wrapping_add(offset_delta), record_ts));
        }
        at = start.checked_add(usize::try_from(len).ok()?)?;
        if at > body.len() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `batch` with its records compressed by zstd (as a client sends it).
    fn zstd_batch(batch: &[u8]) -> Vec<u8> {
        let body = zstd::encode_all(&batch[HEADER_LEN..], 1).unwrap();
        let mut out = batch[..HEADER_LEN].to_vec();
        out.extend_from_slice(&body);
        let len = (out.len() - LOG_OVERHEAD) as i32;
        out[8..12].copy_from_slice(&len.to_be_bytes());
        let attributes = i16::from_be_bytes([out[21], out[22]]) | crate::compression::ZSTD;
        out[21..23].copy_from_slice(&attributes.to_be_bytes());
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Found by the `batch_records` fuzz target: deltas that overflow the
    /// base offset or timestamp wrap as Kafka's Java arithmetic does; they
    /// never panic (in a build with overflow checks, they did).
    #[test]
    fn record_deltas_past_the_ends_of_i64_wrap() {
        let mut body = BytesMut::new();
        let mut rec = BytesMut::new();
        rec.extend_from_slice(&[0]); // attributes
        write_varlong(&mut rec, i64::MAX); // timestamp delta
        write_varlong(&mut rec, i64::MAX); // offset delta
        write_varlong(&mut rec, -1); // no key
        write_varlong(&mut rec, -1); // no value
        write_varlong(&mut rec, 0); // no headers
        write_varlong(&mut body, rec.len() as i64);
        body.extend_from_slice(&rec);
        let mut batch = build_stamped_batch(&[(0, None, None, &[][..])], &Producer::NONE).to_vec();
        batch.truncate(HEADER_LEN);
        batch.extend_from_slice(&body);
        batch[27..35].copy_from_slice(&i64::MAX.to_be_bytes()); // base timestamp
        batch[0..8].copy_from_slice(&i64::MAX.to_be_bytes()); // base offset
        let len = (batch.len() - LOG_OVERHEAD) as i32;
        batch[8..12].copy_from_slice(&len.to_be_bytes());
        let batch = Bytes::from(batch);
        let h = BatchHeader::parse(&batch).unwrap();
        let records = batch_records(&batch, &h, 1 << 20).unwrap();
        assert_eq!(records[0].offset, i64::MAX.wrapping_add(i64::MAX));
        assert_eq!(records[0].timestamp, i64::MAX.wrapping_add(i64::MAX));
        assert_eq!(h.last_offset(), i64::MAX);
    }

    /// The record holding a time, compressed or not: the largest timestamp
    /// sits in the batch's second record (ListOffsets' max-timestamp spec
    /// answers it, KAFKA-16310), and a time between records finds the
    /// first record at or after it, in offset order.
    #[test]
    fn the_record_at_a_time_is_found_in_any_batch() {
        let stamps = [100, 500, 200, 300];
        let records: Vec<Stamped<'_>> = stamps
            .iter()
            .map(|t| (*t, None, Some(&b"v"[..]), &[][..]))
            .collect();
        let plain = build_stamped_batch(&records, &Producer::NONE);
        let zstd = zstd_batch(&plain);
        for batch in [&plain[..], &zstd[..]] {
            let h = BatchHeader::parse(batch).unwrap();
            assert_eq!(h.max_timestamp, 500);
            assert_eq!(first_offset_at_or_after(batch, &h, 500), Some((1, 500)));
            assert_eq!(first_offset_at_or_after(batch, &h, 150), Some((1, 500)));
            assert_eq!(first_offset_at_or_after(batch, &h, 100), Some((0, 100)));
            assert_eq!(first_offset_at_or_after(batch, &h, 501), None);
        }
    }

    #[test]
    fn built_batches_validate_and_read_back() {
        let batch = build_batch(
            &[
                (Some(b"k1"), Some(b"v1")),
                (None, None),
                (Some(b""), Some(b"v3")),
            ],
            1234,
        );
        let parts = crate::batch::split_produced(&batch).expect("a valid batch");
        assert_eq!(parts.len(), 1);
        let (h, b) = &parts[0];
        assert_eq!(h.record_count, 3);
        let recs = read_records(b, h).expect("records");
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(recs[0].value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(recs[1].key, None);
        assert_eq!(recs[1].value, None);
        assert_eq!(recs[2].offset, 2);
        assert_eq!(recs[2].key.as_deref(), Some(&b""[..]));
        assert_eq!(recs[2].timestamp, 1234);
    }

    type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<Header>);

    fn any_record() -> impl proptest::strategy::Strategy<Value = Rec> {
        use proptest::prelude::*;
        let field = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300));
        let header = ("[a-z.]{0,20}", field.clone())
            .prop_map(|(name, v): (String, Option<Vec<u8>>)| (name, v.map(Bytes::from)));
        let headers = proptest::collection::vec(header, 0..4);
        (0i64..1 << 50, field.clone(), field, headers)
    }

    proptest::proptest! {
        /// A batch built from any records (sizes across varint widths,
        /// absent and empty fields, timestamps far apart) is valid, of the
        /// size its length field says, and reads back as built.
        #[test]
        fn stamped_batches_read_back(records in proptest::collection::vec(any_record(), 1..40)) {
            let stamped: Vec<Stamped<'_>> = records
                .iter()
                .map(|(ts, k, v, hs)| (*ts, k.as_deref(), v.as_deref(), &hs[..]))
                .collect();
            let batch = build_stamped_batch(&stamped, &Producer::NONE);
            let parts = crate::batch::split_produced(&batch).expect("a valid batch");
            proptest::prop_assert_eq!(parts.len(), 1);
            let (h, b) = &parts[0];
            proptest::prop_assert_eq!(b.len(), batch.len());
            proptest::prop_assert!(crate::batch::crc_ok(b, h), "CRC-32C of the built batch");
            let got = read_records(b, h).expect("records");
            proptest::prop_assert_eq!(got.len(), records.len());
            for (r, (ts, k, v, hs)) in got.iter().zip(&records) {
                proptest::prop_assert_eq!(r.timestamp, *ts);
                proptest::prop_assert_eq!(r.key.as_deref(), k.as_deref());
                proptest::prop_assert_eq!(r.value.as_deref(), v.as_deref());
                proptest::prop_assert_eq!(&r.headers, hs);
            }
        }
    }
}
