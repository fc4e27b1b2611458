//! Parsing SQL within limits the shard's stack can take.
//!
//! sqlparser bounds its own recursion (nested parentheses, subqueries), but
//! it builds a chain of infix operators (`1 + 1 + … + 1`, `a IS NULL IS
//! NULL …`, `x::int::int …`) in a loop, so a flat 12 KB statement became an
//! expression tree thousands deep, and every walk over it afterwards —
//! checking columns, evaluating, printing, even dropping it — recursed that
//! deep and overflowed the shard's stack, taking the node down. So the
//! statement's tokens are measured before anything is parsed: no tree is
//! ever built deeper than `MAX_NESTING`, and every recursive walk over it
//! is bounded by that.

use sqlparser::ast::Statement;
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::error::SqlResult;

/// Statements in one request (they run one after another).
pub const MAX_STATEMENTS: usize = 1000;

/// The most expression levels a statement may nest, as `measure` counts
/// them: an upper bound on the depth of any tree parsed from it, so every
/// walk over an expression recurses at most this deep. Parsing and every
/// walk at this depth fit in half a shard's 2 MiB stack
/// (`tests::walks_at_the_limit_fit`); a chain of 60 ORed comparisons is
/// within it (an IN list or a CASE of any length is wide, not deep).
pub const MAX_NESTING: usize = 128;

/// sqlparser's own recursion limit (nested parentheses and subqueries),
/// its default, named here beside the others.
const PARSER_RECURSION: usize = 50;

/// Parses `sql` into statements, refusing one too deep or too many before
/// any tree is built.
pub fn parse(sql: &str) -> SqlResult<Vec<Statement>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| e.to_string())?;
    let shape = measure(tokens.iter().map(|t| &t.token));
    if shape.statements > MAX_STATEMENTS {
        return Err(format!(
            "{} statements in one request: the limit is {MAX_STATEMENTS}",
            shape.statements
        ));
    }
    if shape.nesting > MAX_NESTING {
        return Err(format!(
            "an expression nests {} levels deep (operators in a chain, parentheses, CASE): the limit is {MAX_NESTING}",
            shape.nesting
        ));
    }
    parse_tokens(tokens)
}

fn parse_tokens(tokens: Vec<TokenWithSpan>) -> SqlResult<Vec<Statement>> {
    Parser::new(&GenericDialect {})
        .with_recursion_limit(PARSER_RECURSION)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|e| e.to_string())
}

/// What `measure` finds in a token stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Shape {
    /// Non-empty statements (separated by `;`).
    pub statements: usize,
    /// An upper bound on how deep any expression parsed from these tokens
    /// nests.
    pub nesting: usize,
}

/// One level of brackets (or the top level, or a CASE … END) while
/// measuring: `ops` counts the tokens of the current list item that can
/// make a tree level (everything but names, literals and whitespace),
/// `inner` the deepest group nested in that item, `done` the deepest item
/// of the list so far.
#[derive(Default)]
struct Level {
    ops: usize,
    inner: usize,
    done: usize,
}

impl Level {
    fn end_item(&mut self) {
        self.done = self.done.max(self.ops + self.inner);
        self.ops = 0;
        self.inner = 0;
    }

    fn depth(&self) -> usize {
        self.done.max(self.ops + self.inner)
    }
}

/// Measures a statement's shape from its tokens. Within one item of a list
/// (between commas, or WHEN/THEN/ELSE of a CASE), each tree level an
/// expression gains is paid for by at least one token that is not a name
/// or a literal (an operator, a keyword, a bracket), so counting those
/// tokens bounds the item's depth; a bracketed group or CASE adds its own
/// depth, plus one, to the item it sits in. Items of a list lie side by
/// side, so the list is as deep as its deepest item.
pub fn measure<'a>(tokens: impl Iterator<Item = &'a Token>) -> Shape {
    let mut stack = vec![Level::default()];
    let mut statements = 0;
    let mut in_statement = false;
    let mut nesting = 0;
    for t in tokens {
        if matches!(t, Token::Whitespace(_)) {
            continue;
        }
        if !matches!(t, Token::SemiColon) {
            in_statement = true;
        }
        match t {
            Token::LParen | Token::LBracket | Token::LBrace => stack.push(Level::default()),
            Token::Word(w) if w.keyword == Keyword::CASE => stack.push(Level::default()),
            Token::RParen | Token::RBracket | Token::RBrace => close(&mut stack),
            Token::Word(w) if w.keyword == Keyword::END && stack.len() > 1 => close(&mut stack),
            Token::Comma => stack.last_mut().expect("the top level").end_item(),
            Token::Word(w)
                if matches!(w.keyword, Keyword::WHEN | Keyword::THEN | Keyword::ELSE) =>
            {
                stack.last_mut().expect("the top level").end_item()
            }
            Token::SemiColon => {
                while stack.len() > 1 {
                    close(&mut stack);
                }
                nesting = nesting.max(stack[0].depth());
                stack[0] = Level::default();
                if in_statement {
                    statements += 1;
                }
                in_statement = false;
            }
            Token::Word(w) if w.keyword == Keyword::NoKeyword => {}
            Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::HexStringLiteral(_) => {}
            _ => stack.last_mut().expect("the top level").ops += 1,
        }
    }
    while stack.len() > 1 {
        close(&mut stack);
    }
    if in_statement {
        statements += 1;
    }
    Shape {
        statements,
        nesting: nesting.max(stack[0].depth()),
    }
}

