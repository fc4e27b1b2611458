//! Grouped queries (GROUP BY, aggregates, HAVING) folded as rows are read:
//! each group keeps its first row, for the plain columns a grouped query may
//! name, and one accumulator per aggregate call. A partition's owner folds
//! its rows and sends its groups, not its rows, so `SELECT count(*)` over
//! any table holds one number; the groups of all partitions are merged in
//! partition order, which gives the groups and first rows a single fold
//! over every row in that order would.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::Value;
use sqlparser::ast::{Expr, Function};

use super::error::SqlResult;
use super::eval::{args, function_name, is_aggregate, visit, Eval, Folded, Scope};
use super::value::{as_f64, as_i64, compare, float};

/// An aggregate call of the statement, named by its text.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Aggregate {
    pub key: String,
    name: String,
    /// `None` for `count(*)`.
    arg: Option<Expr>,
}

/// The aggregate calls in `exprs`, each once, checked.
pub fn aggregates<'a>(exprs: impl Iterator<Item = &'a Expr>) -> SqlResult<Vec<Aggregate>> {
    let mut calls: Vec<Function> = Vec::new();
    for e in exprs {
        visit(e, &mut |x| {
            if let Expr::Function(f) = x {
                if is_aggregate(f) {
                    calls.push(f.clone());
                }
            }
        });
    }
    let mut out: Vec<Aggregate> = Vec::new();
    for f in &calls {
        let key = f.to_string();
        if out.iter().any(|a| a.key == key) {
            continue;
        }
        let name = function_name(f);
        let a = args(f);
        if a.len() != 1 {
            return Err(format!("{name}() takes one argument"));
        }
        if a[0].is_none() && name != "count" {
            return Err(format!("{name}(*) is not allowed"));
        }
        out.push(Aggregate {
            key,
            name,
            arg: a[0].cloned(),
        });
    }
    Ok(out)
}

/// An `f64` as its IEEE bits, exact whatever its value.
mod f64_bits {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v.to_bits())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        u64::deserialize(d).map(f64::from_bits)
    }
}

