//! Tests of Avro tables: framing, decoding (and hostile datums), Debezium
//! envelopes, encoding rows, decimals, and columns from a schema.

use std::rc::Rc;

use apache_avro::types::Value as AvroValue;

use super::decode::decimal_text;
use super::encode::decimal_unscaled;
use super::*;
use crate::registry::schema::Kind;
use crate::table::row::Incoming;
use crate::table::schema::{Column, ColumnType, TableSchema};

const TRADE: &str = r#"{"type":"record","name":"Trade","namespace":"t","fields":[
        {"name":"id","type":"long"},
        {"name":"symbol","type":"string"},
        {"name":"quantity","type":"int"},
        {"name":"price","type":"double"},
        {"name":"venue","type":["null","string"],"default":null},
        {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"again","type":"Side"}
    ]}"#;

fn fetched(text: &str) -> Fetched {
    Fetched {
        id: 7,
        kind: Kind::Avro,
        text: text.into(),
        refs: Vec::new(),
        subjects: vec!["trades-value".into()],
    }
}

fn trade() -> Vec<u8> {
    let schema = Schema::parse_str(TRADE).unwrap();
    let v = AvroValue::Record(vec![
        ("id".into(), AvroValue::Long(42)),
        ("symbol".into(), AvroValue::String("ACME".into())),
        ("quantity".into(), AvroValue::Int(10)),
        ("price".into(), AvroValue::Double(12.5)),
        (
            "venue".into(),
            AvroValue::Union(1, Box::new(AvroValue::String("X".into()))),
        ),
        ("side".into(), AvroValue::Enum(1, "SELL".into())),
        ("at".into(), AvroValue::TimestampMillis(1_700_000_000_123)),
        (
            "tags".into(),
            AvroValue::Array(vec![AvroValue::String("a".into())]),
        ),
        ("again".into(), AvroValue::Enum(0, "BUY".into())),
    ]);
    let mut out = vec![0, 0, 0, 0, 7];
    out.extend(apache_avro::to_avro_datum(&schema, v).unwrap());
    out
}

#[test]
fn a_framed_datum_decodes_to_its_fields() {
    let w = Writer::new(&fetched(TRADE)).unwrap();
    let framed = trade();
    let (id, datum) = unframe(&framed).unwrap();
    assert_eq!(id, 7);
    let o = w.decode(datum).unwrap();
    assert_eq!(o["id"], 42);
    assert_eq!(o["symbol"], "ACME");
    assert_eq!(o["price"], 12.5);
    assert_eq!(o["venue"], "X");
    assert_eq!(o["side"], "SELL");
    assert_eq!(o["again"], "BUY");
    assert_eq!(o["at"], "2023-11-14 22:13:20.123");
    assert_eq!(o["tags"], serde_json::json!(["a"]));
    // Every byte is the datum's.
    let mut longer = datum.to_vec();
    longer.push(0);
    assert!(w.decode(&longer).unwrap_err().contains("1 trailing bytes"));
    // A cut datum says where it ends.
    let cut = w.decode(&datum[..datum.len() - 3]).unwrap_err();
    assert!(
        cut.contains("field tags") && cut.contains("0 bytes left"),
        "{cut}"
    );
}

#[test]
fn bad_framing_is_named() {
    assert!(unframe(&[1, 0, 0, 0, 1, 2]).unwrap_err().contains("magic"));
    assert!(unframe(&[0, 0, 1]).unwrap_err().contains("too short"));
}

