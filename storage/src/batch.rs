//! Kafka v2 record batches: header parsing, validation and offset assignment.
//!
//! A batch is stored exactly as the producer sent it; the node only rewrites
//! `baseOffset` (which lies outside the CRC). Everything here works on bytes
//! alone and does no I/O.

use bytes::{Bytes, BytesMut};

use crate::chunks::Chunks;
use crate::varint::read_varlong;

/// Size of the fixed v2 batch header.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength` counts: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// Offset of the CRC-covered region (attributes onwards).
const CRC_START: usize = 21;

/// Attribute bits (Kafka's `RecordBatch` attributes).
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
pub const ATTR_CONTROL: i16 = 0x20;
/// KIP-534: the batch's base timestamp is the time its tombstones may be
/// removed (set by compaction; record timestamps stay relative to it).
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Why a produced batch was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Bytes that cannot be a batch: truncated, wrong length, bad CRC.
    Corrupt(String),
    /// A batch of a magic other than 2 (Kafka 0.11+ clients always send 2).
    UnsupportedMagic(i8),
    /// A record inside is malformed in a way the header reveals.
    InvalidRecord(String),
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Corrupt(s) => write!(f, "corrupt record batch: {s}"),
            BatchError::UnsupportedMagic(m) => {
                write!(f, "record batch magic {m} is not supported (only v2)")
            }
            BatchError::InvalidRecord(s) => write!(f, "invalid record batch: {s}"),
        }
    }
}

/// The fixed header of one v2 batch, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Length of the batch after the `batchLength` field.
    pub batch_length: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

impl BatchHeader {
    /// Decodes the header at the start of `b`. `None` when fewer than
    /// `HEADER_LEN` bytes are there.
    pub fn parse(b: &[u8]) -> Option<BatchHeader> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(BatchHeader {
            base_offset: be_i64(b, 0),
            batch_length: be_i32(b, 8),
            magic: b[16] as i8,
            crc: u32::from_be_bytes(b[17..21].try_into().expect("4 bytes")),
            attributes: be_i16(b, 21),
            last_offset_delta: be_i32(b, 23),
            base_timestamp: be_i64(b, 27),
            max_timestamp: be_i64(b, 35),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            record_count: be_i32(b, 57),
        })
    }

    /// Total size of the batch on the wire and on disk.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    /// The last offset the batch covers.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(self.last_offset_delta as i64)
    }

    /// How many offsets the batch takes.
    pub fn offset_count(&self) -> i64 {
        self.last_offset_delta as i64 + 1
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// Part of a transaction (its records count once the transaction
    /// commits).
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// A control batch (a transaction marker), never an application's.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
}

/// The `partitionLeaderEpoch` field of a batch (bytes 12..16, outside the
/// CRC): the epoch of the leader that stored it. `BatchHeader` leaves it
/// out because appends overwrite it; a follower keeps it as the leader
/// stored it and feeds it to its epoch cache. `None` when `batch` is too
/// short to hold it.
pub fn partition_leader_epoch(batch: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(batch.get(12..16)?.try_into().ok()?))
}

/// How a transaction ended, as its marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

impl Marker {
    /// The control record's type (its key's second field).
    pub fn control_type(self) -> i16 {
        match self {
            Marker::Abort => 0,
            Marker::Commit => 1,
        }
    }
}

/// The marker a control batch holds (`batch` is the whole batch) and the
/// epoch of the coordinator that wrote it: its first record's key is
/// (version i16, type i16), its value (version i16, coordinator epoch
/// i32; -1 when the value is missing). `None` for another control type or
/// bytes that are not one.
pub fn control_marker(batch: &[u8], h: &BatchHeader) -> Option<(Marker, i32)> {
    if !h.is_control() || h.attributes & ATTR_COMPRESSION_MASK != 0 {
        return None;
    }
    let mut at = HEADER_LEN;
    let _len = read_varlong(batch, &mut at)?;
    at += 1; // attributes
    read_varlong(batch, &mut at)?; // timestamp delta
    read_varlong(batch, &mut at)?; // offset delta
    let key_len = read_varlong(batch, &mut at)?;
    if key_len < 4 {
        return None;
    }
    let marker = match i16::from_be_bytes(batch.get(at + 2..at + 4)?.try_into().ok()?) {
        0 => Marker::Abort,
        1 => Marker::Commit,
        _ => return None,
    };
    at += key_len as usize;
    let coordinator_epoch = read_varlong(batch, &mut at)
        .filter(|&n| n >= 6)
        .and_then(|_| batch.get(at + 2..at + 6))
        .map_or(-1, |b| i32::from_be_bytes(b.try_into().expect("4 bytes")));
    Some((marker, coordinator_epoch))
}

