//! One record's key and value into a table's row: JSON of any shape,
//! Debezium envelopes, tombstones, every column type, and a `_value`
//! table's row made at read time. Converts or refuses, never panics.
//!
//! `data[0]`: the key's length (255: no key); then the key, then the value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use weir_core::table::row::{record_row, to_row, Incoming};
use weir_core::table::schema::{Column, ColumnType, TableSchema};

fn col(name: &str, ty: ColumnType, not_null: bool) -> Column {
    Column {
        name: name.into(),
        ty,
        not_null,
        default: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (key, value) = match n {
        255 => (None, rest),
        n if (n as usize) <= rest.len() => (Some(&rest[..n as usize]), &rest[n as usize..]),
        _ => return,
    };
    let incoming = Incoming {
        key,
        value: Some(value),
        timestamp_ms: 1_700_000_000_000,
    };
    let every_type = vec![
        col("id", ColumnType::BigInt, true),
        col("n", ColumnType::Int, false),
        col("s", ColumnType::SmallInt, false),
        col("d", ColumnType::Double, false),
        col("r", ColumnType::Real, false),
        col("b", ColumnType::Boolean, false),
        col("name", ColumnType::Varchar, false),
        col("at", ColumnType::Timestamp, false),
        col("doc", ColumnType::Json, false),
        col("raw", ColumnType::Bytes, false),
    ];
    for primary_key in [vec![], vec!["id".to_string()], vec!["id".into(), "name".into()]] {
        let schema = TableSchema {
            columns: every_type.clone(),
            primary_key,
        };
        let _ = to_row(&schema, &incoming);
        let _ = to_row(&schema, &Incoming { value: None, ..incoming });
    }
    let kept = TableSchema {
        columns: vec![
            col("_key", ColumnType::Bytes, false),
            col("_value", ColumnType::Varchar, false),
            col("_timestamp", ColumnType::Timestamp, false),
            col("other", ColumnType::Int, false),
        ],
        primary_key: vec![],
    };
    let _ = record_row(&kept, &incoming);
});
