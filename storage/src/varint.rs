//! Kafka's zigzag varints (varint/varlong), as record fields use them:
//! reading, writing, and the bytes one takes. Bytes alone, no other module
//! of the crate: the batch header code and the record code both use them.

use bytes::{BufMut, BytesMut};

/// Appends `v` as a zigzag varint.
pub fn write_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// The bytes `write_varlong` takes for `v`.
pub fn varlong_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varlong_len_is_what_write_varlong_writes() {
        for v in [
            0,
            1,
            -1,
            63,
            -64,
            64,
            -65,
            8191,
            8192,
            i32::MAX as i64,
            i64::MAX,
            i64::MIN,
        ] {
            let mut out = BytesMut::new();
            write_varlong(&mut out, v);
            assert_eq!(varlong_len(v), out.len(), "{v}");
        }
    }

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
}
