//! SQL over the node's tables (`POST /sql`): CREATE TABLE, DROP TABLE,
//! SHOW TABLES, DESCRIBE and SELECT. Statements are parsed by sqlparser;
//! a SELECT's scan, WHERE and grouping run on the shards that own the
//! table's partitions, and merging, ordering and limits on the shard that
//! took the request.

pub mod bounds;
pub mod eval;
pub mod fold;

use std::rc::Rc;

use serde_json::Value;
use sqlparser::ast::{
    ColumnOption, CreateTable, CreateTableOptions, Expr, GroupByExpr, LimitClause, ObjectName,
    ObjectType, OrderByKind, Query, Select, SelectItem, SetExpr, SqlOption, Statement,
    TableConstraint, TableFactor,
};

use crate::catalog::TopicMeta;
use crate::error::ErrorCode;
use crate::shard::{NewTopic, Shard};
use crate::table::row::{convert, object_bytes};
use crate::table::scan::{columns, fold_partition, scan_partition, ScanShape, TopK};
use crate::table::schema::{Column, ColumnType, TableSchema};
use eval::{
    check_columns, column_name, compare_keys, has_aggregate, literal, mark_columns, Columns, Eval,
    Scope, SqlResult,
};
use fold::{Folded, Groups, Plan};

/// Why a statement failed: the statement (400) or the node (500).
#[derive(Debug, Clone, PartialEq)]
pub enum SqlError {
    Statement(String),
    Node(String),
}

impl From<String> for SqlError {
    fn from(s: String) -> Self {
        SqlError::Statement(s)
    }
}

/// A statement's result: named columns and rows of values.
#[derive(Debug, Clone, Default)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

impl QueryResult {
    /// A JSON array of row objects, columns in order.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = vec![b'['];
        for (i, r) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend(object_bytes(
                self.columns.iter().map(|c| c.as_str()).zip(r.iter()),
            ));
        }
        out.push(b']');
        out
    }
}

/// Runs every statement of `sql` in order; answers the last one's result.
pub async fn execute(shard: &Rc<Shard>, sql: &str) -> Result<QueryResult, SqlError> {
    let statements = bounds::parse(sql)?;
    if statements.is_empty() {
        return Err(SqlError::Statement("no statement".into()));
    }
    let mut last = QueryResult::default();
    for s in statements {
        last = statement(shard, s).await?;
    }
    Ok(last)
}

fn table_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.clone())
        .unwrap_or_else(|| name.to_string())
}

async fn statement(shard: &Rc<Shard>, s: Statement) -> Result<QueryResult, SqlError> {
    match s {
        Statement::Query(q) => select(shard, &q).await,
        Statement::CreateTable(c) => create_table(shard, c).await,
        Statement::Drop {
            object_type: ObjectType::Table,
            if_exists,
            names,
            ..
        } => {
            let names: Vec<String> = names.iter().map(table_name).collect();
            let catalog = shard.catalog();
            let (exist, missing): (Vec<String>, Vec<String>) =
                names.into_iter().partition(|n| catalog.topic(n).is_some());
            if !missing.is_empty() && !if_exists {
                return Err(format!("no table {}", missing.join(", ")).into());
            }
            for r in shard.delete_topics(exist).await {
                r.map_err(|e| SqlError::Node(e.message))?;
            }
            Ok(QueryResult::default())
        }
        Statement::ShowTables { .. } => {
            let catalog = shard.catalog();
            Ok(QueryResult {
                columns: vec!["name".into(), "kind".into(), "partitions".into()],
                rows: catalog
                    .topics
                    .values()
                    .map(|t| {
                        let kind = match &t.schema {
                            None => "raw",
                            Some(s) if s.is_keyed() => "keyed",
                            Some(_) => "table",
                        };
                        vec![
                            Value::from(t.name.clone()),
                            Value::from(kind),
                            Value::from(t.partitions()),
                        ]
                    })
                    .collect(),
            })
        }
        Statement::ExplainTable {
            table_name: name, ..
        } => describe(shard, &table_name(&name)),
        other => Err(format!("unsupported statement: {other}").into()),
    }
}

