//! Statements about who may do what, admin only, one per request:
//!
//! ```sql
//! CREATE USER alice WITH PASSWORD 'pw'
//! ALTER USER alice WITH PASSWORD 'pw'
//! DROP USER [IF EXISTS] alice
//! SHOW USERS
//! CREATE TOKEN FOR alice          -- the token, shown once
//! DROP TOKEN 'token'
//! GRANT SELECT | INSERT | ALL [PRIVILEGES] [, ...] ON [TABLE] orders TO alice
//! REVOKE SELECT | INSERT | ALL [PRIVILEGES] [, ...] ON [TABLE] orders FROM alice
//! SHOW GRANTS [FOR alice]
//! ```
//!
//! A grant is an ACL (`auth::acl`): SELECT is READ, INSERT is WRITE and
//! ALL is ALL on the topic, allowed to `User:alice` from any host. Read
//! with sqlparser's tokenizer; users and ACLs change in the catalog,
//! durably, before the statement is answered.

use std::rc::Rc;

use serde_json::Value;
use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::{QueryResult, SqlError};
use crate::auth::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use crate::auth::users::{new_token, token_hash, User};
use crate::auth::{Principal, Role};
use crate::error::{ErrorCode, KafkaError};
use crate::shard::Shard;

/// A parsed access statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Access {
    CreateUser {
        name: String,
        password: String,
    },
    AlterUser {
        name: String,
        password: String,
    },
    DropUser {
        name: String,
        if_exists: bool,
    },
    ShowUsers,
    CreateToken {
        user: String,
    },
    DropToken {
        token: String,
    },
    Grant {
        ops: Vec<Operation>,
        table: String,
        user: String,
    },
    Revoke {
        ops: Vec<Operation>,
        table: String,
        user: String,
    },
    ShowGrants {
        user: Option<String>,
    },
}

/// The words of a statement: keywords upper-cased, names as written,
/// strings marked.
#[derive(Debug, Clone, PartialEq)]
enum Word {
    Name(String),
    Text(String),
    Comma,
}

fn words(sql: &str) -> Result<Vec<Word>, String> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for t in tokens {
        match t {
            Token::Whitespace(_) | Token::SemiColon => {}
            Token::Word(w) => out.push(Word::Name(w.value)),
            Token::SingleQuotedString(s) => out.push(Word::Text(s)),
            Token::Comma => out.push(Word::Comma),
            other => return Err(format!("unexpected {other}")),
        }
    }
    Ok(out)
}

/// The statement `sql` is, if it is one of these (by its first words).
pub fn parse(sql: &str) -> Option<Result<Access, String>> {
    let w = words(sql).ok().unwrap_or_default();
    let kw = |i: usize| match w.get(i) {
        Some(Word::Name(n)) => n.to_ascii_uppercase(),
        _ => String::new(),
    };
    let head = (kw(0), kw(1));
    let ours = matches!(
        (head.0.as_str(), head.1.as_str()),
        ("CREATE" | "ALTER" | "DROP", "USER")
            | ("SHOW", "USERS" | "GRANTS")
            | ("CREATE" | "DROP", "TOKEN")
            | ("GRANT" | "REVOKE", _)
    );
    // The statement is not quoted back: it may hold a password.
    ours.then(|| parse_words(&w))
}

fn parse_words(w: &[Word]) -> Result<Access, String> {
    let first = match w.first() {
        Some(Word::Name(n)) => n.to_ascii_uppercase(),
        _ => return Err("empty statement".into()),
    };
    let second = match w.get(1) {
        Some(Word::Name(n)) => n.to_ascii_uppercase(),
        _ => String::new(),
    };
    let rest = &w[2.min(w.len())..];
    let access = match (first.as_str(), second.as_str()) {
        ("CREATE" | "ALTER", "USER") => parse_user_password(&first, rest)?,
        ("DROP", "USER") => match rest {
            [Word::Name(name)] => Access::DropUser {
                name: name.clone(),
                if_exists: false,
            },
            [Word::Name(i), Word::Name(e), Word::Name(name)]
                if i.eq_ignore_ascii_case("IF") && e.eq_ignore_ascii_case("EXISTS") =>
            {
                Access::DropUser {
                    name: name.clone(),
                    if_exists: true,
                }
            }
            _ => return Err("expected DROP USER [IF EXISTS] name".into()),
        },
        ("SHOW", "USERS") if rest.is_empty() => Access::ShowUsers,
        ("SHOW", "GRANTS") => match rest {
            [] => Access::ShowGrants { user: None },
            [Word::Name(f), Word::Name(user)] if f.eq_ignore_ascii_case("FOR") => {
                Access::ShowGrants {
                    user: Some(user.clone()),
                }
            }
            _ => return Err("expected SHOW GRANTS [FOR name]".into()),
        },
        ("CREATE", "TOKEN") => match rest {
            [Word::Name(f), Word::Name(user)] if f.eq_ignore_ascii_case("FOR") => {
                Access::CreateToken { user: user.clone() }
            }
            _ => return Err("expected CREATE TOKEN FOR name".into()),
        },
        ("DROP", "TOKEN") => match rest {
            [Word::Text(token)] => Access::DropToken {
                token: token.clone(),
            },
            _ => return Err("expected DROP TOKEN 'token'".into()),
        },
        ("GRANT" | "REVOKE", _) => parse_grant(&first, w)?,
        _ => return Err(format!("unsupported statement {first} {second}")),
    };
    Ok(access)
}

