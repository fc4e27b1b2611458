//! Any text sent to `POST /sql`: parsed within the node's bounds, a SELECT
//! planned against a catalog (a typed and a raw table), and its WHERE and
//! output expressions evaluated over sample rows. Each step answers or
//! refuses, never panics (nor overflows its stack: the bounds check runs
//! first, as the node runs it).
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use sqlparser::ast::{SelectItem, SetExpr, Statement};
use weir_core::catalog::{Catalog, TopicMeta};
use weir_core::sql::bounds::parse;
use weir_core::sql::eval::{check_columns, Columns, Eval, Scope};
use weir_core::sql::select::SelectPlan;
use weir_core::table::schema::{Column, ColumnType, TableSchema};

fn col(name: &str, ty: ColumnType) -> Column {
    Column {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
    }
}

fn catalog() -> Catalog {
    let mut c = Catalog::default();
    let schema = TableSchema {
        columns: vec![
            col("id", ColumnType::BigInt),
            col("name", ColumnType::Varchar),
            col("at", ColumnType::Timestamp),
            col("doc", ColumnType::Json),
            col("d", ColumnType::Double),
        ],
        primary_key: vec!["id".into()],
    };
    for (name, schema) in [("t", Some(schema)), ("raw", None)] {
        c.topics.insert(
            name.into(),
            TopicMeta {
                name: name.into(),
                id: [1; 16],
                shards: vec![0, 1],
                config: Default::default(),
                schema,
            },
        );
    }
    c
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(statements) = parse(&text) else {
        return;
    };
    let catalog = catalog();
    let cols = Columns(vec!["id".into(), "name".into(), "at".into(), "doc".into(), "d".into()]);
    let rows: Vec<Vec<Value>> = vec![
        vec![json!(1), json!("ann"), json!("2024-01-01 00:00:00.000"), json!({"a": [1, 2]}), json!(1.5)],
        vec![json!(i64::MAX), json!(""), Value::Null, json!("text"), json!(-0.0)],
        vec![Value::Null; 5],
    ];
    let eval = Eval { cols: &cols };
    for s in statements {
        let Statement::Query(q) = s else {
            continue;
        };
        let _ = SelectPlan::new(&q, &catalog, 1 << 20);
        let SetExpr::Select(sel) = q.body.as_ref() else {
            continue;
        };
        let mut exprs: Vec<&sqlparser::ast::Expr> = sel.selection.iter().collect();
        for item in &sel.projection {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    exprs.push(e)
                }
                _ => {}
            }
        }
        for e in exprs {
            if check_columns(e, &cols).is_err() {
                continue;
            }
            for r in &rows {
                let _ = eval.eval(e, &Scope::Row(r));
            }
        }
    }
});
