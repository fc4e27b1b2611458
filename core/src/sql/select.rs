//! SELECT: `SelectPlan::new` parses and checks a query against the
//! catalog (no I/O: testable without a node); `execute` gathers its input
//! from the owners of the table's partitions (rows or folded groups, see
//! `sql::scan`) and makes the answer on the shard that took the request:
//! HAVING, the output columns, DISTINCT, ORDER BY, OFFSET and LIMIT. A
//! system table (`system`) is gathered, filtered and folded there too.

use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;
use sqlparser::ast::{
    Expr, GroupByExpr, LimitClause, OrderByKind, Query, Select, SelectItem, SetExpr, TableFactor,
};

use super::error::SqlResult;
use super::eval::{
    check_columns, column_name, has_aggregate, mark_columns, Columns, Eval, Folded, Scope,
};
use super::fold::{self, Groups, Plan};
use super::leaders::{each_partition, on_leaders, PartitionOp};
use super::system::SystemTable;
use super::value::{compare_keys, literal, SortDir};
use super::{const_value, table_name, Caller, QueryResult, SqlError};
use crate::catalog::{Catalog, TopicMeta};
use crate::partitioner::partition_for_key;
use crate::shard::Shard;
use crate::sql::scan::{ScanShape, TopK};
use crate::table::keyed::{Claim, Losers};
use crate::table::read::columns;

#[cfg(test)]
mod tests;

/// An ORDER BY key: an expression (an output column by name or position,
/// or one over the input) and its direction.
#[derive(Debug, Clone)]
pub struct OrderKey {
    pub expr: Expr,
    pub dir: SortDir,
}

/// A SELECT checked against the catalog: what to read, where to filter,
/// how to fold, and how to make the answer.
#[derive(Debug)]
pub struct SelectPlan {
    /// The table read (`None`: a SELECT without FROM reads one empty row).
    table: Option<TopicMeta>,
    /// Or the node's own state (`weir.groups`, ...), gathered here.
    system: Option<SystemTable>,
    /// The input columns.
    cols: Columns,
    /// The output columns: names and expressions.
    items: Vec<(String, Expr)>,
    filter: Option<Expr>,
    having: Option<Expr>,
    order: Vec<OrderKey>,
    /// How a grouped query (GROUP BY, aggregates or HAVING) is folded.
    fold: Option<Plan>,
    limit: Option<usize>,
    offset: usize,
    distinct: bool,
    /// What each partition's owner gathers (with a table).
    shape: Option<ScanShape>,
}

/// What a SELECT evaluates its output over.
enum Input {
    Rows(Vec<Vec<Value>>),
    Groups(Vec<Folded>),
}

impl SelectPlan {
    /// Parses and checks `q`: its table exists, every column it names is
    /// the table's, aggregates stay out of WHERE. `max_scan_bytes` is the
    /// node's bound on what a statement gathers (shared by the partitions).
    pub fn new(q: &Query, catalog: &Catalog, max_scan_bytes: usize) -> Result<Self, SqlError> {
        let SetExpr::Select(sel) = q.body.as_ref() else {
            return Err(format!("unsupported query: {}", q.body).into());
        };
        let sel: &Select = sel;
        let (table, system) = source(sel, catalog)?;
        let cols = Columns(match (&table, system) {
            (Some(meta), _) => columns(meta),
            (None, Some(system)) => system.columns(),
            (None, None) => Vec::new(),
        });
        if let Some(w) = &sel.selection {
            check_columns(w, &cols)?;
            if has_aggregate(w) {
                return Err("aggregates are not allowed in WHERE".to_string().into());
            }
        }
        let items = output_items(sel, &cols)?;
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
        let grouped = !group_by.is_empty()
            || items.iter().any(|(_, e)| has_aggregate(e))
            || sel.having.is_some();
        let order = order_keys(q)?;
        // A grouped query is folded as its rows are read (`fold`).
        let fold = if grouped {
            Some(Plan {
                aggregates: fold::aggregates(
                    items
                        .iter()
                        .map(|(_, e)| e)
                        .chain(sel.having.iter())
                        .chain(order.iter().map(|k| &k.expr)),
                )?,
                group_by: group_by.clone(),
            })
        } else {
            None
        };
        let (limit, offset) = limits(q)?;
        let mut plan = SelectPlan {
            table,
            system,
            cols,
            items,
            filter: sel.selection.clone(),
            having: sel.having.clone(),
            order,
            fold,
            limit,
            offset,
            distinct: sel.distinct.is_some(),
            shape: None,
        };
        plan.shape = plan.scan_shape(sel, &group_by, max_scan_bytes)?;
        Ok(plan)
    }

