//! Records inside an uncompressed v2 batch: reading them (exact timestamp
//! lookups, the node's own logs) and building batches the node writes itself
//! (the group log). Compressed client batches are answered at batch level.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchHeader, ATTR_COMPRESSION_MASK, HEADER_LEN, LOG_OVERHEAD};

/// Appends `v` as a zigzag varint.
pub fn write_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// One record of a batch the node builds or reads: no headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// A record's key and value as `build_batch` takes them (`None`: null).
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Builds one uncompressed v2 batch (base offset 0, assigned on append)
/// holding `records` as (key, value), all stamped `timestamp_ms`.
pub fn build_batch(records: &[KeyValue<'_>], timestamp_ms: i64) -> Bytes {
    assert!(!records.is_empty(), "a batch holds at least one record");
    let mut body = BytesMut::new();
    let mut rec = BytesMut::new();
    for (i, (key, value)) in records.iter().enumerate() {
        rec.clear();
        rec.put_u8(0); // attributes
        write_varlong(&mut rec, 0); // timestamp delta
        write_varlong(&mut rec, i as i64); // offset delta
        for field in [key, value] {
            match field {
                Some(b) => {
                    write_varlong(&mut rec, b.len() as i64);
                    rec.put_slice(b);
                }
                None => write_varlong(&mut rec, -1),
            }
        }
        write_varlong(&mut rec, 0); // headers
        write_varlong(&mut body, rec.len() as i64);
        body.put_slice(&rec);
    }
    let n = records.len() as i32;
    let mut b = BytesMut::with_capacity(HEADER_LEN + body.len());
    b.put_i64(0);
    b.put_i32((HEADER_LEN - LOG_OVERHEAD + body.len()) as i32);
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2);
    b.put_u32(0); // CRC, below
    b.put_i16(0); // attributes
    b.put_i32(n - 1);
    b.put_i64(timestamp_ms);
    b.put_i64(timestamp_ms);
    b.put_i64(-1); // producer id
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(n);
    b.put_slice(&body);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// The records of one uncompressed batch (`batch` holds exactly it).
/// `None` when the batch is compressed or a record does not parse.
pub fn read_records(batch: &Bytes, h: &BatchHeader) -> Option<Vec<Record>> {
    if h.attributes & ATTR_COMPRESSION_MASK != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(h.record_count.max(0) as usize);
    let mut at = HEADER_LEN;
    let field = |at: &mut usize| -> Option<Option<Bytes>> {
        let len = read_varlong(batch, at)?;
        if len < 0 {
            return Some(None);
        }
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        if end > batch.len() {
            return None;
        }
        let b = batch.slice(*at..end);
        *at = end;
        Some(Some(b))
    };
    for _ in 0..h.record_count {
        let len = read_varlong(batch, &mut at)?;
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        if end > batch.len() {
            return None;
        }
        at += 1; // attributes
        let ts_delta = read_varlong(batch, &mut at)?;
        let offset_delta = read_varlong(batch, &mut at)?;
        let key = field(&mut at)?;
        let value = field(&mut at)?;
        out.push(Record {
            offset: h.base_offset + offset_delta,
            timestamp: h.base_timestamp + ts_delta,
            key,
            value,
        });
        at = end;
    }
    Some(out)
}

/// Reads a zigzag varint (Kafka's varint/varlong) from `b` at `*at`.
pub fn read_varlong(b: &[u8], at: &mut usize) -> Option<i64> {
    let mut value: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = *b.get(*at)?;
        *at += 1;
        value |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    Some(((value >> 1) as i64) ^ -((value & 1) as i64))
}

/// The offset and timestamp of the first record at or after `ts` in an
/// uncompressed batch. `None` for a compressed batch or when no record is
/// that new.
pub fn first_offset_at_or_after(batch: &[u8], h: &BatchHeader, ts: i64) -> Option<(i64, i64)> {
    if h.attributes & ATTR_COMPRESSION_MASK != 0 || h.is_log_append_time() {
        return None;
    }
    let mut at = HEADER_LEN;
    for _ in 0..h.record_count {
        let len = read_varlong(batch, &mut at)?;
        let start = at;
        at += 1; // attributes
        let ts_delta = read_varlong(batch, &mut at)?;
        let offset_delta = read_varlong(batch, &mut at)?;
        let record_ts = h.base_timestamp + ts_delta;
        if record_ts >= ts {
            return Some((h.base_offset + offset_delta, record_ts));
        }
        at = start.checked_add(usize::try_from(len).ok()?)?;
        if at > batch.len() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varlong_zigzag() {
        let mut at = 0;
        assert_eq!(read_varlong(&[0x01], &mut at), Some(-1));
        at = 0;
        assert_eq!(read_varlong(&[0x02], &mut at), Some(1));
        at = 0;
        assert_eq!(read_varlong(&[0xac, 0x02], &mut at), Some(150));
        assert_eq!(at, 2);
        at = 0;
        assert_eq!(read_varlong(&[0x80], &mut at), None);
        for v in [0i64, 1, -1, 63, -64, 64, 300, -300, i64::MAX, i64::MIN] {
            let mut b = BytesMut::new();
            write_varlong(&mut b, v);
            let mut at = 0;
            assert_eq!(read_varlong(&b, &mut at), Some(v));
            assert_eq!(at, b.len());
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
}