#[test]
fn hostile_lengths_are_refused_before_anything_is_held() {
    let s = r#"{"type":"record","name":"R","fields":[
            {"name":"a","type":{"type":"array","items":"null"}},
            {"name":"b","type":{"type":"array","items":"long"}}]}"#;
    let w = Writer::new(&fetched(s)).unwrap();
    // 2^40 nulls: no bytes each, bounded by count.
    let mut d = Vec::new();
    let mut z = (1u64 << 40) << 1;
    while z >= 0x80 {
        d.push((z as u8) | 0x80);
        z >>= 7;
    }
    d.push(z as u8);
    assert!(w.decode(&d).unwrap_err().contains("take no bytes"));
    // 1,000,000 longs announced in 3 bytes.
    let d = [0u8, 0x80, 0x89, 0x7a];
    assert!(w.decode(&d).unwrap_err().contains("items with"));
    // A string longer than the datum.
    let s = r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}"#;
    let w = Writer::new(&fetched(s)).unwrap();
    assert!(w
        .decode(&[0x80, 0x01])
        .unwrap_err()
        .contains("length of 64"));
    // A recursive schema nested past the bound.
    let s = r#"{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}"#;
    let w = Writer::new(&fetched(s)).unwrap();
    let deep = vec![2u8; 1000];
    assert!(w.decode(&deep).unwrap_err().contains("nested"));
}

#[test]
fn a_debezium_envelope_is_its_after_row() {
    // As Debezium's AvroConverter writes a change event's schema: the
    // row record defined in `before`, named in `after`.
    let envelope = r#"{"type":"record","name":"Envelope","namespace":"pg.public.users","fields":[
            {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
                {"name":"id","type":"int"},{"name":"name","type":["null","string"],"default":null}]}],"default":null},
            {"name":"after","type":["null","Value"],"default":null},
            {"name":"op","type":"string"},
            {"name":"ts_ms","type":["null","long"],"default":null}]}"#;
    let cols = columns_of(&Writer::new(&fetched(envelope)).unwrap()).unwrap();
    let names: Vec<&str> = cols.iter().map(|c| &c.name[..]).collect();
    assert_eq!(names, ["id", "name"]);
    let writers = WriterSchemas::default();
    let w = Writer::new(&fetched(envelope)).unwrap();
    writers.by_id.borrow_mut().insert(7, Ok(Rc::new(w)));
    let schema = Schema::parse_str(envelope).unwrap();
    let event = |op: &str, before: Option<i32>, after: Option<i32>| {
        let row = |id: i32| {
            AvroValue::Record(vec![
                ("id".into(), AvroValue::Int(id)),
                (
                    "name".into(),
                    AvroValue::Union(1, Box::new(AvroValue::String(format!("u{id}")))),
                ),
            ])
        };
        let side = |v: Option<i32>| match v {
            Some(id) => AvroValue::Union(1, Box::new(row(id))),
            None => AvroValue::Union(0, Box::new(AvroValue::Null)),
        };
        let v = AvroValue::Record(vec![
            ("before".into(), side(before)),
            ("after".into(), side(after)),
            ("op".into(), AvroValue::String(op.into())),
            (
                "ts_ms".into(),
                AvroValue::Union(0, Box::new(AvroValue::Null)),
            ),
        ]);
        let mut out = vec![0, 0, 0, 0, 7];
        out.extend(apache_avro::to_avro_datum(&schema, v).unwrap());
        out
    };
    let keyed = TableSchema {
        columns: std::iter::once(Column {
            name: "_key".into(),
            ty: ColumnType::Varchar,
            not_null: false,
            default: None,
        })
        .chain(cols.clone())
        .collect(),
        primary_key: vec!["_key".into()],
        format: super::super::schema::Format::Avro {
            subject: "trades-value".into(),
        },
    };
    let row_of = |schema: &TableSchema, value: &[u8]| {
        record_row(
            schema,
            &writers,
            &Incoming {
                key: Some(b"k"),
                value: Some(value),
                timestamp_ms: 0,
            },
        )
    };
    assert_eq!(
        row_of(&keyed, &event("u", Some(1), Some(2))).unwrap(),
        Some(vec![Value::from("k"), Value::from(2), Value::from("u2")])
    );
    assert_eq!(row_of(&keyed, &event("d", Some(1), None)).unwrap(), None);
    let unkeyed = TableSchema {
        columns: cols,
        primary_key: vec![],
        format: keyed.format.clone(),
    };
    assert!(row_of(&unkeyed, &event("d", Some(1), None))
        .unwrap_err()
        .contains("needs a table with PRIMARY KEY"));
    assert!(row_of(&unkeyed, &event("c", None, None))
        .unwrap_err()
        .contains("without an after row"));
}