    /// What each partition's owner gathers, with a table: the columns the
    /// statement uses, its share of `max_scan_bytes`, and how many rows
    /// (or which best ones) each partition keeps.
    fn scan_shape(
        &self,
        sel: &Select,
        group_by: &[Expr],
        max_scan_bytes: usize,
    ) -> SqlResult<Option<ScanShape>> {
        let Some(meta) = &self.table else {
            return Ok(None);
        };
        let (limit, offset, order) = (self.limit, self.offset, &self.order);
        let grouped = self.fold.is_some();
        // With ORDER BY and LIMIT (no grouping, no DISTINCT), each
        // partition keeps only its best OFFSET + LIMIT rows by the
        // same keys: the answer is among them.
        let top = match limit {
            Some(l) if !grouped && !order.is_empty() && !self.distinct => Some(TopK {
                keys: order
                    .iter()
                    .map(|k| input_key(&k.expr, &self.items))
                    .collect::<SqlResult<_>>()?,
                dirs: order.iter().map(|k| k.dir).collect(),
                keep: offset.saturating_add(l),
            }),
            _ => None,
        };
        // With a LIMIT and nothing that needs every row first, the
        // first OFFSET + LIMIT rows of each partition hold every
        // row the answer can take (rows come out in partition, then
        // offset order): `SELECT * FROM t LIMIT 10` reads ten rows
        // a partition.
        let needs_all = grouped || !order.is_empty() || self.distinct;
        Ok(Some(ScanShape {
            cap: limit
                .filter(|_| !needs_all)
                .map(|l| offset.saturating_add(l)),
            used: used_columns(sel, group_by, order, &self.cols),
            max_bytes: max_scan_bytes / meta.partitions().max(1) as usize,
            top,
            losers: None,
        }))
    }

    /// The table it reads, if any.
    pub fn table(&self) -> Option<&str> {
        self.table.as_ref().map(|t| t.name.as_str())
    }

    /// Gathers the input and makes the answer. `caller` decides which rows
    /// of a system table it sees.
    pub async fn execute(
        self,
        shard: &Rc<Shard>,
        caller: &Caller<'_>,
    ) -> Result<QueryResult, SqlError> {
        let input = self.input(shard, caller).await?;
        Ok(self.answer(input)?)
    }