/// Checks the CRC-32C of a complete batch. `batch` must hold exactly one batch.
pub fn crc_ok(batch: &[u8], header: &BatchHeader) -> bool {
    batch.len() >= HEADER_LEN && crc32c::crc32c(&batch[CRC_START..]) == header.crc
}

/// Splits the `records` field of one partition's produce data into batches,
/// validating each: length, magic, CRC, offset deltas. Nothing is copied.
pub fn split_produced(records: &Bytes) -> Result<Vec<(BatchHeader, Bytes)>, BatchError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    if records.is_empty() {
        return Err(BatchError::Corrupt(
            "no record batch in produce data".into(),
        ));
    }
    while at < records.len() {
        let rest = &records[at..];
        if rest.len() < LOG_OVERHEAD + 5 {
            return Err(BatchError::Corrupt(format!(
                "{} trailing bytes are too few for a batch header",
                rest.len()
            )));
        }
        let magic = rest[16] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let header = BatchHeader::parse(rest).ok_or_else(|| {
            BatchError::Corrupt(format!("{} bytes are too few for a v2 header", rest.len()))
        })?;
        let total = header.total_len();
        if header.batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 || total > rest.len() {
            return Err(BatchError::Corrupt(format!(
                "batch length {} does not fit the {} bytes sent",
                header.batch_length,
                rest.len()
            )));
        }
        let batch = records.slice(at..at + total);
        if !crc_ok(&batch, &header) {
            return Err(BatchError::Corrupt("CRC-32C mismatch".into()));
        }
        if header.is_control() {
            return Err(BatchError::InvalidRecord(
                "a control batch (a transaction marker): only the node writes those".into(),
            ));
        }
        if header.is_transactional() && header.producer_id < 0 {
            return Err(BatchError::InvalidRecord(
                "a transactional batch without a producer id".into(),
            ));
        }
        if header.record_count <= 0 || header.last_offset_delta != header.record_count - 1 {
            return Err(BatchError::InvalidRecord(format!(
                "record count {} does not match last offset delta {}",
                header.record_count, header.last_offset_delta
            )));
        }
        out.push((header, batch));
        at += total;
    }
    Ok(out)
}

/// The leader epoch every appended batch is stamped with, as Kafka's
/// leader stamps its own: every partition is in epoch 0 until partitions
/// are replicated (`weir_core::leader_epoch`). Outside the CRC.
pub const LEADER_EPOCH: i32 = 0;

