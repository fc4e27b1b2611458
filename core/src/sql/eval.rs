//! Evaluating SQL expressions (sqlparser's AST) over rows of JSON values:
//! comparisons, AND/OR/NOT, IS [NOT] NULL, IN, LIKE, BETWEEN, arithmetic,
//! the JSON operators `->` and `->>`, scalar functions (json_get_*,
//! lower, upper, length, coalesce, abs) and aggregates over groups.

use std::cmp::Ordering;

use serde_json::Value;
use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator,
};

use super::error::SqlResult;
use super::value::{as_f64, as_i64, as_text, compare, float, json_field, like, literal, truth};

/// The columns rows are laid out by.
#[derive(Debug, Clone)]
pub struct Columns(pub Vec<String>);

impl Columns {
    /// The index of a column: exact name first, then case-insensitive.
    pub fn index(&self, name: &str) -> SqlResult<usize> {
        self.0
            .iter()
            .position(|c| c == name)
            .or_else(|| self.0.iter().position(|c| c.eq_ignore_ascii_case(name)))
            .ok_or_else(|| {
                format!(
                    "unknown column {name:?} (the columns are {})",
                    self.0.join(", ")
                )
            })
    }
}

const AGGREGATES: [&str; 5] = ["count", "sum", "min", "max", "avg"];

pub fn function_name(f: &Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

pub fn is_aggregate(f: &Function) -> bool {
    AGGREGATES.contains(&function_name(f).as_str())
}

/// Whether `e` contains an aggregate function.
pub fn has_aggregate(e: &Expr) -> bool {
    let mut found = false;
    visit(e, &mut |x| {
        if let Expr::Function(f) = x {
            if is_aggregate(f) {
                found = true;
            }
        }
    });
    found
}

/// Calls `f` on `e` and every expression inside it.
pub fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match e {
        Expr::BinaryOp { left, right, .. } => {
            visit(left, f);
            visit(right, f);
        }
        Expr::UnaryOp { expr, .. }
        | Expr::Nested(expr)
        | Expr::IsNull(expr)
        | Expr::IsNotNull(expr)
        | Expr::IsTrue(expr)
        | Expr::IsFalse(expr) => visit(expr, f),
        Expr::InList { expr, list, .. } => {
            visit(expr, f);
            list.iter().for_each(|x| visit(x, f));
        }
        Expr::Between {
            expr, low, high, ..
        } => {
            visit(expr, f);
            visit(low, f);
            visit(high, f);
        }
        Expr::Like { expr, pattern, .. } | Expr::ILike { expr, pattern, .. } => {
            visit(expr, f);
            visit(pattern, f);
        }
        Expr::Function(func) => {
            for a in args(func).into_iter().flatten() {
                visit(a, f);
            }
        }
        _ => {}
    }
}

/// A function's argument expressions (`None` for `*`).
pub fn args(f: &Function) -> Vec<Option<&Expr>> {
    match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                | FunctionArg::Named {
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Checks that every column `e` names exists.
pub fn check_columns(e: &Expr, cols: &Columns) -> SqlResult<()> {
    let mut err = Ok(());
    visit(e, &mut |x| {
        if err.is_ok() {
            if let Some(name) = column_name(x) {
                if let Err(e) = cols.index(&name) {
                    err = Err(e);
                }
            }
        }
    });
    err
}

/// Marks in `used` the input columns `e` refers to (names that are not
/// columns, such as output aliases in ORDER BY, are skipped).
pub fn mark_columns(e: &Expr, cols: &Columns, used: &mut [bool]) {
    visit(e, &mut |x| {
        if let Some(i) = column_name(x).and_then(|n| cols.index(&n).ok()) {
            used[i] = true;
        }
    });
}

/// The column an identifier expression names (the last part of `t.c`).
/// A keyword the parser read as a function without parentheses (`user`,
/// `current_date`) names a column too.
pub fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(i.value.clone()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
        Expr::Function(f) if matches!(f.args, FunctionArguments::None) => Some(f.name.to_string()),
        _ => None,
    }
}

/// Where rows come from while evaluating: one row, or (for aggregates) a
/// folded group of rows.
pub enum Scope<'a> {
    Row(&'a [Value]),
    Group(&'a Folded),
}

/// A group's first row (none for the empty group) and its aggregates'
/// values by call text: what `fold` makes of a group's rows, for
/// expressions to be evaluated over.
#[derive(Debug)]
pub struct Folded {
    pub first: Option<Vec<Value>>,
    values: Vec<(String, SqlResult<Value>)>,
}

impl Folded {
    /// A group's first row and each aggregate call's value (or why it has
    /// none), by the call's text.
    pub fn new(first: Option<Vec<Value>>, values: Vec<(String, SqlResult<Value>)>) -> Folded {
        Folded { first, values }
    }

    /// The value of the aggregate call `f` over the group.
    pub fn aggregate(&self, f: &Function) -> SqlResult<Value> {
        let key = f.to_string();
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| Err(format!("{key} is not an aggregate of this statement")))
    }
}

pub struct Eval<'a> {
    pub cols: &'a Columns,
}