#[test]
fn a_row_written_as_a_datum_reads_back() {
    let w = Writer::new(&fetched(TRADE)).unwrap();
    let row = serde_json::json!({"id": 42, "symbol": "ACME", "quantity": "10", "price": 12.5,
            "side": "SELL", "at": "2023-11-14 22:13:20.123", "tags": ["a", "b"], "again": "BUY"});
    let framed = encode_row(&w, row.as_object().unwrap()).unwrap();
    let (id, datum) = unframe(&framed).unwrap();
    assert_eq!(id, 7);
    let o = w.decode(datum).unwrap();
    assert_eq!(o["quantity"], 10);
    assert_eq!(o["venue"], Value::Null, "a nullable field left out is null");
    assert_eq!(o["at"], "2023-11-14 22:13:20.123");
    assert_eq!(o["tags"], serde_json::json!(["a", "b"]));
    // apache-avro reads it as the same record.
    let schema = Schema::parse_str(TRADE).unwrap();
    let v = apache_avro::from_avro_datum(&schema, &mut &datum[..], None).unwrap();
    let AvroValue::Record(fields) = v else {
        panic!("a record")
    };
    assert_eq!(fields[4].1, AvroValue::Union(0, Box::new(AvroValue::Null)));
    // What does not fit says which field and why.
    let mut bad = row.as_object().unwrap().clone();
    bad.insert("side".into(), Value::from("HOLD"));
    assert!(encode_row(&w, &bad).unwrap_err().starts_with("field side:"));
    bad.remove("side");
    assert!(encode_row(&w, &bad)
        .unwrap_err()
        .contains("no value and no default"));
}

#[test]
fn decimals_write_with_their_scale() {
    assert_eq!(decimal_unscaled(&Value::from("12.34"), 2), Some(1234));
    assert_eq!(decimal_unscaled(&Value::from("-12.3"), 2), Some(-1230));
    assert_eq!(decimal_unscaled(&Value::from(5), 3), Some(5000));
    assert_eq!(decimal_unscaled(&Value::from("1.234"), 2), None);
    assert_eq!(decimal_unscaled(&Value::from("1"), 1_000_000_000), None);
    let s = r#"{"type":"record","name":"D","fields":[
            {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
            {"name":"f","type":{"type":"fixed","name":"F","size":4,"logicalType":"decimal","precision":9,"scale":2}}]}"#;
    let w = Writer::new(&fetched(s)).unwrap();
    let row = serde_json::json!({"d": "-12.34", "f": "3.5"});
    let framed = encode_row(&w, row.as_object().unwrap()).unwrap();
    let o = w.decode(&framed[5..]).unwrap();
    assert_eq!(o["d"], "-12.34");
    assert_eq!(o["f"], "3.50");
}

#[test]
fn decimals_read_with_their_scale() {
    assert_eq!(decimal_text(&[0x04, 0xd2], 2).unwrap(), "12.34");
    assert_eq!(decimal_text(&[0xfb, 0x2e], 2).unwrap(), "-12.34");
    assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
    assert_eq!(decimal_text(&[0x05], 0).unwrap(), "5");
    assert!(decimal_text(&[0x05], 1_000_000_000).is_err());
}

#[test]
fn columns_follow_the_record() {
    let cols = columns_of(&Writer::new(&fetched(TRADE)).unwrap()).unwrap();
    let got: Vec<(&str, ColumnType)> = cols.iter().map(|c| (&c.name[..], c.ty)).collect();
    assert_eq!(
        got,
        vec![
            ("id", ColumnType::BigInt),
            ("symbol", ColumnType::Varchar),
            ("quantity", ColumnType::Int),
            ("price", ColumnType::Double),
            ("venue", ColumnType::Varchar),
            ("side", ColumnType::Varchar),
            ("at", ColumnType::Timestamp),
            ("tags", ColumnType::Json),
            ("again", ColumnType::Varchar),
        ]
    );
    let not_record = Fetched {
        text: "\"string\"".into(),
        ..fetched(TRADE)
    };
    assert!(Writer::new(&not_record)
        .and_then(|w| columns_of(&w))
        .unwrap_err()
        .contains("not an Avro record"));
}