/// CREATE USER or ALTER USER (`first`): `name WITH PASSWORD '...'`.
fn parse_user_password(first: &str, rest: &[Word]) -> Result<Access, String> {
    let [Word::Name(name), Word::Name(with), Word::Name(pw), Word::Text(password)] = rest else {
        return Err(format!("expected {first} USER name WITH PASSWORD '...'"));
    };
    if !with.eq_ignore_ascii_case("WITH") || !pw.eq_ignore_ascii_case("PASSWORD") {
        return Err(format!("expected {first} USER name WITH PASSWORD '...'"));
    }
    let (name, password) = (name.clone(), password.clone());
    Ok(if first == "CREATE" {
        Access::CreateUser { name, password }
    } else {
        Access::AlterUser { name, password }
    })
}

/// GRANT or REVOKE (`first`): privileges, ON [TABLE] a table, TO or FROM a
/// user.
fn parse_grant(first: &str, w: &[Word]) -> Result<Access, String> {
    let mut c = Cursor { w, at: 1 };
    let mut ops = Vec::new();
    loop {
        let op = match c.next() {
            Some(Word::Name(p)) => match p.to_ascii_uppercase().as_str() {
                "SELECT" => Operation::Read,
                "INSERT" => Operation::Write,
                "ALL" => Operation::All,
                other => return Err(format!("privilege {other} is not SELECT, INSERT or ALL")),
            },
            other => return Err(format!("expected a privilege, found {}", show(other))),
        };
        ops.push(op);
        match c.next() {
            Some(Word::Comma) => continue,
            Some(Word::Name(n)) if n.eq_ignore_ascii_case("PRIVILEGES") => {
                c.keyword("ON")?;
                break;
            }
            Some(Word::Name(n)) if n.eq_ignore_ascii_case("ON") => break,
            other => return Err(format!("expected ON, found {}", show(other))),
        }
    }
    let mut table = match c.next() {
        Some(Word::Name(n)) => n,
        other => return Err(format!("expected a table, found {}", show(other))),
    };
    if table.eq_ignore_ascii_case("TABLE") {
        table = match c.next() {
            Some(Word::Name(n)) => n,
            other => return Err(format!("expected a table, found {}", show(other))),
        };
    }
    c.keyword(if first == "GRANT" { "TO" } else { "FROM" })?;
    let user = match c.next() {
        Some(Word::Name(n)) => n,
        other => return Err(format!("expected a user, found {}", show(other))),
    };
    if let Some(extra) = c.next() {
        return Err(format!("unexpected {}", show(Some(extra))));
    }
    Ok(if first == "GRANT" {
        Access::Grant { ops, table, user }
    } else {
        Access::Revoke { ops, table, user }
    })
}

/// The words of a statement, read in order.
struct Cursor<'a> {
    w: &'a [Word],
    at: usize,
}

impl Cursor<'_> {
    fn next(&mut self) -> Option<Word> {
        self.at += 1;
        self.w.get(self.at - 1).cloned()
    }

    fn keyword(&mut self, expect: &str) -> Result<(), String> {
        match self.next() {
            Some(Word::Name(n)) if n.eq_ignore_ascii_case(expect) => Ok(()),
            other => Err(format!("expected {expect}, found {}", show(other))),
        }
    }
}

fn show(w: Option<Word>) -> String {
    match w {
        None => "the end".into(),
        Some(Word::Name(n)) => n,
        Some(Word::Text(_)) => "a string".into(),
        Some(Word::Comma) => "a comma".into(),
    }
}