    /// The table's rows or groups, read where its partitions live and
    /// filtered there; a system table's rows, gathered and filtered here;
    /// or one empty row for a SELECT without FROM.
    async fn input(&self, shard: &Rc<Shard>, caller: &Caller<'_>) -> Result<Input, SqlError> {
        if let (Some(meta), Some(shape)) = (&self.table, &self.shape) {
            let mut losers = Losers::new();
            if meta.schema.as_ref().is_some_and(|s| s.is_keyed()) && meta.partitions() > 1 {
                losers = settle(shard, meta, shape.max_bytes).await?;
            }
            // Each partition is sent only its own losers.
            let shape_of = |p: i32| {
                let mut shape = shape.clone();
                if let Some(lost) = losers.get(&p) {
                    shape.losers = Some(Arc::new(Losers::from([(p, lost.clone())])));
                }
                shape
            };
            let filter = &self.filter;
            let op = |p: i32| match &self.fold {
                Some(plan) => PartitionOp::Fold {
                    filter: filter.clone(),
                    shape: shape_of(p),
                    plan: plan.clone(),
                },
                None => PartitionOp::Scan {
                    filter: filter.clone(),
                    shape: shape_of(p),
                },
            };
            let work = (0..meta.partitions()).map(|p| (p, op(p))).collect();
            let parts = on_leaders(shard, &meta.name, work).await?;
            return Ok(match &self.fold {
                Some(plan) => {
                    let mut all = Groups::default();
                    for g in parts {
                        all.merge(plan, g.groups()?).map_err(SqlError::Node)?;
                    }
                    Input::Groups(all.finish(plan))
                }
                None => {
                    let mut rows = Vec::new();
                    for part in parts {
                        rows.extend(part.rows()?);
                    }
                    Input::Rows(rows)
                }
            });
        }
        let rows = match self.system {
            Some(system) => system.rows(shard, caller).await?,
            None => vec![Vec::new()],
        };
        let eval = Eval { cols: &self.cols };
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            if self
                .filter
                .as_ref()
                .map_or(Ok(true), |w| eval.passes(w, &r))?
            {
                kept.push(r);
            }
        }
        let rows = kept;
        Ok(match &self.fold {
            Some(plan) => {
                let mut groups = Groups::default();
                for r in rows {
                    groups.add(&eval, plan, r)?;
                }
                Input::Groups(groups.finish(plan))
            }
            None => Input::Rows(rows),
        })
    }

    /// The answer from the input: HAVING, the output columns, DISTINCT,
    /// ORDER BY, OFFSET and LIMIT.
    fn answer(&self, input: Input) -> SqlResult<QueryResult> {
        let eval = Eval { cols: &self.cols };
        let names: Vec<String> = self.items.iter().map(|(n, _)| n.clone()).collect();
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
            check_columns(e, &self.cols)?;
            eval.eval(e, scope)
        };
        // What each output row is evaluated over: a folded group (grouped
        // queries) or one row.
        let scopes: Vec<Scope> = match &input {
            Input::Rows(rows) => rows.iter().map(|r| Scope::Row(r)).collect(),
            Input::Groups(groups) => groups.iter().map(Scope::Group).collect(),
        };
        // Each output row with its ORDER BY keys.
        let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
        for scope in &scopes {
            if let (Some(h), Scope::Group(_)) = (&self.having, scope) {
                if eval.eval(h, scope)? != Value::Bool(true) {
                    continue;
                }
            }
            let output: Vec<Value> = self
                .items
                .iter()
                .map(|(_, e)| eval.eval(e, scope))
                .collect::<SqlResult<_>>()?;
            let keys = self
                .order
                .iter()
                .map(|k| key_of(&k.expr, &output, scope))
                .collect::<SqlResult<_>>()?;
            out.push((output, keys));
        }
        if self.distinct {
            let mut seen = std::collections::HashSet::new();
            out.retain(|(o, _)| seen.insert(serde_json::to_string(o).expect("values serialise")));
        }
        if !self.order.is_empty() {
            let dirs: Vec<SortDir> = self.order.iter().map(|k| k.dir).collect();
            out.sort_by(|(_, a), (_, b)| compare_keys(&dirs, a, b));
        }
        let rows = out
            .into_iter()
            .skip(self.offset)
            .take(self.limit.unwrap_or(usize::MAX))
            .map(|(o, _)| o)
            .collect();
        Ok(QueryResult {
            columns: names,
            rows,
        })
    }
}