fn describe(shard: &Rc<Shard>, name: &str) -> Result<QueryResult, SqlError> {
    let catalog = shard.catalog();
    let t = catalog
        .topic(name)
        .ok_or_else(|| format!("no table {name}"))?;
    let columns = vec![
        "column".into(),
        "type".into(),
        "nullable".into(),
        "default".into(),
        "primary_key".into(),
    ];
    let rows = match &t.schema {
        Some(s) => s
            .columns
            .iter()
            .map(|c| {
                let key = s.primary_key.contains(&c.name);
                vec![
                    Value::from(c.name.clone()),
                    Value::from(c.ty.name()),
                    Value::Bool(!c.not_null && !key),
                    c.default
                        .as_ref()
                        .map_or(Value::Null, |d| Value::String(d.to_string())),
                    Value::Bool(key),
                ]
            })
            .collect(),
        None => [
            ("_partition", "INT"),
            ("_offset", "BIGINT"),
            ("_timestamp", "TIMESTAMP"),
            ("_key", "VARCHAR"),
            ("_value", "VARCHAR"),
            ("_headers", "JSON"),
        ]
        .iter()
        .map(|(c, ty)| {
            vec![
                Value::from(*c),
                Value::from(*ty),
                Value::Bool(true),
                Value::Null,
                Value::Bool(false),
            ]
        })
        .collect(),
    };
    Ok(QueryResult { columns, rows })
}

// ---- CREATE TABLE ----------------------------------------------------------

async fn create_table(shard: &Rc<Shard>, c: CreateTable) -> Result<QueryResult, SqlError> {
    let name = table_name(&c.name);
    if shard.catalog().topic(&name).is_some() {
        return if c.if_not_exists {
            Ok(QueryResult::default())
        } else {
            Err(format!("table {name} already exists").into())
        };
    }
    let mut columns: Vec<Column> = Vec::new();
    let mut primary_key: Vec<String> = Vec::new();
    for def in &c.columns {
        let col_name = def.name.value.clone();
        if columns.iter().any(|c| c.name == col_name) {
            return Err(format!("column {col_name} is declared twice").into());
        }
        let type_text = def.data_type.to_string();
        let base = type_text.split('(').next().unwrap_or("").trim();
        let ty = ColumnType::parse(base)
            .ok_or_else(|| format!("column {col_name}: type {type_text} is not supported (BIGINT, INT, SMALLINT, DOUBLE, REAL, BOOLEAN, VARCHAR, TEXT, TIMESTAMP, JSON)"))?;
        let mut column = Column {
            name: col_name.clone(),
            ty,
            not_null: false,
            default: None,
        };
        for opt in &def.options {
            match &opt.option {
                ColumnOption::NotNull => column.not_null = true,
                ColumnOption::Null => {}
                ColumnOption::Default(e) => {
                    let v = const_value(e)?;
                    let v = convert(&column, v)?;
                    column.default = Some(v);
                }
                ColumnOption::Unique {
                    is_primary: true, ..
                } => primary_key.push(col_name.clone()),
                other => return Err(format!("column {col_name}: {other} is not supported").into()),
            }
        }
        columns.push(column);
    }
    if columns.is_empty() {
        return Err("a table needs at least one column".to_string().into());
    }
    for k in &c.constraints {
        match k {
            TableConstraint::PrimaryKey { columns: cols, .. } => {
                if !primary_key.is_empty() {
                    return Err("the primary key is declared twice".to_string().into());
                }
                for ic in cols {
                    let n = column_name(&ic.column.expr).ok_or_else(|| {
                        format!("PRIMARY KEY ({}) must name columns", ic.column.expr)
                    })?;
                    primary_key.push(n);
                }
            }
            other => return Err(format!("constraint {other} is not supported").into()),
        }
    }
    for k in &primary_key {
        if !columns.iter().any(|c| &c.name == k) {
            return Err(format!("PRIMARY KEY names {k}, which is not a column").into());
        }
    }
    let mut partitions = 1;
    let mut configs = Vec::new();
    let options = match &c.table_options {
        CreateTableOptions::With(o)
        | CreateTableOptions::Options(o)
        | CreateTableOptions::Plain(o) => o.clone(),
        _ => Vec::new(),
    };
    for o in options {
        let SqlOption::KeyValue { key, value } = o else {
            return Err(format!("option {o} is not supported").into());
        };
        let v = const_value(&value)?;
        let text = eval::as_text(&v).unwrap_or_default();
        match key.value.to_ascii_lowercase().as_str() {
            "partitions" => {
                partitions = text
                    .parse()
                    .map_err(|_| format!("partitions = {text} is not a number"))?
            }
            k => configs.push((k.replace('_', "."), Some(text))),
        }
    }
    let topic = NewTopic {
        name: name.clone(),
        partitions,
        replication_factor: -1,
        configs,
        schema: Some(TableSchema {
            columns,
            primary_key,
        }),
    };
    match shard.create_topics(vec![topic], false).await.pop() {
        Some(Ok(_)) => Ok(QueryResult::default()),
        Some(Err(e)) if e.code == ErrorCode::TopicAlreadyExists && c.if_not_exists => {
            Ok(QueryResult::default())
        }
        Some(Err(e)) => Err(e.message.into()),
        None => Err(SqlError::Node("the catalog did not answer".into())),
    }
}