/// The ACL a grant of `op` on `table` to `user` is.
fn grant_acl(op: Operation, table: &str, user: &str) -> Acl {
    Acl {
        resource: ResourceType::Topic,
        pattern: PatternType::Literal,
        name: table.to_string(),
        principal: format!("User:{user}"),
        host: "*".into(),
        operation: op,
        permission: Permission::Allow,
    }
}

fn privilege(op: Operation) -> &'static str {
    match op {
        Operation::Read => "SELECT",
        Operation::Write => "INSERT",
        Operation::All => "ALL",
        _ => "OTHER",
    }
}

fn refused(why: String) -> KafkaError {
    KafkaError::new(ErrorCode::InvalidRequest, why)
}

/// Runs an access statement for `principal` (the admin role, or anyone
/// while sign-in is off).
pub async fn run(
    shard: &Rc<Shard>,
    principal: &Principal,
    access: Access,
) -> Result<QueryResult, SqlError> {
    let admin = match principal {
        Principal::Role(Role::Admin) => true,
        Principal::Anonymous => !shard.sign_in_required(),
        _ => false,
    };
    if !admin {
        return Err(SqlError::Denied(format!(
            "{principal} may not manage users or grants (the admin role may)"
        )));
    }
    match access {
        Access::CreateUser { name, password } | Access::AlterUser { name, password }
            if password.is_empty() =>
        {
            Err(SqlError::Statement(format!(
                "the password of {name} is empty"
            )))
        }
        Access::CreateUser { name, password } => create_user(shard, name, password).await,
        Access::AlterUser { name, password } => alter_user(shard, name, password).await,
        Access::DropUser { name, if_exists } => drop_user(shard, name, if_exists).await,
        Access::ShowUsers => show_users(shard),
        Access::CreateToken { user } => create_token(shard, user).await,
        Access::DropToken { token } => drop_token(shard, token).await,
        Access::Grant { ops, table, user } | Access::Revoke { ops, table, user }
            if ops.is_empty() || table.is_empty() || user.is_empty() =>
        {
            Err(SqlError::Statement("an empty grant".into()))
        }
        Access::Grant { ops, table, user } => grant(shard, ops, table, user).await,
        Access::Revoke { ops, table, user } => revoke(shard, ops, table, user).await,
        Access::ShowGrants { user } => show_grants(shard, user),
    }
}

/// The answer to a statement that changes the catalog: nothing, or why
/// not (the statement's fault, or the node's).
fn done(r: Result<(), KafkaError>) -> Result<QueryResult, SqlError> {
    match r {
        Ok(()) => Ok(QueryResult::default()),
        Err(e) if e.code == ErrorCode::InvalidRequest => Err(SqlError::Statement(e.message)),
        Err(e) => Err(SqlError::Node(e.message)),
    }
}

/// CREATE USER: only with an admin token set, and not a role's name.
async fn create_user(
    shard: &Rc<Shard>,
    name: String,
    password: String,
) -> Result<QueryResult, SqlError> {
    if !shard.config.role_tokens.any() {
        // Once a user exists sign-in is on, and only the admin role
        // manages users: without its token no one could.
        return Err(SqlError::Statement(
            "set an admin token (WEIR_ADMIN_TOKEN or --admin-token-file) before \
             creating users: once a user exists, only the admin role manages them"
                .into(),
        ));
    }
    if crate::auth::Role::from_name(&name).is_some() {
        return Err(SqlError::Statement(format!(
            "{name} is a role's name: pick another user name"
        )));
    }
    // Hashing takes tens of milliseconds: not on the executor.
    let user = glommio::executor()
        .spawn_blocking(move || User::new(&name, &password))
        .await;
    done(
        shard
            .change_access(move |cat| {
                if cat.users.contains_key(&user.name) {
                    return Err(refused(format!("user {} already exists", user.name)));
                }
                cat.users.insert(user.name.clone(), user);
                Ok(())
            })
            .await,
    )
}

/// ALTER USER: a new password; the user's tokens kept.
async fn alter_user(
    shard: &Rc<Shard>,
    name: String,
    password: String,
) -> Result<QueryResult, SqlError> {
    let fresh = glommio::executor()
        .spawn_blocking(move || User::new(&name, &password))
        .await;
    done(
        shard
            .change_access(move |cat| match cat.users.get_mut(&fresh.name) {
                None => Err(refused(format!("no user {}", fresh.name))),
                Some(u) => {
                    let tokens = std::mem::take(&mut u.tokens);
                    *u = User { tokens, ..fresh };
                    Ok(())
                }
            })
            .await,
    )
}

