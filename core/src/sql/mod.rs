//! SQL over the node's tables (`POST /sql`): CREATE TABLE, DROP TABLE,
//! SHOW TABLES, DESCRIBE, SELECT, and INSERT and DELETE (`write`). Statements are parsed by sqlparser;
//! a SELECT's scan, WHERE and grouping run on the shards that own the
//! table's partitions, and merging, ordering and limits on the shard that
//! took the request.

pub mod access;
pub mod bounds;
pub mod error;
pub mod eval;
pub mod fold;
pub mod leaders;
pub mod scan;
pub mod select;
pub mod system;
pub mod value;
mod write;

use std::rc::Rc;

use serde_json::Value;
use sqlparser::ast::{
    ColumnOption, CreateTable, CreateTableOptions, Expr, ObjectName, ObjectType, SqlOption,
    Statement, TableConstraint,
};

use crate::auth::acl::{Operation, ResourceType};
use crate::auth::Principal;
use crate::error::ErrorCode;
use crate::shard::{NewTopic, Shard};
use crate::table::row::{convert, object_bytes};
use crate::table::schema::{Column, ColumnType, Format, TableSchema};
pub use error::SqlError;
use error::SqlResult;
use eval::{column_name, Columns, Eval, Scope};
use select::SelectPlan;

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
/// Who runs a statement: the principal that signed in over HTTP and its
/// address.
pub struct Caller<'a> {
    pub principal: &'a Principal,
    pub host: &'a str,
}

impl Caller<'_> {
    fn may(&self, shard: &Shard, operation: Operation, table: &str) -> bool {
        shard.allows(
            self.principal,
            self.host,
            operation,
            ResourceType::Topic,
            table,
        )
    }

    /// Refuses unless the caller may do `operation` on `table`.
    fn check(
        &self,
        shard: &Shard,
        operation: Operation,
        what: &str,
        table: &str,
    ) -> Result<(), SqlError> {
        match self.may(shard, operation, table) {
            true => Ok(()),
            false => Err(SqlError::Denied(format!(
                "{} may not {what} table {table}",
                self.principal
            ))),
        }
    }
}

/// Runs every statement of `sql` in order; answers the last one's result.
/// A statement about users or grants (`access`) comes alone.
pub async fn execute(
    shard: &Rc<Shard>,
    sql: &str,
    caller: &Caller<'_>,
) -> Result<QueryResult, SqlError> {
    if let Some(access) = access::parse(sql) {
        return access::run(shard, caller.principal, access?).await;
    }
    let statements = bounds::parse(sql)?;
    if statements.is_empty() {
        return Err(SqlError::Statement("no statement".into()));
    }
    let mut last = QueryResult::default();
    for s in statements {
        last = statement(shard, s, caller).await?;
    }
    Ok(last)
}

pub(super) fn table_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.clone())
        .unwrap_or_else(|| name.to_string())
}

