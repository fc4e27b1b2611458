//! Reading individual records inside an uncompressed v2 batch (used for
//! exact timestamp lookups). Compressed batches are answered at batch level.

use crate::batch::{BatchHeader, ATTR_COMPRESSION_MASK, HEADER_LEN};

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
    }
}