/// The value of a constant expression (a literal, maybe negated).
fn const_value(e: &Expr) -> SqlResult<Value> {
    let cols = Columns(Vec::new());
    Eval { cols: &cols }
        .eval(e, &Scope::Row(&[]))
        .map_err(|why| format!("{e} is not a constant: {why}"))
}

// ---- SELECT ----------------------------------------------------------------

async fn select(shard: &Rc<Shard>, q: &Query) -> Result<QueryResult, SqlError> {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return Err(format!("unsupported query: {}", q.body).into());
    };
    let sel: &Select = sel;
    if sel.from.len() > 1 || sel.from.iter().any(|f| !f.joins.is_empty()) {
        return Err("joins are not supported: select from one table"
            .to_string()
            .into());
    }
    // The table read (none for a SELECT without FROM) and its columns.
    let table = match sel.from.first() {
        None => None,
        Some(f) => {
            let TableFactor::Table { name, .. } = &f.relation else {
                return Err(format!("unsupported FROM: {}", f.relation).into());
            };
            let name = table_name(name);
            let catalog = shard.catalog();
            let meta = catalog
                .topic(&name)
                .ok_or_else(|| format!("no table {name}"))?
                .clone();
            Some(meta)
        }
    };
    let cols = Columns(table.as_ref().map(columns).unwrap_or_default());
    let eval = Eval { cols: &cols };
    if let Some(w) = &sel.selection {
        check_columns(w, &cols)?;
        if has_aggregate(w) {
            return Err("aggregates are not allowed in WHERE".to_string().into());
        }
    }

    // The output columns.
    let mut items: Vec<(String, Expr)> = Vec::new();
    for item in &sel.projection {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                for c in &cols.0 {
                    items.push((c.clone(), Expr::Identifier(sqlparser::ast::Ident::new(c))));
                }
            }
            SelectItem::UnnamedExpr(e) => {
                check_columns(e, &cols)?;
                items.push((column_name(e).unwrap_or_else(|| e.to_string()), e.clone()));
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                check_columns(expr, &cols)?;
                items.push((alias.value.clone(), expr.clone()));
            }
        }
    }
    let group_by: Vec<Expr> = match &sel.group_by {
        GroupByExpr::Expressions(e, _) => e.clone(),
        GroupByExpr::All(_) => return Err("GROUP BY ALL is not supported".to_string().into()),
    };
    for g in &group_by {
        check_columns(g, &cols)?;
    }
    if let Some(h) = &sel.having {
        check_columns(h, &cols)?;
    }
    let grouped =
        !group_by.is_empty() || items.iter().any(|(_, e)| has_aggregate(e)) || sel.having.is_some();
    let order: Vec<(Expr, bool, Option<bool>)> = match q.order_by.as_ref().map(|o| &o.kind) {
        None => Vec::new(),
        Some(OrderByKind::Expressions(list)) => list
            .iter()
            .map(|o| {
                (
                    o.expr.clone(),
                    o.options.asc.unwrap_or(true),
                    o.options.nulls_first,
                )
            })
            .collect(),
        Some(OrderByKind::All(_)) => {
            return Err("ORDER BY ALL is not supported".to_string().into())
        }
    };
    // A grouped query is folded as its rows are read (`fold`).
    let plan = if grouped {
        Some(Plan {
            aggregates: fold::aggregates(
                items
                    .iter()
                    .map(|(_, e)| e)
                    .chain(sel.having.iter())
                    .chain(order.iter().map(|(e, _, _)| e)),
            )?,
            group_by: group_by.clone(),
        })
    } else {
        None
    };
    // With ORDER BY and LIMIT (no grouping, no DISTINCT), each partition
    // keeps only its best OFFSET + LIMIT rows by the same keys: the answer
    // is among them.
    let (limit, offset) = limits(q)?;
    let top = match limit {
        Some(l) if !grouped && !order.is_empty() && sel.distinct.is_none() => Some(TopK {
            keys: order
                .iter()
                .map(|(e, _, _)| input_key(e, &items))
                .collect::<SqlResult<_>>()?,
            dirs: order.iter().map(|(_, a, n)| (*a, *n)).collect(),
            keep: offset.saturating_add(l),
        }),
        _ => None,
    };
    // The input: a table's rows or groups (read where its partitions live,
    // filtered there), or one empty row for a SELECT without FROM.
    let input = match table {
        Some(meta) => {
            // With a LIMIT and nothing that needs every row first, the
            // first OFFSET + LIMIT rows of each partition hold every row the
            // answer can take (rows come out in partition, then offset
            // order): `SELECT * FROM t LIMIT 10` reads ten rows a partition.
            let needs_all = grouped || !order.is_empty() || sel.distinct.is_some();
            let shape = ScanShape {
                cap: limit
                    .filter(|_| !needs_all)
                    .map(|l| offset.saturating_add(l)),
                used: used_columns(sel, &group_by, &order, &cols),
                max_bytes: shard.config.sql_max_scan_bytes / meta.partitions().max(1) as usize,
                top,
            };
            match &plan {
                Some(plan) => Input::Groups(
                    fold_scan(shard, meta, sel.selection.clone(), shape, plan.clone()).await?,
                ),
                None => Input::Rows(scan(shard, meta, sel.selection.clone(), shape).await?),
            }
        }
        None => {
            let passes = match &sel.selection {
                Some(w) => eval.passes(w, &[])?,
                None => true,
            };
            let rows: Vec<Vec<Value>> = if passes { vec![Vec::new()] } else { Vec::new() };
            match &plan {
                Some(plan) => {
                    let mut groups = Groups::default();
                    for r in rows {
                        groups.add(&eval, plan, r)?;
                    }
                    Input::Groups(groups.finish(plan))
                }
                None => Input::Rows(rows),
            }
        }
    };

    // Each output row with what its ORDER BY keys are evaluated against.
    let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    let names: Vec<String> = items.iter().map(|(n, _)| n.clone()).collect();
    // An ORDER BY key: an output column (by name or position) or an
    // expression over the input.
    let key_of = |e: &Expr, output: &[Value], scope: &Scope| -> SqlResult<Value> {
        if let Expr::Value(v) = e {
            if let Value::Number(n) = literal(&v.value)? {
                let i = n
                    .as_u64()
                    .filter(|i| *i >= 1 && (*i as usize) <= output.len());
                let i = i.ok_or_else(|| format!("ORDER BY {n} is not an output column"))?;
                return Ok(output[i as usize - 1].clone());
            }
        }
        if let Some(n) = column_name(e) {
            if let Some(i) = names.iter().position(|x| *x == n) {
                return Ok(output[i].clone());
            }
        }
        check_columns(e, &cols)?;
        eval.eval(e, scope)
    };
    // What each output row is evaluated over: a folded group (grouped
    // queries: GROUP BY, aggregates or HAVING) or one row.
    let scopes: Vec<Scope> = match &input {
        Input::Rows(rows) => rows.iter().map(|r| Scope::Row(r)).collect(),
        Input::Groups(groups) => groups.iter().map(Scope::Group).collect(),
    };
    for scope in &scopes {
        if let (Some(h), Scope::Group(_)) = (&sel.having, scope) {
            if eval.eval(h, scope)? != Value::Bool(true) {
                continue;
            }
        }
        let output: Vec<Value> = items
            .iter()
            .map(|(_, e)| eval.eval(e, scope))
            .collect::<SqlResult<_>>()?;
        let keys = order
            .iter()
            .map(|(e, _, _)| key_of(e, &output, scope))
            .collect::<SqlResult<_>>()?;
        out.push((output, keys));
    }
    if sel.distinct.is_some() {
        let mut seen = std::collections::HashSet::new();
        out.retain(|(o, _)| seen.insert(serde_json::to_string(o).expect("values serialise")));
    }
    if !order.is_empty() {
        let dirs: Vec<(bool, Option<bool>)> = order.iter().map(|(_, a, n)| (*a, *n)).collect();
        out.sort_by(|(_, a), (_, b)| compare_keys(&dirs, a, b));
    }
    let rows = out
        .into_iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .map(|(o, _)| o)
        .collect();
    Ok(QueryResult {
        columns: names,
        rows,
    })
}