/// Ends a group: its depth, plus one for itself, goes to the item it sits
/// in. A closing token without an opening one counts as an operator (the
/// parser refuses the statement anyway).
fn close(stack: &mut Vec<Level>) {
    if stack.len() == 1 {
        stack[0].ops += 1;
        return;
    }
    let group = stack.pop().expect("a group").depth() + 1;
    let item = stack.last_mut().expect("the top level");
    item.inner = item.inner.max(group);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(sql: &str) -> Shape {
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().unwrap();
        measure(tokens.iter())
    }

    #[test]
    fn lists_lie_side_by_side_and_groups_stack() {
        assert_eq!(shape("SELECT 1").statements, 1);
        assert_eq!(shape(";; SELECT 1;; SELECT 2;").statements, 2);
        let flat = shape("SELECT a + 1, b + 1, c + 1 FROM t").nesting;
        let one = shape("SELECT a + 1 FROM t").nesting;
        assert!(flat <= one, "items of a list do not add up: {flat} > {one}");
        let chain = |n: usize| format!("SELECT {}", vec!["1"; n].join(" + "));
        assert!(shape(&chain(1000)).nesting >= 999);
        let nested = |n: usize| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n));
        assert!(shape(&nested(300)).nesting >= 300);
        // A long IN list or CASE is wide, not deep.
        let list: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
        let sql = format!("SELECT * FROM t WHERE id IN ({})", list.join(", "));
        assert!(shape(&sql).nesting < 10, "{:?}", shape(&sql));
        let arms: String = (0..500)
            .map(|i| format!(" WHEN a = {i} THEN {i}"))
            .collect();
        let sql = format!("SELECT CASE{arms} ELSE 0 END FROM t");
        assert!(shape(&sql).nesting < 10, "{:?}", shape(&sql));
    }

    /// Every tree parsed from an accepted statement is at most as deep as
    /// `measure` says: the bound holds for each shape of chain the parser
    /// builds in a loop, and for groups inside chains.
    #[test]
    fn the_measure_bounds_the_parsed_depth() {
        let shapes = [
            "1 + 1",
            "a = 1 OR a = 2",
            "a IS NULL",
            "a IS NOT NULL",
            "@::int",
            "- @",
            "NOT @",
            "(@)",
            "abs(@)",
            "a->'k'",
            "a LIKE 'x'",
            "a BETWEEN 1 AND 2",
            "a IN (1, 2)",
            "CASE WHEN @ THEN 1 END",
        ];
        for s in shapes {
            for n in [1usize, 2, 10, 40] {
                let sql = format!("SELECT {}", repeat_shape(s, n));
                let Ok(statements) = parse(&sql) else {
                    continue;
                };
                let measured = shape(&sql).nesting;
                let parsed = depth_of(&statements[0]);
                assert!(
                    parsed <= measured + 8,
                    "{sql}: parsed depth {parsed}, measured {measured}"
                );
            }
        }
    }

    /// `s` with `@` replaced by `s` itself, n times (nesting the shape), or
    /// `s` chained n times where it has no `@`.
    fn repeat_shape(s: &str, n: usize) -> String {
        if s.contains('@') {
            let mut e = "1".to_string();
            for _ in 0..n {
                e = s.replace('@', &e);
            }
            e
        } else {
            vec![s; n].join(" AND ")
        }
    }

    /// The depth of the deepest expression in a statement, by sqlparser's
    /// visitor (every variant, entered and left).
    fn depth_of(s: &Statement) -> usize {
        use sqlparser::ast::{Expr, Visit, Visitor};
        use std::ops::ControlFlow;
        #[derive(Default)]
        struct Depth {
            now: usize,
            deepest: usize,
        }
        impl Visitor for Depth {
            type Break = ();
            fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
                self.now += 1;
                self.deepest = self.deepest.max(self.now);
                ControlFlow::Continue(())
            }
            fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
                self.now -= 1;
                ControlFlow::Continue(())
            }
        }
        let mut d = Depth::default();
        let _ = s.visit(&mut d);
        d.deepest
    }

    /// The deepest statements accepted, of every shape, are parsed and go
    /// through each walk the node makes over an expression — column
    /// checks, aggregate search, evaluation, printing, cloning, dropping —
    /// on half a shard's 2 MiB stack. (sqlparser's own recursion, bounded
    /// at 50 levels, is the heaviest: nested function calls take ~8 KiB of
    /// stack a level while it parses them.)
    #[test]
    fn walks_at_the_limit_fit() {
        use crate::sql::eval::{check_columns, has_aggregate, Columns, Eval, Scope};
        use sqlparser::ast::{SelectItem, SetExpr};
        let shapes = [
            "c + 1",
            "c = 1 OR c = 2",
            "@ IS NULL",
            "@::int",
            "- @",
            "NOT @",
            "abs(@)",
            "coalesce(@, 1)",
            "c->'k'",
            "@ BETWEEN 1 AND 2",
            "@ IN (1, 2)",
            "c LIKE 'x%'",
        ];
        let mut deepest = Vec::new();
        for s in shapes {
            // The longest chain or nesting of the shape that is accepted.
            let mut n = 1;
            while parse(&format!("SELECT {} FROM t", repeat_shape(s, n * 2))).is_ok() {
                n *= 2;
            }
            let mut hi = n * 2;
            while n + 1 < hi {
                let mid = (n + hi) / 2;
                if parse(&format!("SELECT {} FROM t", repeat_shape(s, mid))).is_ok() {
                    n = mid;
                } else {
                    hi = mid;
                }
            }
            deepest.push(format!("SELECT {} FROM t", repeat_shape(s, n)));
        }
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                let cols = Columns(vec!["c".into()]);
                let row = [serde_json::json!({"k": 1})];
                for sql in deepest {
                    let statements = parse(&sql).expect("accepted");
                    let Statement::Query(q) = &statements[0] else {
                        panic!("a query")
                    };
                    let SetExpr::Select(sel) = q.body.as_ref() else {
                        panic!("a select")
                    };
                    let SelectItem::UnnamedExpr(e) = &sel.projection[0] else {
                        panic!("an expression")
                    };
                    check_columns(e, &cols).expect("known columns");
                    assert!(!has_aggregate(e));
                    // Unsupported operators in a shape are fine: what counts
                    // is that the walk returns.
                    let _ = Eval { cols: &cols }.eval(e, &Scope::Row(&row));
                    assert!(!e.to_string().is_empty());
                    let copy = e.clone();
                    drop(statements);
                    drop(copy);
                }
            })
            .expect("a thread")
            .join()
            .expect("every walk returns on a small stack");
    }

    /// Random expressions built from every piece the parser chains or
    /// nests, at and past the limit, through parse and every walk on half
    /// a shard's stack: each is refused or walked, none overflows.
    #[test]
    fn random_shapes_parse_and_walk_within_the_stack() {
        use crate::sql::eval::{check_columns, has_aggregate, Columns, Eval, Scope};
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        use sqlparser::ast::{SelectItem, SetExpr};
        const PIECES: [&str; 14] = [
            "@ + 1",
            "@ * c",
            "@ AND true",
            "(@)",
            "abs(@)",
            "NOT @",
            "- @",
            "@ IS NULL",
            "@::int",
            "@ BETWEEN 1 AND c",
            "@ IN (1, @)",
            "CASE WHEN @ THEN 1 ELSE @ END",
            "coalesce(@, c)",
            "c->'k' = @",
        ];
        let shapes = proptest::collection::vec(0..PIECES.len(), 1..(3 * MAX_NESTING));
        let mut runner = TestRunner::new(Config {
            cases: 200,
            ..Config::default()
        });
        runner
            .run(&shapes, |picks| {
                let mut e = "c".to_string();
                for p in picks {
                    // Pieces with two holes fill the second with a leaf, so
                    // the text stays linear in the picks.
                    e = PIECES[p].replacen('@', &e, 1).replace('@', "1");
                }
                let sql = format!("SELECT {e} FROM t WHERE {e}");
                std::thread::Builder::new()
                    .stack_size(1 << 20)
                    .spawn(move || {
                        let Ok(statements) = parse(&sql) else { return };
                        let Statement::Query(q) = &statements[0] else {
                            return;
                        };
                        let SetExpr::Select(sel) = q.body.as_ref() else {
                            return;
                        };
                        let cols = Columns(vec!["c".into()]);
                        let row = [serde_json::json!(1)];
                        let mut exprs: Vec<&sqlparser::ast::Expr> = sel.selection.iter().collect();
                        if let SelectItem::UnnamedExpr(x) = &sel.projection[0] {
                            exprs.push(x);
                        }
                        for x in exprs {
                            let _ = check_columns(x, &cols);
                            let _ = has_aggregate(x);
                            let _ = Eval { cols: &cols }.eval(x, &Scope::Row(&row));
                            let _ = x.to_string();
                            drop(x.clone());
                        }
                    })
                    .expect("a thread")
                    .join()
                    .map_err(|_| TestCaseError::fail("a walk panicked"))?;
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn too_deep_and_too_many_are_refused_before_parsing() {
        let chain = format!("SELECT {}", vec!["1"; 100_000].join(" + "));
        let e = parse(&chain).unwrap_err();
        assert!(e.contains(&format!("the limit is {MAX_NESTING}")), "{e}");
        let many = "SELECT 1;".repeat(MAX_STATEMENTS + 1);
        let e = parse(&many).unwrap_err();
        assert!(e.contains("statements"), "{e}");
        assert!(parse(&"SELECT 1;".repeat(MAX_STATEMENTS)).is_ok());
    }
}