/// DROP USER: the user and its grants.
async fn drop_user(
    shard: &Rc<Shard>,
    name: String,
    if_exists: bool,
) -> Result<QueryResult, SqlError> {
    done(
        shard
            .change_access(move |cat| {
                if cat.users.remove(&name).is_none() && !if_exists {
                    return Err(refused(format!("no user {name}")));
                }
                let who = format!("User:{name}");
                cat.acls.retain(|a| a.principal != who);
                Ok(())
            })
            .await,
    )
}

/// SHOW USERS: each user and how many tokens it has.
fn show_users(shard: &Rc<Shard>) -> Result<QueryResult, SqlError> {
    let cat = shard.catalog();
    Ok(QueryResult {
        columns: vec!["name".into(), "tokens".into()],
        rows: cat
            .users
            .values()
            .map(|u| vec![Value::from(u.name.clone()), Value::from(u.tokens.len())])
            .collect(),
    })
}

/// CREATE TOKEN: a new token for the user, shown once (only its hash is
/// kept).
async fn create_token(shard: &Rc<Shard>, user: String) -> Result<QueryResult, SqlError> {
    let token = new_token();
    let hash = token_hash(&token);
    shard
        .change_access(move |cat| match cat.users.get_mut(&user) {
            None => Err(refused(format!("no user {user}"))),
            Some(u) => {
                u.tokens.push(hash);
                Ok(())
            }
        })
        .await
        .map_err(|e| match e.code {
            ErrorCode::InvalidRequest => SqlError::Statement(e.message),
            _ => SqlError::Node(e.message),
        })?;
    Ok(QueryResult {
        columns: vec!["token".into()],
        rows: vec![vec![Value::from(token)]],
    })
}

/// DROP TOKEN: whichever user has it.
async fn drop_token(shard: &Rc<Shard>, token: String) -> Result<QueryResult, SqlError> {
    let hash = token_hash(&token);
    done(
        shard
            .change_access(move |cat| {
                let mut found = false;
                for u in cat.users.values_mut() {
                    let before = u.tokens.len();
                    u.tokens.retain(|t| *t != hash);
                    found |= u.tokens.len() != before;
                }
                match found {
                    true => Ok(()),
                    false => Err(refused("no user has this token".into())),
                }
            })
            .await,
    )
}

/// GRANT: an ACL per privilege, to a user that exists on a table that
/// exists.
async fn grant(
    shard: &Rc<Shard>,
    ops: Vec<Operation>,
    table: String,
    user: String,
) -> Result<QueryResult, SqlError> {
    done(
        shard
            .change_access(move |cat| {
                if !cat.users.contains_key(&user) {
                    return Err(refused(format!("no user {user}")));
                }
                if !cat.topics.contains_key(&table) {
                    return Err(refused(format!("no table {table}")));
                }
                for op in ops {
                    let acl = grant_acl(op, &table, &user);
                    if !cat.acls.contains(&acl) {
                        cat.acls.push(acl);
                    }
                }
                Ok(())
            })
            .await,
    )
}

/// REVOKE: those ACLs, where they are.
async fn revoke(
    shard: &Rc<Shard>,
    ops: Vec<Operation>,
    table: String,
    user: String,
) -> Result<QueryResult, SqlError> {
    done(
        shard
            .change_access(move |cat| {
                let gone: Vec<Acl> = ops.iter().map(|op| grant_acl(*op, &table, &user)).collect();
                cat.acls.retain(|a| !gone.contains(a));
                Ok(())
            })
            .await,
    )
}

/// SHOW GRANTS: every ACL, or a user's.
fn show_grants(shard: &Rc<Shard>, user: Option<String>) -> Result<QueryResult, SqlError> {
    let cat = shard.catalog();
    let who = user.map(|u| format!("User:{u}"));
    let rows = cat
        .acls
        .iter()
        .filter(|a| who.as_ref().is_none_or(|w| a.principal == *w))
        .map(|a| {
            let user = a.principal.strip_prefix("User:").unwrap_or(&a.principal);
            vec![
                Value::from(user),
                Value::from(format!("{:?}", a.resource).to_lowercase()),
                Value::from(a.name.clone()),
                Value::from(format!("{:?}", a.pattern).to_lowercase()),
                Value::from(match a.resource {
                    ResourceType::Topic => privilege(a.operation).to_string(),
                    _ => format!("{:?}", a.operation).to_uppercase(),
                }),
                Value::from(format!("{:?}", a.permission).to_lowercase()),
            ]
        })
        .collect();
    Ok(QueryResult {
        columns: [
            "user",
            "resource",
            "name",
            "pattern",
            "privilege",
            "permission",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    })
}

#[cfg(test)]
mod tests;