fn limits(q: &Query) -> SqlResult<(Option<usize>, usize)> {
    let count = |e: &Expr| -> SqlResult<usize> {
        let v = const_value(e)?;
        v.as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("{e} is not a row count"))
    };
    Ok(match &q.limit_clause {
        None => (None, 0),
        Some(LimitClause::LimitOffset { limit, offset, .. }) => (
            limit.as_ref().map(count).transpose()?,
            offset
                .as_ref()
                .map(|o| count(&o.value))
                .transpose()?
                .unwrap_or(0),
        ),
        Some(LimitClause::OffsetCommaLimit { offset, limit }) => {
            (Some(count(limit)?), count(offset)?)
        }
    })
}

/// An ORDER BY key as an expression over the input row: an output column
/// (by position or name) stands for its expression, as `key_of` reads it.
fn input_key(e: &Expr, items: &[(String, Expr)]) -> SqlResult<Expr> {
    if let Expr::Value(v) = e {
        if let Value::Number(n) = literal(&v.value)? {
            let i = n
                .as_u64()
                .filter(|i| *i >= 1 && (*i as usize) <= items.len())
                .ok_or_else(|| format!("ORDER BY {n} is not an output column"))?;
            return Ok(items[i as usize - 1].1.clone());
        }
    }
    if let Some(n) = column_name(e) {
        if let Some((_, x)) = items.iter().find(|(name, _)| *name == n) {
            return Ok(x.clone());
        }
    }
    Ok(e.clone())
}