impl Eval<'_> {
    pub fn eval(&self, e: &Expr, scope: &Scope) -> SqlResult<Value> {
        match e {
            Expr::Identifier(_)
            | Expr::CompoundIdentifier(_)
            | Expr::Function(Function {
                args: FunctionArguments::None,
                ..
            }) => {
                let name = column_name(e).expect("an identifier");
                let i = self.cols.index(&name)?;
                // A row too short for the table (another node's answer on
                // another catalog) fails the statement rather than the node.
                let at = |r: &[Value]| {
                    r.get(i)
                        .cloned()
                        .ok_or_else(|| format!("a row of {} values has no column {name}", r.len()))
                };
                match scope {
                    Scope::Row(r) => at(r),
                    // A plain column in a grouped query: its value in the
                    // group (the same for every row when grouped by it).
                    Scope::Group(g) => g.first.as_deref().map_or(Ok(Value::Null), at),
                }
            }
            Expr::Value(v) => literal(&v.value),
            Expr::Nested(x) => self.eval(x, scope),
            Expr::IsNull(x) => Ok(Value::Bool(self.eval(x, scope)?.is_null())),
            Expr::IsNotNull(x) => Ok(Value::Bool(!self.eval(x, scope)?.is_null())),
            Expr::IsTrue(x) => Ok(Value::Bool(truth(&self.eval(x, scope)?) == Some(true))),
            Expr::IsFalse(x) => Ok(Value::Bool(truth(&self.eval(x, scope)?) == Some(false))),
            Expr::UnaryOp { op, expr } => {
                let v = self.eval(expr, scope)?;
                match op {
                    UnaryOperator::Not => Ok(truth(&v).map_or(Value::Null, |b| Value::Bool(!b))),
                    UnaryOperator::Minus => Ok(match (&v, as_i64(&v)) {
                        (Value::Null, _) => Value::Null,
                        (_, Some(i)) => Value::from(i.checked_neg().ok_or("integer overflow")?),
                        _ => as_f64(&v).map_or(Value::Null, |f| float(-f)),
                    }),
                    UnaryOperator::Plus => Ok(v),
                    other => Err(format!("unsupported operator {other}")),
                }
            }
            Expr::BinaryOp { left, op, right } => self.binary(left, op, right, scope),
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let v = self.eval(expr, scope)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut found = false;
                for x in list {
                    if compare(&v, &self.eval(x, scope)?) == Some(Ordering::Equal) {
                        found = true;
                    }
                }
                Ok(Value::Bool(found != *negated))
            }
            Expr::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let v = self.eval(expr, scope)?;
                let (lo, hi) = (self.eval(low, scope)?, self.eval(high, scope)?);
                match (compare(&v, &lo), compare(&v, &hi)) {
                    (Some(a), Some(b)) => Ok(Value::Bool(
                        (a != Ordering::Less && b != Ordering::Greater) != *negated,
                    )),
                    _ => Ok(Value::Null),
                }
            }
            Expr::Like {
                negated,
                expr,
                pattern,
                ..
            }
            | Expr::ILike {
                negated,
                expr,
                pattern,
                ..
            } => {
                let fold = matches!(e, Expr::ILike { .. });
                let (v, p) = (self.eval(expr, scope)?, self.eval(pattern, scope)?);
                match (as_text(&v), as_text(&p)) {
                    (Some(t), Some(p)) => Ok(Value::Bool(like(&t, &p, fold) != *negated)),
                    _ => Ok(Value::Null),
                }
            }
            Expr::Function(f) => self.function(f, scope),
            other => Err(format!("unsupported expression: {other}")),
        }
    }

    fn binary(
        &self,
        left: &Expr,
        op: &BinaryOperator,
        right: &Expr,
        scope: &Scope,
    ) -> SqlResult<Value> {
        use BinaryOperator as B;
        let l = self.eval(left, scope)?;
        // AND/OR with SQL's three-valued logic.
        if matches!(op, B::And | B::Or) {
            let r = self.eval(right, scope)?;
            let (a, b) = (truth(&l), truth(&r));
            return Ok(match (op, a, b) {
                (B::And, Some(false), _) | (B::And, _, Some(false)) => Value::Bool(false),
                (B::And, Some(true), Some(true)) => Value::Bool(true),
                (B::Or, Some(true), _) | (B::Or, _, Some(true)) => Value::Bool(true),
                (B::Or, Some(false), Some(false)) => Value::Bool(false),
                _ => Value::Null,
            });
        }
        let r = self.eval(right, scope)?;
        let cmp = |want: &dyn Fn(Ordering) -> bool| {
            Ok(compare(&l, &r).map_or(Value::Null, |o| Value::Bool(want(o))))
        };
        match op {
            B::Eq => cmp(&|o| o == Ordering::Equal),
            B::NotEq => cmp(&|o| o != Ordering::Equal),
            B::Lt => cmp(&|o| o == Ordering::Less),
            B::LtEq => cmp(&|o| o != Ordering::Greater),
            B::Gt => cmp(&|o| o == Ordering::Greater),
            B::GtEq => cmp(&|o| o != Ordering::Less),
            B::Arrow => Ok(json_field(&l, &r).unwrap_or(Value::Null)),
            B::LongArrow => Ok(json_field(&l, &r)
                .and_then(|v| as_text(&v))
                .map_or(Value::Null, Value::String)),
            B::StringConcat => match (as_text(&l), as_text(&r)) {
                (Some(a), Some(b)) => Ok(Value::String(a + &b)),
                _ => Ok(Value::Null),
            },
            B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => {
                if l.is_null() || r.is_null() {
                    return Ok(Value::Null);
                }
                if let (Some(a), Some(b)) = (as_i64(&l), as_i64(&r)) {
                    let v = match op {
                        B::Plus => a.checked_add(b),
                        B::Minus => a.checked_sub(b),
                        B::Multiply => a.checked_mul(b),
                        B::Divide if b == 0 => return Err("division by zero".into()),
                        B::Divide if a % b == 0 => Some(a / b),
                        B::Divide => return Ok(float(a as f64 / b as f64)),
                        B::Modulo if b == 0 => return Err("division by zero".into()),
                        _ => a.checked_rem(b),
                    };
                    return v.map(Value::from).ok_or_else(|| "integer overflow".into());
                }
                let (Some(a), Some(b)) = (as_f64(&l), as_f64(&r)) else {
                    return Err(format!("cannot compute {l} {op} {r}"));
                };
                Ok(float(match op {
                    B::Plus => a + b,
                    B::Minus => a - b,
                    B::Multiply => a * b,
                    B::Divide => a / b,
                    _ => a % b,
                }))
            }
            other => Err(format!("unsupported operator {other}")),
        }
    }

    fn function(&self, f: &Function, scope: &Scope) -> SqlResult<Value> {
        let name = function_name(f);
        let args = args(f);
        if is_aggregate(f) {
            let Scope::Group(g) = scope else {
                return Err(format!("{name}() is an aggregate: it cannot be used here"));
            };
            return g.aggregate(f);
        }
        let vals: Vec<Value> = args
            .iter()
            .map(|a| match a {
                Some(e) => self.eval(e, scope),
                None => Err(format!("{name}(*) is not a function")),
            })
            .collect::<SqlResult<_>>()?;
        let want = |n: usize| {
            if vals.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{name}() takes {n} argument(s), {} given",
                    vals.len()
                ))
            }
        };
        match name.as_str() {
            "json_get_str" | "json_get_int" | "json_get_float" | "json_get_bool" | "json_get" => {
                want(2)?;
                let field = json_field(&vals[0], &vals[1]);
                Ok(match (name.as_str(), field) {
                    (_, None) => Value::Null,
                    ("json_get", Some(v)) => v,
                    ("json_get_str", Some(Value::String(s))) => Value::String(s),
                    ("json_get_int", Some(v)) => as_i64(&v).map_or(Value::Null, Value::from),
                    ("json_get_float", Some(v @ Value::Number(_))) => {
                        as_f64(&v).map_or(Value::Null, float)
                    }
                    ("json_get_bool", Some(Value::Bool(b))) => Value::Bool(b),
                    _ => Value::Null,
                })
            }
            "lower" | "upper" => {
                want(1)?;
                Ok(as_text(&vals[0]).map_or(Value::Null, |s| {
                    Value::String(if name == "lower" {
                        s.to_lowercase()
                    } else {
                        s.to_uppercase()
                    })
                }))
            }
            "length" | "char_length" => {
                want(1)?;
                Ok(
                    as_text(&vals[0])
                        .map_or(Value::Null, |s| Value::from(s.chars().count() as i64)),
                )
            }
            "abs" => {
                want(1)?;
                Ok(match (as_i64(&vals[0]), as_f64(&vals[0])) {
                    (Some(i), _) => Value::from(i.checked_abs().ok_or("integer overflow")?),
                    (None, Some(f)) => float(f.abs()),
                    _ => Value::Null,
                })
            }
            "coalesce" => Ok(vals
                .into_iter()
                .find(|v| !v.is_null())
                .unwrap_or(Value::Null)),
            other => Err(format!("unknown function {other}()")),
        }
    }

    /// Whether a row passes a WHERE clause (NULL does not).
    pub fn passes(&self, e: &Expr, row: &[Value]) -> SqlResult<bool> {
        Ok(truth(&self.eval(e, &Scope::Row(row))?) == Some(true))
    }
}
