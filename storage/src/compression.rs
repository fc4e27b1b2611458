//! Decompressing the records of a batch (Kafka's codecs: gzip, snappy with
//! or without xerial framing, lz4 frames, zstd), with a bound on the output
//! so a small hostile batch cannot claim gigabytes.

use std::io::Read;

/// Kafka's codec numbers (the low three attribute bits).
pub const NONE: i16 = 0;
pub const GZIP: i16 = 1;
pub const SNAPPY: i16 = 2;
pub const LZ4: i16 = 3;
pub const ZSTD: i16 = 4;

/// The xerial framing the Java client (and kafka-python) put around snappy.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

/// Decompresses `data` compressed with `codec`, refusing more than `limit`
/// bytes of output.
pub fn decompress(codec: i16, data: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    match codec {
        NONE => Ok(data.to_vec()),
        GZIP => read_bounded(flate2::read::GzDecoder::new(data), limit, "gzip"),
        SNAPPY => snappy(data, limit),
        LZ4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), limit, "lz4"),
        ZSTD => {
            let d = zstd::stream::read::Decoder::new(data).map_err(|e| format!("zstd: {e}"))?;
            read_bounded(d, limit, "zstd")
        }
        other => Err(format!("unknown compression codec {other}")),
    }
}

/// Compresses `data` with `codec` the way Kafka's Java client does (the
/// cleaner recompresses a batch it kept part of with the batch's own
/// codec): gzip, snappy in xerial framing, an lz4 frame of independent
/// blocks (Kafka's `KafkaLZ4BlockInputStream` reads no other kind), zstd.
pub fn compress(codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
    compress_at(codec, data, None)
}

/// `compress` at `level` (a topic's `compression.gzip.level` or
/// `compression.zstd.level`; `None`: the codec's default, gzip's 6 and
/// zstd's 3). lz4_flex and snap have one level each.
pub fn compress_at(codec: i16, data: &[u8], level: Option<i32>) -> Result<Vec<u8>, String> {
    use std::io::Write;
    match codec {
        NONE => Ok(data.to_vec()),
        GZIP => {
            let level = match level {
                Some(l @ 1..=9) => flate2::Compression::new(l as u32),
                _ => flate2::Compression::default(),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(data).map_err(|e| format!("gzip: {e}"))?;
            e.finish().map_err(|e| format!("gzip: {e}"))
        }
        SNAPPY => {
            // Magic, version 1, compatible version 1, then blocks of at
            // most 32 KiB of input, each prefixed by its compressed length.
            let mut out = XERIAL_MAGIC.to_vec();
            out.extend([0, 0, 0, 1, 0, 0, 0, 1]);
            let mut enc = snap::raw::Encoder::new();
            for block in data.chunks(32 << 10) {
                let b = enc
                    .compress_vec(block)
                    .map_err(|e| format!("snappy: {e}"))?;
                out.extend((b.len() as u32).to_be_bytes());
                out.extend(b);
            }
            Ok(out)
        }
        LZ4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            e.write_all(data).map_err(|e| format!("lz4: {e}"))?;
            e.finish().map_err(|e| format!("lz4: {e}"))
        }
        ZSTD => zstd::bulk::compress(data, level.unwrap_or(3)).map_err(|e| format!("zstd: {e}")),
        other => Err(format!("unknown compression codec {other}")),
    }
}

fn read_bounded(r: impl Read, limit: usize, what: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    r.take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("{what}: {e}"))?;
    if out.len() > limit {
        return Err(format!("{what}: decompresses to more than {limit} bytes"));
    }
    Ok(out)
}

fn snappy_block(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let len = snap::raw::decompress_len(block).map_err(|e| format!("snappy: {e}"))?;
    if out.len() + len > limit {
        return Err(format!("snappy: decompresses to more than {limit} bytes"));
    }
    let at = out.len();
    out.resize(at + len, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[at..])
        .map_err(|e| format!("snappy: {e}"))?;
    Ok(())
}

fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        snappy_block(data, limit, &mut out)?;
        return Ok(out);
    }
    // Magic (8), version (4), compatible version (4), then length-prefixed blocks.
    let mut at = 16;
    while at < data.len() {
        let len = data
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or("snappy: truncated block length")?;
        at += 4;
        let block = data.get(at..at + len).ok_or("snappy: truncated block")?;
        snappy_block(block, limit, &mut out)?;
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn every_codec_round_trips_and_is_bounded() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let raw_snappy = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend([0, 0, 0, 1, 0, 0, 0, 1]);
        for chunk in data.chunks(8192) {
            let b = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            xerial.extend((b.len() as u32).to_be_bytes());
            xerial.extend(b);
        }
        let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz.write_all(&data).unwrap();
        let lz = lz.finish().unwrap();
        let zs = zstd::encode_all(&data[..], 3).unwrap();
        for (codec, bytes) in [
            (GZIP, &gz),
            (SNAPPY, &raw_snappy),
            (SNAPPY, &xerial),
            (LZ4, &lz),
            (ZSTD, &zs),
        ] {
            assert_eq!(
                decompress(codec, bytes, 1 << 20).unwrap(),
                data,
                "codec {codec}"
            );
            let err = decompress(codec, bytes, 1000).unwrap_err();
            assert!(err.contains("more than 1000 bytes"), "codec {codec}: {err}");
        }
        for codec in [NONE, GZIP, SNAPPY, LZ4, ZSTD] {
            let packed = compress(codec, &data).unwrap();
            assert_eq!(
                decompress(codec, &packed, 1 << 20).unwrap(),
                data,
                "{codec}"
            );
        }
        assert!(decompress(7, b"x", 10).is_err());
        assert!(decompress(GZIP, b"not gzip", 10).is_err());
    }
}