/// What a SELECT evaluates its output over.
enum Input {
    Rows(Vec<Vec<Value>>),
    Groups(Vec<Folded>),
}

/// Every partition's rows that pass `filter`, folded into groups on the
/// owning shards, then merged in partition order.
async fn fold_scan(
    shard: &Rc<Shard>,
    meta: TopicMeta,
    filter: Option<Expr>,
    shape: ScanShape,
    plan: Plan,
) -> Result<Vec<Folded>, SqlError> {
    let parts = each_partition(
        shard,
        &meta,
        (meta.clone(), filter, shape, plan.clone()),
        |p, (meta, filter, shape, plan): (TopicMeta, Option<Expr>, ScanShape, Plan)| async move {
            fold_partition(&p, &meta, filter.as_ref(), &shape, &plan).await
        },
    )
    .await?;
    let mut all = Groups::default();
    for g in parts {
        all.merge(&plan, g);
    }
    Ok(all.finish(&plan))
}

/// The input columns a SELECT refers to anywhere (`None`: all, for `*`):
/// the scan fills only these and leaves the others null, so `SELECT
/// count(*)` over a raw topic holds no copy of its values.
fn used_columns(
    sel: &Select,
    group_by: &[Expr],
    order: &[(Expr, bool, Option<bool>)],
    cols: &Columns,
) -> Option<Vec<bool>> {
    let mut used = vec![false; cols.0.len()];
    for item in &sel.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                mark_columns(e, cols, &mut used)
            }
            _ => return None, // a wildcard
        }
    }
    for e in sel
        .selection
        .iter()
        .chain(sel.having.iter())
        .chain(group_by)
        .chain(order.iter().map(|(e, _, _)| e))
    {
        mark_columns(e, cols, &mut used);
    }
    Some(used)
}

