//! SQL's scans of one partition, on the shard that owns it: its rows that
//! pass a filter (the first, the top by ORDER BY, or folded into groups),
//! read through `table::read`: a typed table's stored rows (a keyed
//! table's latest row per key, `table::keyed`), or a raw topic's records
//! as `_partition`, `_offset`, `_timestamp`, `_key`, `_value`, `_headers`.

use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;
use sqlparser::ast::Expr;
use weir_storage::records::Record;

use crate::catalog::TopicMeta;
use crate::partition::Partition;
use crate::shard::Shard;
use crate::sql::eval::{Columns, Eval, Scope};
use crate::sql::fold::{Groups, Plan};
use crate::sql::value::{compare_keys, SortDir};
use crate::table::avro::WriterSchemas;
use crate::table::keyed::{Claim, KeyedTables, Losers};
use crate::table::read::{columns, each_record, table_row, ScanError};
use crate::table::schema::{bytes_value, format_timestamp, ColumnType};

/// What a scan gathers from each partition: the first `cap` rows that pass
/// its filter (all without one), or the `top` ones by its keys, with only
/// the `used` columns filled (all without a mask; the others are null),
/// and no more than `max_bytes` of them (as `row_bytes` counts).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ScanShape {
    pub cap: Option<usize>,
    pub used: Option<Vec<bool>>,
    pub max_bytes: usize,
    pub top: Option<TopK>,
    /// A keyed table of several partitions: the copies of keys that a
    /// newer copy in another partition hides (`keyed::settle`).
    pub losers: Option<Arc<Losers>>,
}

/// The `keep` first rows by ORDER BY `keys` (expressions over the input
/// row) in directions `dirs`; ties stay in offset order.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TopK {
    pub keys: Vec<Expr>,
    pub dirs: Vec<SortDir>,
    pub keep: usize,
}

/// Roughly the memory a row holds: a fixed cost per value plus its text.
fn row_bytes(row: &[Value]) -> usize {
    fn value_bytes(v: &Value) -> usize {
        32 + match v {
            Value::String(s) => s.len(),
            Value::Array(a) => a.iter().map(value_bytes).sum(),
            Value::Object(o) => o.iter().map(|(k, v)| k.len() + value_bytes(v)).sum(),
            _ => 0,
        }
    }
    24 + row.iter().map(value_bytes).sum::<usize>()
}

impl ScanShape {
    fn uses(&self, column: usize) -> bool {
        // A mask shorter than the row (made on another catalog) leaves
        // the rest unused.
        self.used
            .as_ref()
            .is_none_or(|u| u.get(column).copied().unwrap_or(false))
    }

    /// `row` with the unused columns nulled.
    fn trim(&self, mut row: Vec<Value>) -> Vec<Value> {
        for (i, v) in row.iter_mut().enumerate() {
            if !self.uses(i) {
                *v = Value::Null;
            }
        }
        row
    }
}

/// A raw record's key, value or header: its text, or `\\x` and hex when
/// it is not UTF-8.
fn text(b: &Option<bytes::Bytes>) -> Value {
    b.as_ref()
        .map_or(Value::Null, |b| bytes_value(ColumnType::Varchar, b))
}

/// A raw record as a row, building only the columns `shape` uses.
fn raw_row(partition: i32, r: &Record, shape: &ScanShape) -> Vec<Value> {
    let column =
        |i: usize, make: &dyn Fn() -> Value| if shape.uses(i) { make() } else { Value::Null };
    vec![
        column(0, &|| Value::from(partition)),
        column(1, &|| Value::from(r.offset)),
        column(2, &|| Value::String(format_timestamp(r.timestamp))),
        column(3, &|| text(&r.key)),
        column(4, &|| text(&r.value)),
        column(5, &|| {
            Value::Object(
                r.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), text(v)))
                    .collect(),
            )
        }),
    ]
}

