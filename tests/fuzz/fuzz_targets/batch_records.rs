//! A produced batch whose header holds together (its CRC-32C matches), with
//! any records body: validation, decompression with every codec, record
//! parsing and the conversion into a table's rows refuse or accept, never
//! panic, and never decompress past their limit.
//!
//! `data[0]`: the codec (low 3 bits), whether the body is given compressed
//! (bit 3; else it is compressed here, so the records parser sees any
//! bytes through every codec), LogAppendTime (bit 4); `data[1]`: the record
//! count the header claims; the rest: the body.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_core::table::schema::{Column, ColumnType, TableSchema};
use weir_core::table::{check_records, rows_batch};
use weir_storage::batch::split_produced;
use weir_storage::compression::compress;
use weir_storage::records::batch_records;

const LIMIT: usize = 1 << 20;

fn batch(attributes: i16, count: i32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(61 + body.len());
    b.extend_from_slice(&0i64.to_be_bytes()); // base offset
    b.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
    b.push(2); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // CRC, below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&(count - 1).max(0).to_be_bytes()); // last offset delta
    b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(body);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fn col(name: &str, ty: ColumnType, not_null: bool) -> Column {
    Column {
        name: name.into(),
        ty,
        not_null,
        default: None,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let codec = (data[0] & 0x07) as i16;
    let attributes = codec | if data[0] & 0x10 != 0 { 0x08 } else { 0 };
    let body = if data[0] & 0x08 != 0 || codec == 0 {
        data[2..].to_vec()
    } else {
        match compress(codec, &data[2..]) {
            Ok(b) => b,
            Err(_) => return,
        }
    };
    let produced = Bytes::from(batch(attributes, data[1] as i32, &body));
    let Ok(batches) = split_produced(&produced) else {
        return;
    };
    let typed = TableSchema {
        columns: vec![
            col("id", ColumnType::BigInt, true),
            col("name", ColumnType::Varchar, false),
            col("at", ColumnType::Timestamp, false),
            col("doc", ColumnType::Json, false),
            col("raw", ColumnType::Bytes, false),
        ],
        primary_key: vec!["id".into()],
    };
    let kept = TableSchema {
        columns: vec![
            col("_key", ColumnType::Varchar, true),
            col("_value", ColumnType::Bytes, false),
        ],
        primary_key: vec!["_key".into()],
    };
    for (h, b) in batches {
        if let Ok(records) = batch_records(&b, &h, LIMIT) {
            let total: usize = records
                .iter()
                .map(|r| r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len()))
                .sum();
            assert!(total <= LIMIT, "records past the decompression limit");
        }
        let _ = rows_batch("t", &typed, &h, &b, 1, false, LIMIT);
        let _ = check_records("t", &kept, &h, &b, LIMIT);
    }
});