/// Writes a rebuilt batch's `batchLength` and CRC from what `b` (exactly
/// the batch) now holds.
pub fn seal(b: &mut [u8]) {
    let batch_length = (b.len() - LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// `batch` with `baseOffset` set to `base_offset`, its partition leader
/// epoch set to `LEADER_EPOCH` (whatever the producer sent) and, for a LogAppendTime
/// batch (as produced, or made one by `log_append_time`: the topic's
/// `message.timestamp.type`), the max timestamp set to `append_time_ms` with
/// the CRC recomputed: a patched copy of the 61-byte header, then the rest
/// of `batch` shared.
pub fn assign_offset(
    batch: &Bytes,
    base_offset: i64,
    append_time_ms: i64,
    log_append_time: bool,
) -> Chunks {
    assign_offset_in_epoch(
        batch,
        base_offset,
        append_time_ms,
        log_append_time,
        LEADER_EPOCH,
    )
}

/// `assign_offset`, stamping `leader_epoch` instead of `LEADER_EPOCH`: a
/// replicated partition's leader stamps the epoch it leads in, so that
/// followers' epoch caches (and OffsetForLeaderEpoch) can tell which
/// leader wrote each batch (KIP-101).
pub fn assign_offset_in_epoch(
    batch: &Bytes,
    base_offset: i64,
    append_time_ms: i64,
    log_append_time: bool,
    leader_epoch: i32,
) -> Chunks {
    let mut head = BytesMut::from(&batch[..HEADER_LEN]);
    let body = batch.slice(HEADER_LEN..);
    head[0..8].copy_from_slice(&base_offset.to_be_bytes());
    head[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    let mut attributes = be_i16(&head, 21);
    if log_append_time {
        attributes |= ATTR_LOG_APPEND_TIME;
        head[21..23].copy_from_slice(&attributes.to_be_bytes());
    }
    if attributes & ATTR_LOG_APPEND_TIME != 0 {
        head[35..43].copy_from_slice(&append_time_ms.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[CRC_START..]), &body);
        head[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    let mut out = Chunks::from(head.freeze());
    out.push(body);
    out
}

/// What a read's pieces hold, counted from their batch headers (here, not
/// in `chunks`, so that pieces of bytes know nothing of batches).
impl Chunks {
    /// The application records in the whole batches held (control
    /// batches and a cut-off last batch are not counted): what a fetch
    /// delivers, counted from the batch headers alone. One pass over the
    /// pieces, whatever their number.
    pub fn record_count(&self) -> u64 {
        let mut header = [0u8; HEADER_LEN];
        // The piece holding byte `start` of the whole, and where it begins.
        let (mut part, mut part_start) = (0usize, 0usize);
        let (mut pos, mut n) = (0usize, 0u64);
        while pos + HEADER_LEN <= self.len() {
            while part_start + self.parts()[part].len() <= pos {
                part_start += self.parts()[part].len();
                part += 1;
            }
            // Gather the header, across pieces if it spans them.
            let (mut filled, mut i, mut at) = (0, part, pos - part_start);
            while filled < HEADER_LEN {
                let piece = &self.parts()[i][at..];
                let take = piece.len().min(HEADER_LEN - filled);
                header[filled..filled + take].copy_from_slice(&piece[..take]);
                filled += take;
                i += 1;
                at = 0;
            }
            let h = BatchHeader::parse(&header).expect("a whole header");
            if h.batch_length <= 0 || pos + h.total_len() > self.len() {
                break;
            }
            if !h.is_control() {
                n += h.record_count.max(0) as u64;
            }
            pos += h.total_len();
        }
        n
    }
}

/// Direct-I/O block size of segment files: flushes write whole blocks, and
/// padding runs to a boundary of it.
pub const BLOCK: u64 = 4096;
/// The least padding a flush writes: the 12 bytes of a batch's offset and
/// length, so a reader at an unaligned position that finds them zero knows
/// it is padding (no batch has length 0, and only a segment's first batch,
/// at position 0, may have offset 0).
pub const PAD_MIN: u64 = LOG_OVERHEAD as u64;

/// Where padding that starts at file position `pos` ends (the next block
/// boundary at least `PAD_MIN` bytes on).
pub fn padding_end(pos: u64) -> u64 {
    (pos + PAD_MIN).div_ceil(BLOCK) * BLOCK
}

/// Whether `rest`, found at file position `pos` where a batch could start,
/// is padding.
fn is_padding(rest: &[u8], pos: u64) -> bool {
    !pos.is_multiple_of(BLOCK)
        && rest.len() >= LOG_OVERHEAD
        && rest[..LOG_OVERHEAD] == [0; LOG_OVERHEAD]
}

/// Where the batch at or after file position `pos` starts, given the bytes
/// `rest` read there: `pos`, or the end of the padding found there.
pub fn batch_start(rest: &[u8], pos: u64) -> u64 {
    if is_padding(rest, pos) {
        padding_end(pos)
    } else {
        pos
    }
}

/// Iterates over the complete batches at the start of a buffer, stopping at
/// the first incomplete or implausible header. Made with `in_file`, it
/// knows where in a segment the buffer was read and steps over padding.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    at: usize,
    /// The file position of `buf[0]`, when padding is to be skipped.
    file_pos: Option<u64>,
}

impl<'a> BatchIter<'a> {
    /// Batches packed end to end (a fetch response, a produce request).
    pub fn new(buf: &'a [u8]) -> Self {
        BatchIter {
            buf,
            at: 0,
            file_pos: None,
        }
    }
    /// Batches of bytes read from a segment at `file_pos` (which must be
    /// where a batch or padding starts): padding is skipped.
    pub fn in_file(buf: &'a [u8], file_pos: u64) -> Self {
        BatchIter {
            buf,
            at: 0,
            file_pos: Some(file_pos),
        }
    }
    /// Byte position just after the last batch returned.
    pub fn position(&self) -> usize {
        self.at
    }
    /// Where the next batch would start: after the last batch returned,
    /// and after padding that follows it, when the buffer holds that much.
    fn next_start(&self) -> usize {
        match self.file_pos {
            Some(base) => {
                (batch_start(&self.buf[self.at..], base + self.at as u64) - base) as usize
            }
            None => self.at,
        }
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// (position in the buffer, header)
    type Item = (usize, BatchHeader);
    fn next(&mut self) -> Option<Self::Item> {
        let at = self.next_start();
        let h = BatchHeader::parse(self.buf.get(at..)?)?;
        if h.magic != 2 || h.batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return None;
        }
        let total = h.total_len();
        if at + total > self.buf.len() {
            return None;
        }
        self.at = at + total;
        Some((at, h))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a syntactically valid v2 batch with `count` empty records.
    pub fn make_batch(count: i32, ts: i64, attrs: i16) -> Vec<u8> {
        let mut records = Vec::new();
        for i in 0..count {
            // record: length varint, attributes, tsDelta, offsetDelta, key -1, value len 0, headers 0
            let body = [0u8, 0, (i as u8) << 1, 1, 0, 0];
            records.push((body.len() as u8) << 1);
            records.extend_from_slice(&body);
        }
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        let batch_length = (HEADER_LEN - LOG_OVERHEAD + records.len()) as i32;
        b.extend_from_slice(&batch_length.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
        b.push(2); // magic
        b.extend_from_slice(&0u32.to_be_bytes()); // crc placeholder
        b.extend_from_slice(&attrs.to_be_bytes());
        b.extend_from_slice(&(count - 1).to_be_bytes());
        b.extend_from_slice(&ts.to_be_bytes());
        b.extend_from_slice(&ts.to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&records);
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// A batch at `offset` (count records), as stored.
    fn stored(count: i32, offset: i64) -> Vec<u8> {
        let mut b = make_batch(count, 1, 0);
        b[..8].copy_from_slice(&offset.to_be_bytes());
        b
    }

    #[test]
    fn batches_in_a_file_step_over_padding_and_only_padding() {
        // Read from file position 4000: a batch, padding to the next block
        // boundary, then two batches end to end (small offsets: their
        // first bytes are zeros, their lengths are not).
        let from = 4000u64;
        let mut buf = stored(3, 7);
        let pad_at = from + buf.len() as u64;
        let b_at = padding_end(pad_at);
        assert!(b_at - pad_at >= PAD_MIN && b_at.is_multiple_of(BLOCK));
        buf.resize((b_at - from) as usize, 0);
        buf.extend_from_slice(&stored(2, 10));
        let c_at = from + buf.len() as u64;
        buf.extend_from_slice(&stored(1, 12));
        let seen: Vec<(u64, i64)> = BatchIter::in_file(&buf, from)
            .map(|(at, h)| (from + at as u64, h.base_offset))
            .collect();
        assert_eq!(seen, vec![(from, 7), (b_at, 10), (c_at, 12)]);
        // Without the file position, padding ends the batches.
        assert_eq!(BatchIter::new(&buf).count(), 1);
        // Padding too short for a length field is never written: past
        // the last 11 bytes of a block it runs into the next block.
        assert_eq!(padding_end(BLOCK - 11), 2 * BLOCK);
        assert_eq!(padding_end(BLOCK - 12), BLOCK);
        // Zeros at a block boundary are the end of the data, not padding.
        let mut end = stored(1, 7);
        let at = BLOCK - end.len() as u64;
        end.resize(end.len() + 100, 0);
        assert_eq!(BatchIter::in_file(&end, at).count(), 1);
        assert_eq!(batch_start(&end[end.len() - 100..], BLOCK), BLOCK);
    }

    #[test]
    fn records_are_counted_across_pieces_and_a_cut_off_batch_is_not() {
        let a = make_batch(3, 1, 0);
        let control = make_batch(1, 1, ATTR_CONTROL);
        let b = make_batch(5, 1, 0);
        let mut whole = Vec::new();
        whole.extend_from_slice(&a);
        whole.extend_from_slice(&control);
        whole.extend_from_slice(&b);
        let whole = Bytes::from(whole);
        // Split mid-header and mid-body, as stored batches are pieces.
        let mut c = Chunks::default();
        for (from, to) in [(0, 20), (20, a.len() + 30), (a.len() + 30, whole.len())] {
            c.push(whole.slice(from..to));
        }
        assert_eq!(c.record_count(), 8);
        let mut cut = Chunks::default();
        cut.push(whole.slice(..whole.len() - 1));
        assert_eq!(cut.record_count(), 3);
        assert_eq!(Chunks::default().record_count(), 0);
    }

    #[test]
    fn splits_and_validates() {
        let mut two = make_batch(3, 100, 0);
        two.extend(make_batch(1, 200, 0));
        let parts = split_produced(&Bytes::from(two)).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0.record_count, 3);
        assert_eq!(parts[1].0.max_timestamp, 200);
    }

    #[test]
    fn bad_crc_is_corrupt() {
        let mut b = make_batch(2, 1, 0);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(matches!(
            split_produced(&Bytes::from(b)),
            Err(BatchError::Corrupt(_))
        ));
    }

    #[test]
    fn truncated_is_corrupt() {
        let b = make_batch(2, 1, 0);
        let short = Bytes::copy_from_slice(&b[..b.len() - 3]);
        assert!(matches!(
            split_produced(&short),
            Err(BatchError::Corrupt(_))
        ));
        assert!(matches!(
            split_produced(&Bytes::from_static(&[0u8; 5])),
            Err(BatchError::Corrupt(_))
        ));
    }

    #[test]
    fn old_magic_is_refused() {
        let mut b = make_batch(1, 1, 0);
        b[16] = 1;
        assert_eq!(
            split_produced(&Bytes::from(b)),
            Err(BatchError::UnsupportedMagic(1))
        );
    }

    #[test]
    fn appended_batches_carry_the_leaders_epoch() {
        let mut raw = make_batch(2, 5, 0);
        raw[12..16].copy_from_slice(&7i32.to_be_bytes());
        let out = assign_offset(&Bytes::from(raw), 3, 0, false).to_bytes();
        assert_eq!(
            i32::from_be_bytes(out[12..16].try_into().unwrap()),
            LEADER_EPOCH
        );
        let h = BatchHeader::parse(&out).unwrap();
        assert!(crc_ok(&out, &h));
    }

    #[test]
    fn offset_assignment_keeps_crc_valid() {
        let b = Bytes::from(make_batch(2, 5, ATTR_LOG_APPEND_TIME));
        let out = assign_offset(&b, 42, 777, false).to_bytes();
        let h = BatchHeader::parse(&out).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.max_timestamp, 777);
        assert!(crc_ok(&out, &h));
        let plain = assign_offset(&Bytes::from(make_batch(2, 5, 0)), 9, 777, false).to_bytes();
        let h = BatchHeader::parse(&plain).unwrap();
        assert_eq!((h.base_offset, h.max_timestamp), (9, 5));
        assert!(crc_ok(&plain, &h));
        // A topic with LogAppendTime makes a CreateTime batch one (the
        // compression bits kept), with a valid CRC.
        let made = assign_offset(&Bytes::from(make_batch(2, 5, 3)), 9, 777, true).to_bytes();
        let h = BatchHeader::parse(&made).unwrap();
        assert!(h.is_log_append_time());
        assert_eq!((h.attributes & 7, h.max_timestamp), (3, 777));
        assert!(crc_ok(&made, &h));
    }

    proptest::proptest! {
        #[test]
        fn split_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = split_produced(&Bytes::from(data.clone()));
            let _ = BatchIter::new(&data).count();
        }

        #[test]
        fn assigned_offsets_round_trip(count in 1i32..50, base in 0i64..i64::MAX / 2, ts in 0i64..i64::MAX / 2) {
            let b = Bytes::from(make_batch(count, ts, 0));
            let out = assign_offset(&b, base, 0, false).to_bytes();
            let parts = split_produced(&out).unwrap();
            proptest::prop_assert_eq!(parts.len(), 1);
            proptest::prop_assert_eq!(parts[0].0.base_offset, base);
            proptest::prop_assert_eq!(parts[0].0.last_offset(), base + count as i64 - 1);
        }
    }
}
