use super::*;

fn col(name: &str, ty: ColumnType) -> Column {
    Column {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
    }
}

fn rec<'a>(key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> Incoming<'a> {
    Incoming {
        key,
        value,
        timestamp_ms: 1_000,
    }
}

fn row(op: RowOp) -> (Option<String>, String) {
    match op {
        RowOp::Row { key, row } => (
            key.map(|k| String::from_utf8(k).unwrap()),
            String::from_utf8(row).unwrap(),
        ),
        other => panic!("expected a row, got {other:?}"),
    }
}

#[test]
fn json_objects_become_rows_in_column_order() {
    let mut amount = col("amount", ColumnType::Double);
    amount.default = Some(Value::from(0.5));
    let s = TableSchema {
        columns: vec![
            col("id", ColumnType::BigInt),
            col("item", ColumnType::Varchar),
            amount,
        ],
        primary_key: vec![],
        format: Default::default(),
    };
    let (k, r) = row(to_row(
        &s,
        &rec(None, Some(br#"{"item":"tea","id":1,"extra":true}"#)),
    )
    .unwrap());
    assert_eq!(k, None);
    assert_eq!(r, r#"{"id":1,"item":"tea","amount":0.5}"#);
    let (_, r) = row(to_row(&s, &rec(None, Some(br#"{"id":"2","amount":null}"#))).unwrap());
    assert_eq!(
        r, r#"{"id":2,"item":null,"amount":null}"#,
        "explicit null stays null"
    );
    let e = to_row(&s, &rec(None, Some(br#"{"id":"abc"}"#))).unwrap_err();
    assert_eq!(e, r#"failed to parse "abc" as BIGINT (column id)"#);
    assert!(to_row(&s, &rec(None, Some(b"[1]")))
        .unwrap_err()
        .contains("not a JSON object"));
    assert!(to_row(&s, &rec(None, Some(b"abc")))
        .unwrap_err()
        .contains("not JSON"));
    assert_eq!(to_row(&s, &rec(None, None)).unwrap(), RowOp::Skip);
}

#[test]
fn not_null_and_special_columns() {
    let mut name = col("name", ColumnType::Varchar);
    name.not_null = true;
    let s = TableSchema {
        columns: vec![
            name,
            col("_key", ColumnType::Varchar),
            col("_timestamp", ColumnType::Timestamp),
        ],
        primary_key: vec![],
        format: Default::default(),
    };
    assert_eq!(
        to_row(&s, &rec(None, Some(b"{}"))).unwrap_err(),
        "name is NOT NULL"
    );
    let (_, r) = row(to_row(&s, &rec(Some(b"k"), Some(br#"{"name":"a"}"#))).unwrap());
    assert_eq!(
        r,
        r#"{"name":"a","_key":"k","_timestamp":"1970-01-01 00:00:01.000"}"#
    );
}

#[test]
fn keyed_tables_debezium_and_tombstones() {
    let s = TableSchema {
        columns: vec![
            col("id", ColumnType::BigInt),
            col("name", ColumnType::Varchar),
        ],
        primary_key: vec!["id".into()],
        format: Default::default(),
    };
    let ev = br#"{"op":"c","before":null,"after":{"id":1,"name":"ann"},"source":{}}"#;
    let (k, r) = row(to_row(&s, &rec(Some(br#"{"id": 1}"#), Some(ev))).unwrap());
    assert_eq!(k.as_deref(), Some(r#"{"id":1}"#));
    assert_eq!(r, r#"{"id":1,"name":"ann"}"#);
    let wrapped =
        br#"{"schema":{},"payload":{"op":"u","before":{"id":1},"after":{"id":1,"name":"bo"}}}"#;
    let (_, r) = row(to_row(&s, &rec(None, Some(wrapped))).unwrap());
    assert_eq!(r, r#"{"id":1,"name":"bo"}"#);
    let del = br#"{"op":"d","before":{"id":2,"name":"x"},"after":null}"#;
    assert_eq!(
        to_row(&s, &rec(None, Some(del))).unwrap(),
        RowOp::Delete {
            key: br#"{"id":2}"#.to_vec()
        }
    );
    assert_eq!(
        to_row(&s, &rec(Some(b"2"), None)).unwrap(),
        RowOp::Delete {
            key: br#"{"id":2}"#.to_vec()
        }
    );
    // Kafka Connect's JsonConverter with schemas on: the key in an envelope.
    let envelope = br#"{"schema":{"type":"struct","fields":[]},"payload":{"id":4}}"#;
    assert_eq!(
        to_row(&s, &rec(Some(envelope), None)).unwrap(),
        RowOp::Delete {
            key: br#"{"id":4}"#.to_vec()
        }
    );
    assert_eq!(
        to_row(&s, &rec(Some(br#"{"id":3}"#), Some(b""))).unwrap(),
        RowOp::Delete {
            key: br#"{"id":3}"#.to_vec()
        }
    );
    let truncate = br#"{"op":"t","before":null,"after":null}"#;
    assert_eq!(to_row(&s, &rec(None, Some(truncate))).unwrap(), RowOp::Skip);
    let unkeyed = TableSchema {
        primary_key: vec![],
        format: Default::default(),
        ..s.clone()
    };
    assert!(to_row(&unkeyed, &rec(None, Some(del)))
        .unwrap_err()
        .contains("PRIMARY KEY"));
    assert!(to_row(&s, &rec(None, Some(br#"{"name":"no id"}"#)))
        .unwrap_err()
        .contains("id is NOT NULL"));
}

#[test]
fn json_is_written_as_serde_json_writes_it() {
    let v: Value = serde_json::from_str(
        r#"{"a":"plain","b":"q\"uote\\ and \n \u0001 ü","c":[1,2.5,null,true],"d":{"x":-3}}"#,
    )
    .unwrap();
    let mut out = Vec::new();
    write_value(&mut out, &v);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        serde_json::to_string(&v).unwrap()
    );
}

#[test]
fn value_tables_make_rows_from_records() {
    let mut s = TableSchema {
        columns: vec![
            col("_key", ColumnType::Varchar),
            col("_timestamp", ColumnType::Timestamp),
            col("_value", ColumnType::Varchar),
            col("other", ColumnType::BigInt),
        ],
        primary_key: vec![],
        format: Default::default(),
    };
    assert!(s.keeps_records());
    let r = record_row(&s, &rec(Some(b"n1"), Some(b"plain text, not json"))).unwrap();
    assert_eq!(
        Value::Array(r),
        serde_json::json!([
            "n1",
            "1970-01-01 00:00:01.000",
            "plain text, not json",
            null
        ])
    );
    // Bytes that are not UTF-8 are shown as \x and hex, never mangled.
    let r = record_row(&s, &rec(Some(&[0xff, 0x00]), Some(&[0xc3, 0x28, 0x41]))).unwrap();
    assert_eq!(r[0], Value::from("\\xff00"));
    assert_eq!(r[2], Value::from("\\xc32841"));
    s.columns[2].ty = ColumnType::Bytes;
    let r = record_row(&s, &rec(None, Some(b"AB"))).unwrap();
    assert_eq!(r[0], Value::Null);
    assert_eq!(r[2], Value::from("\\x4142"), "BYTES are always hex");
    assert_eq!(record_row(&s, &rec(Some(b"k"), None)), None);
    assert_eq!(record_row(&s, &rec(Some(b"k"), Some(b""))), None);
    assert_eq!(check_record(&s, &rec(None, Some(b"v"))), Ok(()));
    s.columns[0].not_null = true;
    assert_eq!(
        check_record(&s, &rec(None, Some(b"v"))).unwrap_err(),
        "_key is NOT NULL"
    );
    s.primary_key = vec!["_key".into()];
    assert!(check_record(&s, &rec(None, None))
        .unwrap_err()
        .contains("without a key"));
    assert_eq!(check_record(&s, &rec(Some(b"k"), None)), Ok(()));
}

#[test]
fn bytes_columns_take_base64_or_hex() {
    let c = col("blob", ColumnType::Bytes);
    assert_eq!(
        convert(&c, Value::from("AAH/")).unwrap(),
        Value::from("\\x0001ff")
    );
    assert_eq!(
        convert(&c, Value::from("\\x0001FF")).unwrap(),
        Value::from("\\x0001ff")
    );
    let e = convert(&c, Value::from("not base64!")).unwrap_err();
    assert!(e.contains("base64"), "{e}");
    assert!(convert(&c, Value::from(3)).is_err());
}