/// Calls `sink` with each row of one partition that passes `filter`, in
/// offset order, with the columns `shape` uses (the filter must use only
/// those), until `sink` says to stop.
async fn scan_rows(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    filter: Option<&Expr>,
    shape: &ScanShape,
    sink: &mut dyn FnMut(Vec<Value>) -> Result<ControlFlow<()>, ScanError>,
) -> Result<(), ScanError> {
    let cols = Columns(columns(meta));
    let eval = Eval { cols: &cols };
    // Rows are filtered as they are read, so only the kept ones are held.
    let mut keep = |row: Vec<Value>| -> Result<ControlFlow<()>, ScanError> {
        if filter.map_or(Ok(true), |f| eval.passes(f, &row))? {
            sink(row)
        } else {
            Ok(ControlFlow::Continue(()))
        }
    };
    match &meta.schema {
        None => {
            each_record(p, 0, None, &mut |r| keep(raw_row(p.index, r, shape))).await?;
        }
        Some(schema) if !schema.is_keyed() => {
            let avro = schema.avro_subject().map(|_| shard);
            let writers = shard.state::<WriterSchemas>();
            each_record(p, 0, avro, &mut |r| match table_row(schema, &writers, r)? {
                Some(row) => keep(shape.trim(row)),
                None => Ok(ControlFlow::Continue(())),
            })
            .await?;
        }
        Some(schema) => {
            let rows = shard
                .state::<KeyedTables>()
                .refreshed(shard, p, meta, schema)
                .await?;
            let rows = rows.borrow();
            for r in rows.rows_in_offset_order(p.index, shape.losers.as_deref()) {
                let r =
                    r.map_err(|why| ScanError::Read(format!("{}-{}: {why}", p.topic, p.index)))?;
                if keep(shape.trim(r))?.is_break() {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// The error for a partition whose rows or groups pass its share of
/// `--sql-max-scan-bytes`.
fn too_much(p: &Partition, shape: &ScanShape, what: &str) -> ScanError {
    ScanError::Statement(format!(
        "{}-{}: the {what} this statement gathers pass {} bytes, this partition's \
         share of the node's limit (--sql-max-scan-bytes); narrow it with WHERE or \
         LIMIT, or name fewer columns",
        p.topic, p.index, shape.max_bytes
    ))
}

/// The rows of one partition that pass `filter`, in offset order: all of
/// them, or the first `shape.cap` (the scan stops reading there), or the
/// best `shape.top` in key order (the scan reads every row, holding at
/// most twice that many).
pub async fn scan_partition(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    filter: Option<&Expr>,
    shape: &ScanShape,
) -> Result<Vec<Vec<Value>>, ScanError> {
    if let Some(top) = &shape.top {
        return top_partition(shard, p, meta, filter, shape, top).await;
    }
    let cap = shape.cap.unwrap_or(usize::MAX);
    let mut out = Vec::new();
    if cap == 0 {
        return Ok(out);
    }
    let mut held = 0usize;
    scan_rows(shard, p, meta, filter, shape, &mut |row| {
        held += row_bytes(&row);
        if held > shape.max_bytes {
            return Err(too_much(p, shape, "rows"));
        }
        out.push(row);
        Ok(if out.len() >= cap {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })
    .await?;
    Ok(out)
}

async fn top_partition(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    filter: Option<&Expr>,
    shape: &ScanShape,
    top: &TopK,
) -> Result<Vec<Vec<Value>>, ScanError> {
    let cols = Columns(columns(meta));
    let eval = Eval { cols: &cols };
    let mut best: Vec<(Vec<Value>, Vec<Value>)> = Vec::new(); // (keys, row)
    let mut held = 0usize;
    // Sorting is stable, so among equal keys the earlier offsets stay.
    let trim = |best: &mut Vec<(Vec<Value>, Vec<Value>)>| -> usize {
        best.sort_by(|(a, _), (b, _)| compare_keys(&top.dirs, a, b));
        best.truncate(top.keep);
        best.iter().map(|(k, r)| row_bytes(k) + row_bytes(r)).sum()
    };
    if top.keep > 0 {
        scan_rows(shard, p, meta, filter, shape, &mut |row| {
            let keys: Vec<Value> = top
                .keys
                .iter()
                .map(|k| eval.eval(k, &Scope::Row(&row)))
                .collect::<Result<_, String>>()?;
            held += row_bytes(&keys) + row_bytes(&row);
            best.push((keys, row));
            // Trimmed every `keep` rows past `keep`, or sooner when what is
            // held passes the limit; only the best `keep` must fit.
            if best.len() >= top.keep.saturating_mul(2).max(32) || held > shape.max_bytes {
                held = trim(&mut best);
                if held > shape.max_bytes {
                    return Err(too_much(p, shape, "rows"));
                }
            }
            Ok(ControlFlow::Continue(()))
        })
        .await?;
    }
    trim(&mut best);
    Ok(best.into_iter().map(|(_, r)| r).collect())
}

/// The groups of one partition's rows that pass `filter`, folded as they
/// are read (see `sql::fold`): what is held is a first row and the
/// aggregates' states per group, whatever the partition's size.
pub async fn fold_partition(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    filter: Option<&Expr>,
    shape: &ScanShape,
    plan: &Plan,
) -> Result<Groups, ScanError> {
    let cols = Columns(columns(meta));
    let eval = Eval { cols: &cols };
    let mut groups = Groups::default();
    let mut held = 0usize;
    scan_rows(shard, p, meta, filter, shape, &mut |row| {
        let bytes = row_bytes(&row);
        let key = groups.add(&eval, plan, row)?;
        if key > 0 {
            held += key + bytes + 64 * plan.aggregates.len();
            if held > shape.max_bytes {
                return Err(too_much(p, shape, "groups"));
            }
        }
        Ok(ControlFlow::Continue(()))
    })
    .await?;
    Ok(groups)
}

/// A keyed table partition's current rows (`meta` is a keyed table's).
async fn keyed_rows(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
) -> Result<Rc<std::cell::RefCell<crate::table::keyed::KeyedRows>>, ScanError> {
    let schema = meta.schema.as_ref().expect("a keyed table");
    shard
        .state::<KeyedTables>()
        .refreshed(shard, p, meta, schema)
        .await
}

/// A keyed table partition's copies of keys whose home is another
/// partition (`keyed`), no more than `max_bytes` of them.
pub async fn partition_claims(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    max_bytes: usize,
) -> Result<Vec<Claim>, ScanError> {
    let rows = keyed_rows(shard, p, meta).await?;
    let claims = rows.borrow().claims(p.index);
    let held: usize = claims.iter().map(|c| c.key.len() + 48).sum();
    if held > max_bytes {
        return Err(ScanError::Statement(format!(
            "{}-{}: the keys this partition holds for other partitions pass {max_bytes} \
             bytes, its share of the node's limit (--sql-max-scan-bytes): its producers \
             place keys with another partitioner than Kafka's default (murmur2)",
            p.topic, p.index
        )));
    }
    Ok(claims)
}

/// At the home of the keys `incoming` claims: which copies lost.
pub async fn settle_partition(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    incoming: &[Claim],
) -> Result<Vec<(i32, Vec<u8>)>, ScanError> {
    let rows = keyed_rows(shard, p, meta).await?;
    let losers = rows.borrow().settle(p.index, incoming);
    Ok(losers)
}

/// Which of `keys` a keyed table partition holds: (index in `keys`, the
/// write's timestamp, whether it is a row rather than a deletion).
pub async fn partition_copies(
    shard: &Rc<Shard>,
    p: &Rc<Partition>,
    meta: &TopicMeta,
    keys: &[Vec<u8>],
) -> Result<Vec<(usize, i64, bool)>, ScanError> {
    let rows = keyed_rows(shard, p, meta).await?;
    let rows = rows.borrow();
    Ok(keys
        .iter()
        .enumerate()
        .filter_map(|(i, k)| rows.get(k).map(|e| (i, e.timestamp, e.live)))
        .collect())
}
