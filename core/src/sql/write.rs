//! SQL writes: `INSERT INTO t [(cols)] VALUES (...), (...)` appends rows as
//! records a producer could have sent, and `DELETE FROM t WHERE <key> = ...`
//! writes tombstones into a keyed table. Both go through the produce path
//! (the same conversion, checks and durability as a Kafka produce with
//! acks=all); every row is checked before anything is written, so a
//! statement with a bad row writes nothing. A record goes to the partition
//! Kafka's default partitioner gives its key (a Java producer sending the
//! same key bytes lands in the same place), a record without a key to the
//! partitions in turn; in a keyed table of several partitions, a key that
//! is already somewhere goes there instead (`place`). Each answers one row
//! per record written: its `_partition` and `_offset`.
//!
//! The record each row makes, per kind of table, is built in `records`.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{Map, Value};
use sqlparser::ast::{
    BinaryOperator, Delete, Expr, FromTable, Insert, SetExpr, TableFactor, TableObject,
};

use super::eval::column_name;
use super::leaders::{each_partition, on_leaders, PartitionOp};
use super::{const_value, error::SqlResult, table_name, Caller, QueryResult, SqlError};
use crate::auth::acl::Operation;
use crate::catalog::TopicMeta;
use crate::partitioner::partition_for_key;
use crate::shard::Shard;
use crate::table::avro;
use crate::table::keyed::rank;
use crate::table::row::{convert, object_bytes};
use weir_storage::records::{build_stamped_batch, Header, Producer};

mod records;

use records::{avro_record, json_record, raw_record, record_bytes, value_record};

/// The most rows one DELETE may name: `a IN (...) AND b IN (...)` names
/// every combination, so a short statement could otherwise name billions.
const MAX_DELETE_ROWS: usize = 100_000;

/// One record a statement writes.
struct Record {
    partition: Option<i32>,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<Header>,
}

pub(super) async fn insert(
    shard: &Rc<Shard>,
    ins: Insert,
    caller: &Caller<'_>,
) -> Result<QueryResult, SqlError> {
    let TableObject::TableName(name) = &ins.table else {
        return Err("INSERT INTO names a table".to_string().into());
    };
    let table = table_name(name);
    caller.check(shard, Operation::Write, "insert into", &table)?;
    let catalog = shard.catalog();
    let meta = catalog
        .topic(&table)
        .ok_or_else(|| format!("no table {table}"))?;
    // An Avro table's rows are written with its subject's latest schema.
    let writer = match meta.schema.as_ref().and_then(|s| s.avro_subject()) {
        Some(subject) => Some(avro::latest(shard, subject).await.map_err(|why| {
            format!("{table} is an Avro table, written with its subject's latest schema: {why}")
        })?),
        None => None,
    };
    let columns: Vec<String> = if ins.columns.is_empty() {
        crate::table::read::columns(meta)
    } else {
        ins.columns.iter().map(|c| c.value.clone()).collect()
    };
    let source = ins
        .source
        .as_ref()
        .ok_or("INSERT needs VALUES (...)".to_string())?;
    let SetExpr::Values(values) = source.body.as_ref() else {
        return Err(format!("INSERT takes VALUES (...), not {}", source.body).into());
    };
    let now = crate::clock::now_ms();
    let mut records = Vec::with_capacity(values.rows.len());
    for (i, exprs) in values.rows.iter().enumerate() {
        if exprs.len() != columns.len() {
            return Err(format!(
                "row {} has {} values for {} columns",
                i + 1,
                exprs.len(),
                columns.len()
            )
            .into());
        }
        let mut row = Map::new();
        for (c, e) in columns.iter().zip(exprs) {
            if row.insert(c.clone(), const_value(e)?).is_some() {
                return Err(format!("column {c} is named twice").into());
            }
        }
        let record = match (&meta.schema, &writer) {
            (Some(s), Some(w)) => avro_record(s, w, row, now),
            (None, _) => raw_record(row, now),
            (Some(s), _) if s.keeps_records() => value_record(s, row, now),
            (Some(s), _) => json_record(s, row, now),
        }
        .map_err(|why| format!("row {}: {why}", i + 1))?;
        records.push(record);
    }
    let records = place(shard, meta, records, false).await?;
    write(shard, meta, records).await
}