/// One aggregate's running state over the rows seen so far.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Acc {
    /// Rows seen (what `count(*)` answers).
    rows: i64,
    /// Non-null values seen.
    count: i64,
    /// Every value so far an integer: SUM and AVG then use `int_sum`.
    all_int: bool,
    /// Their exact sum (an i128 cannot overflow from i64 terms here), so
    /// partitions' sums merge to what one pass gives whatever the order.
    int_sum: i128,
    /// Sent between nodes as its bits: JSON has no infinity for a sum
    /// that overflowed.
    #[serde(with = "f64_bits")]
    float_sum: f64,
    /// The first value that is not a number (SUM and AVG fail on it).
    non_number: Option<Value>,
    /// MIN or MAX so far.
    best: Option<Value>,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            rows: 0,
            count: 0,
            all_int: true,
            int_sum: 0,
            float_sum: 0.0,
            non_number: None,
            best: None,
        }
    }

    fn add(&mut self, agg: &Aggregate, v: Value) {
        self.rows += 1;
        if v.is_null() {
            return;
        }
        self.count += 1;
        match agg.name.as_str() {
            "min" | "max" => self.offer(agg, v),
            "sum" | "avg" => {
                match as_i64(&v) {
                    Some(i) if self.all_int => self.int_sum += i as i128,
                    _ => self.all_int = false,
                }
                match as_f64(&v) {
                    Some(f) => self.float_sum += f,
                    None => {
                        self.non_number.get_or_insert(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// MIN/MAX: `v` replaces the best unless it compares the wrong way.
    fn offer(&mut self, agg: &Aggregate, v: Value) {
        let pick = if agg.name == "min" {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        match &self.best {
            Some(b) if compare(&v, b) != Some(pick) => {}
            _ => self.best = Some(v),
        }
    }

    /// Takes in the state of rows that came after this one's.
    fn merge(&mut self, agg: &Aggregate, o: Acc) {
        self.rows += o.rows;
        self.count += o.count;
        self.int_sum += o.int_sum;
        self.all_int &= o.all_int;
        self.float_sum += o.float_sum;
        if self.non_number.is_none() {
            self.non_number = o.non_number;
        }
        if let Some(v) = o.best {
            self.offer(agg, v);
        }
    }

    fn finish(&self, agg: &Aggregate) -> SqlResult<Value> {
        let name = agg.name.as_str();
        Ok(match name {
            "count" if agg.arg.is_none() => Value::from(self.rows),
            "count" => Value::from(self.count),
            "min" | "max" => self.best.clone().unwrap_or(Value::Null),
            _ if self.count == 0 => Value::Null,
            // A sum past i64 answers as a float.
            "sum" if self.all_int => i64::try_from(self.int_sum)
                .map(Value::from)
                .unwrap_or_else(|_| float(self.int_sum as f64)),
            "avg" if self.all_int => float(self.int_sum as f64 / self.count as f64),
            _ => {
                if let Some(v) = &self.non_number {
                    return Err(format!("{name}() of non-number {v}"));
                }
                float(if name == "avg" {
                    self.float_sum / self.count as f64
                } else {
                    self.float_sum
                })
            }
        })
    }
}

/// A group being folded: its first row and its aggregates' states.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Group {
    first: Vec<Value>,
    accs: Vec<Acc>,
}

/// The groups of the rows folded so far, in the order they first appeared.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Groups {
    index: HashMap<String, usize>,
    list: Vec<Group>,
}

/// What folding needs: the GROUP BY expressions and the aggregate calls.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub group_by: Vec<Expr>,
    pub aggregates: Vec<Aggregate>,
}

impl Groups {
    /// Folds in `row`; returns the bytes of a new group's key it started
    /// (0 when the row joined a group), for the caller to bound.
    pub fn add(&mut self, eval: &Eval, plan: &Plan, row: Vec<Value>) -> SqlResult<usize> {
        let key: Vec<Value> = plan
            .group_by
            .iter()
            .map(|g| eval.eval(g, &Scope::Row(&row)))
            .collect::<SqlResult<_>>()?;
        let values: Vec<Value> = plan
            .aggregates
            .iter()
            .map(|a| match &a.arg {
                Some(e) => eval.eval(e, &Scope::Row(&row)),
                None => Ok(Value::Bool(true)), // count(*): any non-null
            })
            .collect::<SqlResult<_>>()?;
        let text = serde_json::to_string(&key).expect("values serialise");
        let (i, new) = match self.index.get(&text) {
            Some(&i) => (i, 0),
            None => {
                let new = text.len();
                self.index.insert(text, self.list.len());
                self.list.push(Group {
                    first: row,
                    accs: vec![Acc::new(); plan.aggregates.len()],
                });
                (self.list.len() - 1, new)
            }
        };
        let g = &mut self.list[i];
        for ((acc, agg), v) in g.accs.iter_mut().zip(&plan.aggregates).zip(values) {
            acc.add(agg, v);
        }
        Ok(new)
    }

    /// Takes in the groups of rows that came after these; fails when
    /// `other` does not fit `plan` (another node's answer, made otherwise).
    pub fn merge(&mut self, plan: &Plan, other: Groups) -> SqlResult<()> {
        let misfit = || "a partition's groups do not fit the statement".to_string();
        if other.index.len() != other.list.len()
            || other
                .list
                .iter()
                .any(|g| g.accs.len() != plan.aggregates.len())
        {
            return Err(misfit());
        }
        let mut by_index: Vec<(String, usize)> = other.index.into_iter().collect();
        by_index.sort_by_key(|(_, i)| *i);
        let mut groups: Vec<Option<Group>> = other.list.into_iter().map(Some).collect();
        for (text, j) in by_index {
            let g = groups
                .get_mut(j)
                .and_then(Option::take)
                .ok_or_else(misfit)?;
            match self.index.get(&text) {
                Some(&i) => {
                    let mine = &mut self.list[i];
                    for ((acc, agg), o) in mine.accs.iter_mut().zip(&plan.aggregates).zip(g.accs) {
                        acc.merge(agg, o);
                    }
                }
                None => {
                    self.index.insert(text, self.list.len());
                    self.list.push(g);
                }
            }
        }
        Ok(())
    }

    /// The folded groups, ready to evaluate the statement over. Aggregates
    /// over no rows at all still answer one group (COUNT(*) 0) when nothing
    /// is grouped by.
    pub fn finish(self, plan: &Plan) -> Vec<Folded> {
        let mut out: Vec<Folded> = self
            .list
            .into_iter()
            .map(|g| {
                Folded::new(
                    Some(g.first),
                    plan.aggregates
                        .iter()
                        .zip(&g.accs)
                        .map(|(a, acc)| (a.key.clone(), acc.finish(a)))
                        .collect(),
                )
            })
            .collect();
        if out.is_empty() && plan.group_by.is_empty() {
            let empty = Acc::new();
            out.push(Folded::new(
                None,
                plan.aggregates
                    .iter()
                    .map(|a| (a.key.clone(), empty.finish(a)))
                    .collect(),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::eval::Columns;
    use proptest::prelude::*;
    use sqlparser::dialect::GenericDialect;
    use sqlparser::parser::Parser;

    fn expr(text: &str) -> Expr {
        Parser::new(&GenericDialect {})
            .try_with_sql(text)
            .and_then(|mut p| p.parse_expr())
            .expect("an expression")
    }

    /// A value of the generated column: any integer, or (in a case with
    /// floats) a small integer or half. Only exact sums can be compared
    /// across merge orders (floating-point addition is not associative),
    /// and small halves sum exactly.
    fn value(v: Option<i64>, floats: bool, half: bool) -> Value {
        match v {
            None => Value::Null,
            Some(i) if !floats => Value::from(i),
            Some(i) if half => Value::from(i.clamp(-50, 50) as f64 / 2.0),
            Some(i) => Value::from(i.clamp(-50, 50)),
        }
    }

    /// The folded answer as comparable text: each group's first row and
    /// aggregate values (or errors) in order.
    fn answer(groups: Vec<Folded>) -> Vec<String> {
        groups.iter().map(|g| format!("{g:?}")).collect()
    }

    proptest! {
        /// Folding rows in one pass, and folding them in consecutive parts
        /// (as partitions do) then merging the parts in order, give the
        /// same groups, first rows and aggregate values.
        #[test]
        fn merged_parts_equal_one_pass(
            rows in proptest::collection::vec(
                (0i64..4, proptest::option::of(prop_oneof![Just(i64::MAX), Just(i64::MIN), -50i64..50]), any::<bool>()),
                0..40,
            ),
            cuts in proptest::collection::vec(0usize..40, 0..4),
            grouped in any::<bool>(),
            floats in any::<bool>(),
        ) {
            let cols = Columns(vec!["g".into(), "x".into()]);
            let eval = Eval { cols: &cols };
            let plan = Plan {
                group_by: if grouped { vec![expr("g")] } else { Vec::new() },
                aggregates: aggregates(
                    ["count(*)", "count(x)", "sum(x)", "min(x)", "max(x)", "avg(x)"].iter().map(|t| expr(t)).collect::<Vec<_>>().iter(),
                ).unwrap(),
            };
            let rows: Vec<Vec<Value>> = rows.into_iter().map(|(g, x, f)| vec![Value::from(g), value(x, floats, f)]).collect();
            let mut one = Groups::default();
            for r in rows.clone() {
                one.add(&eval, &plan, r).unwrap();
            }
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c.min(rows.len())).collect();
            bounds.push(0);
            bounds.push(rows.len());
            bounds.sort();
            let mut merged = Groups::default();
            for w in bounds.windows(2) {
                let mut part = Groups::default();
                for r in &rows[w[0]..w[1]] {
                    part.add(&eval, &plan, r.clone()).unwrap();
                }
                merged.merge(&plan, part).expect("parts of one fold fit");
            }
            prop_assert_eq!(answer(one.finish(&plan)), answer(merged.finish(&plan)));
        }
    }
}
