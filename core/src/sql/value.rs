//! SQL values as JSON values: literals, conversions, comparison and
//! ordering (ORDER BY keys with their directions), LIKE, and the JSON
//! operators' lookups.

use std::cmp::Ordering;

use serde_json::Value;
use sqlparser::ast::Value as SqlValue;

use super::error::SqlResult;

/// The value of a literal.
pub fn literal(v: &SqlValue) -> SqlResult<Value> {
    Ok(match v {
        SqlValue::Number(n, _) => {
            if let Ok(i) = n.parse::<i64>() {
                Value::from(i)
            } else {
                let f: f64 = n.parse().map_err(|_| format!("bad number {n}"))?;
                serde_json::Number::from_f64(f)
                    .map(Value::Number)
                    .ok_or_else(|| format!("bad number {n}"))?
            }
        }
        SqlValue::SingleQuotedString(s)
        | SqlValue::DoubleQuotedString(s)
        | SqlValue::EscapedStringLiteral(s)
        | SqlValue::TripleSingleQuotedString(s) => Value::String(s.clone()),
        SqlValue::Boolean(b) => Value::Bool(*b),
        SqlValue::Null => Value::Null,
        other => return Err(format!("unsupported literal {other}")),
    })
}

pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// Text of a value: strings as they are, others as JSON.
pub fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

pub fn float(f: f64) -> Value {
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

pub(super) fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Null => None,
        Value::Number(n) => Some(n.as_f64() != Some(0.0)),
        _ => Some(true),
    }
}

/// SQL ordering of two values; NULL compares as unknown (`None`).
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => None,
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => Some(i.cmp(&j)),
            _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
        },
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Number(_), Value::String(_)) | (Value::String(_), Value::Number(_)) => {
            as_f64(a)?.partial_cmp(&as_f64(b)?)
        }
        _ => Some(a.to_string().cmp(&b.to_string())),
    }
}

/// Ordering for ORDER BY: NULLs last ascending (first descending), as
/// PostgreSQL does; values of different kinds by kind.
pub fn sort_order(a: &Value, b: &Value) -> Ordering {
    let rank = |v: &Value| match v {
        Value::Null => 4,
        Value::Bool(_) => 0,
        Value::Number(_) => 1,
        Value::String(_) => 2,
        _ => 3,
    };
    match compare(a, b) {
        Some(o) if rank(a) == rank(b) || (rank(a) < 3 && rank(b) < 3) => o,
        _ => rank(a).cmp(&rank(b)),
    }
}

pub(super) fn like(text: &str, pattern: &str, fold: bool) -> bool {
    // On bytes when that means the same: '%' and every other ASCII byte
    // match alike in UTF-8, and '_' (one character) is one byte of ASCII
    // text. Otherwise on characters, which costs a vector of each per row.
    if text.is_ascii() || !pattern.contains('_') {
        if !fold {
            return wildcard(text.as_bytes(), pattern.as_bytes(), b'%', b'_');
        }
        if text.is_ascii() && pattern.is_ascii() {
            let (t, p) = (text.to_ascii_lowercase(), pattern.to_ascii_lowercase());
            return wildcard(t.as_bytes(), p.as_bytes(), b'%', b'_');
        }
    }
    let (t, p): (Vec<char>, Vec<char>) = if fold {
        (
            text.to_lowercase().chars().collect(),
            pattern.to_lowercase().chars().collect(),
        )
    } else {
        (text.chars().collect(), pattern.chars().collect())
    };
    wildcard(&t, &p, '%', '_')
}

/// Iterative wildcard match with backtracking to the last `any`.
fn wildcard<T: PartialEq + Copy>(t: &[T], p: &[T], any: T, one: T) -> bool {
    let (mut i, mut j, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while i < t.len() {
        if j < p.len() && (p[j] == one || p[j] == t[i]) {
            i += 1;
            j += 1;
        } else if j < p.len() && p[j] == any {
            star = Some(j);
            mark = i;
            j += 1;
        } else if let Some(s) = star {
            j = s + 1;
            mark += 1;
            i = mark;
        } else {
            return false;
        }
    }
    while j < p.len() && p[j] == any {
        j += 1;
    }
    j == p.len()
}

/// A JSON value from a value holding JSON (text is parsed).
fn as_json(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::String(s) => {
            let mut b = s.as_bytes().to_vec();
            simd_json::serde::from_slice::<Value>(&mut b).ok()
        }
        other => Some(other.clone()),
    }
}

pub(super) fn json_field(v: &Value, key: &Value) -> Option<Value> {
    let doc = as_json(v)?;
    match (doc, key) {
        (Value::Object(mut o), Value::String(k)) => o.remove(k),
        (Value::Array(mut a), Value::Number(n)) => {
            let i = usize::try_from(n.as_i64()?).ok()?;
            (i < a.len()).then(|| a.swap_remove(i))
        }
        _ => None,
    }
}

/// One ORDER BY key's direction: ascending or not, and NULLS FIRST/LAST
/// (`None`: nulls sort as the largest value, as PostgreSQL does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SortDir {
    pub asc: bool,
    pub nulls_first: Option<bool>,
}

/// How two rows' ORDER BY keys compare, given each key's direction.
pub fn compare_keys(dirs: &[SortDir], a: &[Value], b: &[Value]) -> Ordering {
    for (dir, (x, y)) in dirs.iter().zip(a.iter().zip(b)) {
        let o = match (x.is_null(), y.is_null(), dir.nulls_first) {
            (true, false, Some(first)) => {
                if first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (false, true, Some(first)) => {
                if first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            _ => {
                let o = sort_order(x, y);
                if dir.asc {
                    o
                } else {
                    o.reverse()
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        assert!(like("hello", "h%o", false));
        assert!(like("hello", "h_llo", false));
        assert!(like("hello", "%", false));
        assert!(!like("hello", "h%x", false));
        assert!(like("HeLLo", "hello", true));
        assert!(like("a%b", "a%b", false));
        assert!(!like("", "_", false));
        // '_' is one character, not one byte; '%' spans any bytes.
        assert!(like("héllo", "h_llo", false));
        assert!(!like("héllo", "h__llo", false));
        assert!(like("héllo", "h%llo", false));
        assert!(like("HÉLLO", "h_llo", true));
        assert!(like("Zz", "%z", true));
    }

    #[test]
    fn ordering() {
        assert_eq!(
            compare(&Value::from(2), &Value::from(10)),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare(&Value::from(2.5), &Value::from(2)),
            Some(Ordering::Greater)
        );
        assert_eq!(compare(&Value::Null, &Value::from(1)), None);
        assert_eq!(
            sort_order(&Value::Null, &Value::from(1)),
            Ordering::Greater,
            "nulls last"
        );
    }
}