pub(super) async fn delete(
    shard: &Rc<Shard>,
    del: Delete,
    caller: &Caller<'_>,
) -> Result<QueryResult, SqlError> {
    let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &del.from;
    let [from] = &from[..] else {
        return Err("DELETE FROM names one table".to_string().into());
    };
    let TableFactor::Table { name, .. } = &from.relation else {
        return Err("DELETE FROM names one table".to_string().into());
    };
    if !from.joins.is_empty() || del.using.is_some() || del.limit.is_some() {
        return Err("DELETE FROM t WHERE ... takes no joins, USING or LIMIT"
            .to_string()
            .into());
    }
    let table = table_name(name);
    caller.check(shard, Operation::Write, "delete from", &table)?;
    let catalog = shard.catalog();
    let meta = catalog
        .topic(&table)
        .ok_or_else(|| format!("no table {table}"))?;
    let schema = match &meta.schema {
        Some(s) if s.is_keyed() => s,
        _ => {
            return Err(format!(
                "DELETE needs a keyed table (one with a PRIMARY KEY), whose rows a tombstone removes; the rows of {table} are records of a log, removed by its retention or by DeleteRecords"
            )
            .into())
        }
    };
    let selection = del.selection.as_ref().ok_or_else(|| {
        format!(
            "DELETE FROM {table} needs WHERE naming its key ({})",
            schema.primary_key.join(", ")
        )
    })?;
    let now = crate::clock::now_ms();
    let mut records = Vec::new();
    for keys in key_sets(selection)? {
        for k in &schema.primary_key {
            if !keys.contains_key(k) {
                return Err(format!(
                    "DELETE FROM {table} names rows by every key column ({}): {k} is missing",
                    schema.primary_key.join(", ")
                )
                .into());
            }
        }
        if let Some(extra) = keys.keys().find(|c| !schema.primary_key.contains(c)) {
            return Err(format!(
                "DELETE FROM {table} names rows by their key ({}) only, not {extra}",
                schema.primary_key.join(", ")
            )
            .into());
        }
        let key = if schema.keeps_records() {
            // CREATE TABLE keys such a table by _key only; a catalog from
            // before that rule may say otherwise: refused, never a panic.
            let (Some(c), Some(v)) = (schema.column("_key"), keys.get("_key")) else {
                return Err(format!(
                    "{table} keeps records as produced and is keyed by ({}), not _key: its rows cannot be named",
                    schema.primary_key.join(", ")
                )
                .into());
            };
            record_bytes(c.ty, v)?.ok_or("_key is null".to_string())?
        } else {
            let mut parts = Vec::new();
            for k in &schema.primary_key {
                let c = schema.column(k).expect("key columns exist");
                let v = convert(c, keys[k].clone())?;
                if v.is_null() {
                    return Err(format!("key column {k} is null").into());
                }
                parts.push((k.as_str(), v));
            }
            object_bytes(parts.iter().map(|(k, v)| (*k, v)))
        };
        records.push(Record {
            partition: None,
            timestamp: now,
            key: Some(key),
            value: None,
            headers: Vec::new(),
        });
    }
    let records = place(shard, meta, records, true).await?;
    write(shard, meta, records).await
}

/// Where a keyed table of several partitions takes each record: to the
/// partition holding its key's newest copy, so the new write supersedes it
/// there (and compaction can drop the old one); a deletion to every
/// partition holding a live copy, so no older copy outlives the tombstone
/// (`table::keyed`). A key held nowhere goes to its home (`write`).
async fn place(
    shard: &Rc<Shard>,
    meta: &TopicMeta,
    records: Vec<Record>,
    deleting: bool,
) -> Result<Vec<Record>, SqlError> {
    let partitions = meta.partitions();
    if partitions <= 1 || !meta.schema.as_ref().is_some_and(|s| s.is_keyed()) {
        return Ok(records);
    }
    let keys: Vec<Vec<u8>> = records
        .iter()
        .map(|r| r.key.clone().unwrap_or_default())
        .collect();
    let found = each_partition(shard, meta, PartitionOp::Copies { keys }).await?;
    // Per record: its copies as (partition, timestamp, live).
    let mut copies: Vec<Vec<(i32, i64, bool)>> = vec![Vec::new(); records.len()];
    for (partition, held) in found.into_iter().enumerate() {
        for (i, ts, live) in held.copies()? {
            let Some(copy) = copies.get_mut(i) else {
                return Err(SqlError::Node(format!(
                    "partition {partition} of {} named key {i} of {} asked",
                    meta.name,
                    records.len()
                )));
            };
            copy.push((partition as i32, ts, live));
        }
    }
    let mut out = Vec::with_capacity(records.len());
    for (mut r, copies) in records.into_iter().zip(copies) {
        let Some(key) = r.key.as_deref() else {
            out.push(r);
            continue;
        };
        let home = partition_for_key(key, partitions);
        if deleting {
            let live: Vec<i32> = copies.iter().filter(|c| c.2).map(|c| c.0).collect();
            if let Some((first, rest)) = live.split_first() {
                for &p in rest {
                    out.push(Record {
                        partition: Some(p),
                        key: r.key.clone(),
                        value: None,
                        headers: Vec::new(),
                        timestamp: r.timestamp,
                    });
                }
                r.partition = Some(*first);
            }
        } else if let Some(newest) = copies.iter().max_by_key(|c| rank(c.1, c.0 == home, c.0)) {
            r.partition = Some(newest.0);
        }
        out.push(r);
    }
    Ok(out)
}