/// Every partition's rows that pass `filter`, with the columns and at most
/// the rows `shape` says, read on the owning shards.
async fn scan(
    shard: &Rc<Shard>,
    meta: TopicMeta,
    filter: Option<Expr>,
    shape: ScanShape,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let parts = each_partition(
        shard,
        &meta,
        (meta.clone(), filter, shape),
        |p, (meta, filter, shape): (TopicMeta, Option<Expr>, ScanShape)| async move {
            scan_partition(&p, &meta, filter.as_ref(), &shape).await
        },
    )
    .await?;
    Ok(parts.into_iter().flatten().collect())
}

/// Runs `op` with a copy of `arg` on each partition of `meta`, on the shard
/// that owns it; the answers in partition order.
async fn each_partition<A, R, F, Fut>(
    shard: &Rc<Shard>,
    meta: &TopicMeta,
    arg: A,
    op: F,
) -> Result<Vec<R>, SqlError>
where
    A: Clone + Send + 'static,
    R: Send + 'static,
    F: Fn(Rc<crate::partition::Partition>, A) -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = Result<R, String>> + 'static,
{
    let work: Vec<_> = (0..meta.partitions())
        .map(|p| crate::PartitionWork {
            at: p as usize,
            tp: crate::TopicPartition::new(meta.name.clone(), p),
            arg: arg.clone(),
        })
        .collect();
    let answers = shard
        .on_partitions(work, move |_s, p, a| {
            let answer = op(p, a);
            async move {
                answer
                    .await
                    .map_err(|e| crate::error::KafkaError::new(ErrorCode::UnknownServerError, e))
            }
        })
        .await;
    let mut parts = Vec::with_capacity(answers.len());
    for (i, r) in answers {
        parts.push((i, partition_answer(r)?));
    }
    parts.sort_by_key(|(i, _)| *i);
    Ok(parts.into_iter().map(|(_, r)| r).collect())
}

/// One partition's part of a scan. A failure while reading its rows (a
/// WHERE or an aggregate that fails on some row, a statement past the scan
/// limit) is the statement's fault; any other is the node's.
fn partition_answer<T>(r: Result<T, crate::error::KafkaError>) -> Result<T, SqlError> {
    match r {
        Ok(v) => Ok(v),
        Err(e) if e.code == ErrorCode::UnknownServerError => Err(SqlError::Statement(e.message)),
        Err(e) => Err(SqlError::Node(e.message)),
    }
}