/// What FROM names: a table of the catalog, a system table, or nothing
/// (a SELECT without FROM). Joins are refused.
fn source(
    sel: &Select,
    catalog: &Catalog,
) -> Result<(Option<TopicMeta>, Option<SystemTable>), SqlError> {
    if sel.from.len() > 1 || sel.from.iter().any(|f| !f.joins.is_empty()) {
        return Err("joins are not supported: select from one table"
            .to_string()
            .into());
    }
    let Some(f) = sel.from.first() else {
        return Ok((None, None));
    };
    let TableFactor::Table { name, .. } = &f.relation else {
        return Err(format!("unsupported FROM: {}", f.relation).into());
    };
    if let Some(system) = SystemTable::named(name) {
        return Ok((None, Some(system)));
    }
    let name = table_name(name);
    let meta = catalog
        .topic(&name)
        .ok_or_else(|| format!("no table {name}"))?;
    Ok((Some(meta.clone()), None))
}

/// The ORDER BY keys, in order.
fn order_keys(q: &Query) -> SqlResult<Vec<OrderKey>> {
    Ok(match q.order_by.as_ref().map(|o| &o.kind) {
        None => Vec::new(),
        Some(OrderByKind::Expressions(list)) => list
            .iter()
            .map(|o| OrderKey {
                expr: o.expr.clone(),
                dir: SortDir {
                    asc: o.options.asc.unwrap_or(true),
                    nulls_first: o.options.nulls_first,
                },
            })
            .collect(),
        Some(OrderByKind::All(_)) => return Err("ORDER BY ALL is not supported".to_string()),
    })
}

/// The output columns: a wildcard's input columns, or each expression
/// with its alias (or its column name, or its text).
fn output_items(sel: &Select, cols: &Columns) -> SqlResult<Vec<(String, Expr)>> {
    let mut items = Vec::new();
    for item in &sel.projection {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                for c in &cols.0 {
                    items.push((c.clone(), Expr::Identifier(sqlparser::ast::Ident::new(c))));
                }
            }
            SelectItem::UnnamedExpr(e) => {
                check_columns(e, cols)?;
                items.push((column_name(e).unwrap_or_else(|| e.to_string()), e.clone()));
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                check_columns(expr, cols)?;
                items.push((alias.value.clone(), expr.clone()));
            }
        }
    }
    Ok(items)
}

/// LIMIT (none: all rows) and OFFSET (none: 0).
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
/// (by position or name) stands for its expression, as `answer` reads it.
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

/// The input columns a SELECT refers to anywhere (`None`: all, for `*`):
/// the scan fills only these and leaves the others null, so `SELECT
/// count(*)` over a raw topic holds no copy of its values.
fn used_columns(
    sel: &Select,
    group_by: &[Expr],
    order: &[OrderKey],
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
        .chain(order.iter().map(|k| &k.expr))
    {
        mark_columns(e, cols, &mut used);
    }
    Some(used)
}

/// A keyed table of several partitions: the copies of keys that lose to a
/// newer copy in another partition (`table::keyed`), found in two rounds:
/// every partition names its copies of keys whose home is elsewhere, then
/// each key's home compares them with its own. Each partition may hold
/// `max_bytes` of such keys.
async fn settle(shard: &Rc<Shard>, meta: &TopicMeta, max_bytes: usize) -> Result<Losers, SqlError> {
    let claims = each_partition(shard, meta, PartitionOp::Claims { max_bytes }).await?;
    let n = meta.partitions();
    let mut by_home: Vec<Vec<Claim>> = vec![Vec::new(); n.max(1) as usize];
    for part in claims {
        for c in part.claims()? {
            by_home[partition_for_key(&c.key, n) as usize].push(c);
        }
    }
    // Only the homes of claimed keys have anything to settle.
    let work: Vec<_> = (0..n)
        .zip(by_home)
        .filter(|(_, incoming)| !incoming.is_empty())
        .map(|(p, incoming)| (p, PartitionOp::Settle { incoming }))
        .collect();
    let mut losers = Losers::new();
    for part in on_leaders(shard, &meta.name, work).await? {
        for (partition, key) in part.losers()? {
            losers.entry(partition).or_default().insert(key);
        }
    }
    Ok(losers)
}