/// The rows a WHERE names: `k = v`, `k IN (...)`, AND between columns and
/// OR between rows, with constants only.
fn key_sets(e: &Expr) -> SqlResult<Vec<BTreeMap<String, Value>>> {
    let unsupported = || {
        format!("DELETE takes WHERE with key columns compared to constants (k = v, k IN (...), AND, OR), not {e}")
    };
    match e {
        Expr::Nested(inner) => key_sets(inner),
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::Or => {
                let mut out = key_sets(left)?;
                out.extend(key_sets(right)?);
                if out.len() > MAX_DELETE_ROWS {
                    return Err(format!(
                        "DELETE names at most {MAX_DELETE_ROWS} rows a statement"
                    ));
                }
                Ok(out)
            }
            BinaryOperator::And => {
                let (l, r) = (key_sets(left)?, key_sets(right)?);
                if l.len().saturating_mul(r.len()) > MAX_DELETE_ROWS {
                    return Err(format!(
                        "DELETE names at most {MAX_DELETE_ROWS} rows a statement; this WHERE names {} × {}",
                        l.len(),
                        r.len()
                    ));
                }
                let mut out = Vec::with_capacity(l.len() * r.len());
                for a in &l {
                    for b in &r {
                        let mut m = a.clone();
                        for (k, v) in b {
                            if m.insert(k.clone(), v.clone()).is_some_and(|old| &old != v) {
                                // `k = 1 AND k = 2` names no row.
                                m.clear();
                                break;
                            }
                        }
                        if !m.is_empty() {
                            out.push(m);
                        }
                    }
                }
                Ok(out)
            }
            BinaryOperator::Eq => {
                let (col, value) = match (column_name(left), column_name(right)) {
                    (Some(c), None) => (c, right),
                    (None, Some(c)) => (c, left),
                    _ => return Err(unsupported()),
                };
                Ok(vec![BTreeMap::from([(col, const_value(value)?)])])
            }
            _ => Err(unsupported()),
        },
        Expr::InList {
            expr,
            list,
            negated: false,
        } => {
            let col = column_name(expr).ok_or_else(unsupported)?;
            if list.len() > MAX_DELETE_ROWS {
                return Err(format!(
                    "DELETE names at most {MAX_DELETE_ROWS} rows a statement"
                ));
            }
            list.iter()
                .map(|v| Ok(BTreeMap::from([(col.clone(), const_value(v)?)])))
                .collect()
        }
        _ => Err(unsupported()),
    }
}

/// Writes `records` (each partition's as one batch, acks=all) and answers
/// where each went, in statement order.
async fn write(
    shard: &Rc<Shard>,
    meta: &TopicMeta,
    records: Vec<Record>,
) -> Result<QueryResult, SqlError> {
    let partitions = meta.partitions();
    let mut by_partition: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    let mut unkeyed = 0;
    for (i, r) in records.iter().enumerate() {
        let p = match (r.partition, &r.key) {
            (Some(p), _) if (0..partitions).contains(&p) => p,
            (Some(p), _) => {
                return Err(format!(
                    "{} has partitions 0 to {}, not {p}",
                    meta.name,
                    partitions - 1
                )
                .into())
            }
            (None, Some(k)) => partition_for_key(k, partitions),
            (None, None) => {
                unkeyed += 1;
                (unkeyed - 1) % partitions
            }
        };
        by_partition.entry(p).or_default().push(i);
    }
    let work: Vec<(i32, PartitionOp)> = by_partition
        .iter()
        .map(|(&p, idx)| {
            let stamped: Vec<_> = idx
                .iter()
                .map(|&i| {
                    let r = &records[i];
                    (
                        r.timestamp,
                        r.key.as_deref(),
                        r.value.as_deref(),
                        &r.headers[..],
                    )
                })
                .collect();
            let batch = build_stamped_batch(&stamped, &Producer::NONE);
            (
                p,
                PartitionOp::Append {
                    batch: batch.to_vec(),
                },
            )
        })
        .collect();
    let mut placed = vec![Value::Null; records.len() * 2];
    let appended = on_leaders(shard, &meta.name, work).await?;
    for ((p, idx), answer) in by_partition.iter().zip(appended) {
        let base_offset = answer.appended()?;
        for (n, &i) in idx.iter().enumerate() {
            placed[2 * i] = Value::from(*p);
            placed[2 * i + 1] = Value::from(base_offset + n as i64);
        }
    }
    Ok(QueryResult {
        columns: vec!["_partition".into(), "_offset".into()],
        rows: placed.chunks(2).map(|c| c.to_vec()).collect(),
    })
}