async fn statement(
    shard: &Rc<Shard>,
    s: Statement,
    caller: &Caller<'_>,
) -> Result<QueryResult, SqlError> {
    match s {
        Statement::Query(q) => {
            let max = shard.config.sql_max_scan_bytes;
            let plan = SelectPlan::new(&q, &shard.catalog(), max)?;
            if let Some(table) = plan.table() {
                caller.check(shard, Operation::Read, "select from", table)?;
            }
            plan.execute(shard, caller).await
        }
        Statement::CreateTable(c) => {
            caller.check(shard, Operation::Create, "create", &table_name(&c.name))?;
            create_table(shard, c).await
        }
        Statement::Drop {
            object_type: ObjectType::Table,
            if_exists,
            names,
            ..
        } => {
            let names: Vec<String> = names.iter().map(table_name).collect();
            for n in &names {
                caller.check(shard, Operation::Delete, "drop", n)?;
            }
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
                columns: vec![
                    "name".into(),
                    "kind".into(),
                    "partitions".into(),
                    "format".into(),
                    "subject".into(),
                ],
                rows: catalog
                    .topics
                    .values()
                    .filter(|t| caller.may(shard, Operation::Describe, &t.name))
                    .map(|t| {
                        let kind = match &t.schema {
                            None => "raw",
                            Some(s) if s.is_keyed() => "keyed",
                            Some(_) => "table",
                        };
                        // What its record values are: bytes kept as produced,
                        // JSON rows, or Avro of a registry subject.
                        let (format, subject) = match &t.schema {
                            Some(s) if s.avro_subject().is_some() => {
                                ("avro", Value::from(s.avro_subject()))
                            }
                            Some(s) if !s.keeps_records() => ("json", Value::Null),
                            _ => ("bytes", Value::Null),
                        };
                        vec![
                            Value::from(t.name.clone()),
                            Value::from(kind),
                            Value::from(t.partitions()),
                            Value::from(format),
                            subject,
                        ]
                    })
                    .collect(),
            })
        }
        Statement::ExplainTable {
            table_name: name, ..
        } => {
            if let Some(system) = system::SystemTable::named(&name) {
                return Ok(system.describe());
            }
            let name = table_name(&name);
            caller.check(shard, Operation::Describe, "describe", &name)?;
            describe(shard, &name)
        }
        Statement::Insert(ins) => write::insert(shard, ins, caller).await,
        Statement::Delete(del) => write::delete(shard, del, caller).await,
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
    let (mut columns, primary_key) = declared_columns(&c)?;
    let TableOptions {
        partitions,
        mut configs,
        format,
        subject,
    } = table_options(&c)?;
    let format = match (format.as_deref(), subject) {
        (None | Some("json"), None) => Format::Json,
        (Some("avro"), subject) => {
            let subject = subject.unwrap_or_else(|| format!("{name}-value"));
            avro_columns(shard, &subject, &mut columns, &primary_key).await?;
            Format::Avro { subject }
        }
        (None | Some("json"), Some(_)) => {
            return Err(
                "subject names an Avro table's registry subject: add format = 'avro'"
                    .to_string()
                    .into(),
            )
        }
        (Some(other), _) => {
            return Err(format!("format = '{other}' is not served: 'json' or 'avro'").into())
        }
    };
    check_key(&columns, &primary_key)?;
    // A keyed table keeps its latest row per key: its log is compacted
    // unless the statement says otherwise, so the log and the start-up
    // that reads it stay proportional to the keys, not the updates.
    if !primary_key.is_empty() && !configs.iter().any(|(k, _)| k == "cleanup.policy") {
        configs.push(("cleanup.policy".into(), Some("compact".into())));
    }
    let topic = NewTopic {
        name: name.clone(),
        partitions,
        replication_factor: -1,
        assignments: Vec::new(),
        configs,
        schema: Some(TableSchema {
            columns,
            primary_key,
            format,
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

/// The columns CREATE TABLE declares (types, NOT NULL, defaults) and its
/// primary key, from the column definitions or a PRIMARY KEY constraint.
fn declared_columns(c: &CreateTable) -> Result<(Vec<Column>, Vec<String>), SqlError> {
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
            .ok_or_else(|| format!("column {col_name}: type {type_text} is not supported (BIGINT, INT, SMALLINT, DOUBLE, REAL, BOOLEAN, VARCHAR, TEXT, TIMESTAMP, JSON, BYTES)"))?;
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
    Ok((columns, primary_key))
}

/// CREATE TABLE's `WITH (...)` options: the partition count, the format
/// and registry subject, and the rest as topic configs.
struct TableOptions {
    partitions: i32,
    configs: Vec<(String, Option<String>)>,
    format: Option<String>,
    subject: Option<String>,
}

fn table_options(c: &CreateTable) -> Result<TableOptions, SqlError> {
    let mut out = TableOptions {
        partitions: 1,
        configs: Vec::new(),
        format: None,
        subject: None,
    };
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
        let text = value::as_text(&v).unwrap_or_default();
        match key.value.to_ascii_lowercase().as_str() {
            "partitions" => {
                out.partitions = text
                    .parse()
                    .map_err(|_| format!("partitions = {text} is not a number"))?
            }
            "format" => out.format = Some(text.to_ascii_lowercase()),
            "subject" => out.subject = Some(text),
            k => out.configs.push((k.replace('_', "."), Some(text))),
        }
    }
    Ok(out)
}

/// A table has columns, its primary key names some of them, and a `_value`
/// table keeps records as produced: its rows are keyed by the records'
/// keys or not at all (its other columns are always null).
fn check_key(columns: &[Column], primary_key: &[String]) -> Result<(), SqlError> {
    if columns.is_empty() {
        return Err("a table needs at least one column".to_string().into());
    }
    for k in primary_key {
        if !columns.iter().any(|c| &c.name == k) {
            return Err(format!("PRIMARY KEY names {k}, which is not a column").into());
        }
    }
    if columns.iter().any(|c| c.name == "_value")
        && !primary_key.is_empty()
        && primary_key != ["_key"]
    {
        return Err(format!(
            "a table with a _value column keeps records as produced and is keyed by their keys: its PRIMARY KEY can only be _key, not ({})",
            primary_key.join(", ")
        )
        .into());
    }
    Ok(())
}

/// An Avro table's columns: those declared (the record's own `_key` and
/// `_timestamp` may be among them), and, when no other is, one per field of
/// `subject`'s latest schema in the registry. Its rows are its records, so,
/// as a `_value` table's, they are keyed by the records' keys or not at all.
async fn avro_columns(
    shard: &Rc<Shard>,
    subject: &str,
    columns: &mut Vec<Column>,
    primary_key: &[String],
) -> SqlResult<()> {
    if columns.iter().any(|c| c.name == "_value") {
        return Err(
            "an Avro table's columns are its records' fields: it has no _value column (a raw topic or a _value table keeps the bytes)"
                .into(),
        );
    }
    if !primary_key.is_empty() && primary_key != ["_key"] {
        return Err(format!(
            "an Avro table keeps records as produced and is keyed by their keys, as compaction keeps them: its PRIMARY KEY can only be _key, not ({})",
            primary_key.join(", ")
        ));
    }
    if columns.iter().any(|c| !c.name.starts_with('_')) {
        return Ok(());
    }
    let latest = crate::table::avro::latest(shard, subject)
        .await
        .map_err(|why| format!("{why}: register one first, or declare the table's columns"))?;
    for c in crate::table::avro::columns_of(&latest)
        .map_err(|why| format!("subject {subject}'s latest schema: {why}"))?
    {
        if !columns.iter().any(|d| d.name == c.name) {
            columns.push(c);
        }
    }
    Ok(())
}

/// The value of a constant expression (a literal, maybe negated).
pub(super) fn const_value(e: &Expr) -> SqlResult<Value> {
    let cols = Columns(Vec::new());
    Eval { cols: &cols }
        .eval(e, &Scope::Row(&[]))
        .map_err(|why| format!("{e} is not a constant: {why}"))
}
