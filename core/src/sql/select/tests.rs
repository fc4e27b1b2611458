use super::*;
use crate::table::schema::{Column, ColumnType, TableSchema};

fn catalog() -> Catalog {
    let mut c = Catalog::default();
    let schema = TableSchema {
        columns: vec![
            Column {
                name: "id".into(),
                ty: ColumnType::Int,
                not_null: true,
                default: None,
            },
            Column {
                name: "name".into(),
                ty: ColumnType::Varchar,
                not_null: false,
                default: None,
            },
        ],
        primary_key: vec![],
        format: Default::default(),
    };
    c.topics.insert(
        "people".into(),
        TopicMeta {
            name: "people".into(),
            id: [1; 16],
            shards: vec![0, 1, 0, 1],
            nodes: vec![],
            replication: vec![],
            config: Default::default(),
            schema: Some(schema),
            throttled_replicas: Default::default(),
        },
    );
    c
}

fn plan(sql: &str) -> Result<SelectPlan, SqlError> {
    let mut s = super::super::bounds::parse(sql).map_err(SqlError::Statement)?;
    let sqlparser::ast::Statement::Query(q) = s.remove(0) else {
        panic!("not a query: {sql}")
    };
    SelectPlan::new(&q, &catalog(), 4 << 20)
}

fn refused(sql: &str) -> String {
    match plan(sql) {
        Err(SqlError::Statement(why)) => why,
        other => panic!("{sql}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_plan_says_what_each_partition_gathers() {
    let p = plan("SELECT name FROM people WHERE id > 3 LIMIT 5 OFFSET 2").unwrap();
    let shape = p.shape.as_ref().expect("a table is scanned");
    // Rows in offset order: each partition stops after OFFSET + LIMIT.
    assert_eq!(shape.cap, Some(7));
    assert!(shape.top.is_none());
    // Only the columns named anywhere are filled.
    assert_eq!(shape.used, Some(vec![true, true]));
    assert_eq!(shape.max_bytes, (4 << 20) / 4);
    assert!(p.fold.is_none());
    let p = plan("SELECT name FROM people").unwrap();
    assert_eq!(p.shape.unwrap().used, Some(vec![false, true]));
    let p = plan("SELECT * FROM people").unwrap();
    assert_eq!(p.shape.unwrap().used, None);
}

#[test]
fn order_by_with_limit_keeps_the_best_rows_per_partition() {
    let p =
        plan("SELECT id, name AS n FROM people ORDER BY n DESC NULLS FIRST, 1 LIMIT 3").unwrap();
    let shape = p.shape.unwrap();
    assert_eq!(shape.cap, None, "every row is read to find the best");
    let top = shape.top.expect("a top-k per partition");
    assert_eq!(top.keep, 3);
    // Output names and positions stand for their input expressions.
    let keys: Vec<String> = top.keys.iter().map(|k| k.to_string()).collect();
    assert_eq!(keys, vec!["name", "id"]);
    assert_eq!(
        top.dirs,
        vec![
            SortDir {
                asc: false,
                nulls_first: Some(true)
            },
            SortDir {
                asc: true,
                nulls_first: None
            }
        ]
    );
    // DISTINCT or grouping need every row: no top-k.
    assert!(
        plan("SELECT DISTINCT name FROM people ORDER BY name LIMIT 3")
            .unwrap()
            .shape
            .unwrap()
            .top
            .is_none()
    );
}

#[test]
fn a_grouped_query_is_folded_on_the_owners() {
    let p = plan("SELECT name, count(*) FROM people GROUP BY name HAVING count(*) > 1").unwrap();
    let fold = p.fold.expect("folded");
    assert_eq!(fold.group_by.len(), 1);
    assert_eq!(fold.aggregates.len(), 1, "count(*) is folded once");
    assert_eq!(p.shape.unwrap().cap, None);
}

#[test]
fn bad_queries_are_refused_before_anything_runs() {
    assert!(refused("SELECT * FROM nobody").contains("no table nobody"));
    assert!(refused("SELECT age FROM people").contains("age"));
    assert!(refused("SELECT * FROM people WHERE count(*) > 1").contains("WHERE"));
    assert!(refused("SELECT * FROM people, people").contains("joins"));
    assert!(refused("SELECT * FROM people LIMIT 'x'").contains("row count"));
}

#[test]
fn a_select_without_from_is_answered_without_a_node() {
    let p = plan("SELECT 1 + 2 AS three, 'a' ORDER BY 1").unwrap();
    assert!(p.shape.is_none());
    let eval_input = Input::Rows(vec![Vec::new()]);
    let answer = p.answer(eval_input).unwrap();
    assert_eq!(answer.columns, vec!["three", "'a'"]);
    assert_eq!(answer.rows, vec![vec![Value::from(3), Value::from("a")]]);
}
