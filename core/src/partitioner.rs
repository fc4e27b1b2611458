//! Kafka's default partitioner for keyed records: murmur2 of the key bytes,
//! made positive, modulo the partition count (`Utils.murmur2` and
//! `BuiltInPartitioner.partitionForKey` in Kafka's clients; librdkafka's
//! `murmur2_random` is the same). Records the node writes itself (SQL
//! INSERT and DELETE) go where a Java or librdkafka producer would put the
//! same key bytes.

/// Kafka's murmur2 (seed 0x9747b28c) of `data`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h = SEED ^ len as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner gives `key` among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own expected values (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ];
        for (text, want) in cases {
            assert_eq!(murmur2(text.as_bytes()), want, "{text}");
        }
        assert!((0..4).contains(&partition_for_key(b"foobar", 4)));
    }
}
