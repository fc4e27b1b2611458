//! Who may connect and what they may do.
//!
//! Open by default: with no role token and no user, anyone may connect
//! (with or without SASL) and do anything. Once a role token is set
//! (`WEIR_ADMIN_TOKEN`, `WEIR_WRITER_TOKEN`, `WEIR_READER_TOKEN`) or a user
//! exists, sign-in is on: a Kafka client signs in with SASL (PLAIN as
//! `admin`, `writer` or `reader` with that role's token, or as a user with
//! its password or one of its tokens; SCRAM-SHA-256/512 as a user) and
//! HTTP clients with a bearer token or Basic. A role is what it says
//! (`role_allows`); a user is what the ACLs (`acl`) allow it, SQL grants
//! included.

pub mod acl;
pub mod oauth;
pub mod sasl;
pub mod throttle;
pub mod users;

use std::path::Path;

use acl::{Operation, ResourceType};

use crate::catalog::Catalog;

/// The three roles a token signs in as, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Describe, consume, use groups.
    Reader,
    /// A reader that may also produce.
    Writer,
    /// Everything: DDL, configs, users and ACLs too.
    Admin,
}

impl Role {
    pub fn from_name(name: &str) -> Option<Role> {
        [Role::Reader, Role::Writer, Role::Admin]
            .into_iter()
            .find(|r| r.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Admin => "admin",
        }
    }
}

/// Who a connection or HTTP request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Not signed in (only where sign-in is off).
    Anonymous,
    Role(Role),
    User(String),
}

impl Principal {
    /// As Kafka names principals (`User:name`).
    pub fn kafka_name(&self) -> String {
        match self {
            Principal::Anonymous => "User:ANONYMOUS".into(),
            Principal::Role(r) => format!("User:{}", r.name()),
            Principal::User(u) => format!("User:{u}"),
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Anonymous => write!(f, "anonymous"),
            Principal::Role(r) => write!(f, "{}", r.name()),
            Principal::User(u) => write!(f, "user {u}"),
        }
    }
}

/// The role tokens, kept as their SHA-256.
#[derive(Debug, Clone, Default)]
pub struct RoleTokens {
    tokens: Vec<(Role, String)>,
    /// An identity provider's tokens sign clients in (`--oauth-jwks`):
    /// sign-in is on, whatever tokens or users there are.
    pub issuer: bool,
}

impl RoleTokens {
    /// Role tokens from `WEIR_ADMIN_TOKEN`, `WEIR_WRITER_TOKEN` and
    /// `WEIR_READER_TOKEN`, or from files (a file wins over the
    /// environment; surrounding whitespace is not part of a token).
    pub fn load(files: &[(Role, Option<&Path>)]) -> Result<RoleTokens, String> {
        let mut tokens = Vec::new();
        for &(role, file) in files {
            if let Some(t) = read_token(role, file)? {
                tokens.push((role, users::token_hash(&t)));
            }
        }
        Ok(RoleTokens {
            tokens,
            issuer: false,
        })
    }

    pub fn from_plain(tokens: &[(Role, &str)]) -> RoleTokens {
        RoleTokens {
            tokens: tokens
                .iter()
                .map(|(r, t)| (*r, users::token_hash(t)))
                .collect(),
            issuer: false,
        }
    }

    pub fn any(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The role `name` signs in as with `token`, if it is that role's.
    pub fn role_for(&self, name: &str, token: &str) -> Option<Role> {
        let hash = users::token_hash(token);
        self.tokens
            .iter()
            .find(|(r, h)| r.name() == name && *h == hash)
            .map(|(r, _)| *r)
    }

    /// The role a bearer token signs in as.
    pub fn role_of_token(&self, token: &str) -> Option<Role> {
        let hash = users::token_hash(token);
        self.tokens
            .iter()
            .find(|(_, h)| *h == hash)
            .map(|(r, _)| *r)
    }
}

/// The token of `role` from `file`, else from `WEIR_<ROLE>_TOKEN`, trimmed
/// (an empty one is refused); `None` if neither is set.
pub fn read_token(role: Role, file: Option<&Path>) -> Result<Option<String>, String> {
    let var = format!("WEIR_{}_TOKEN", role.name().to_uppercase());
    let token =
        match file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                format!("reading the {} token {}: {e}", role.name(), path.display())
            })?),
            None => std::env::var(&var).ok(),
        };
    match token.as_deref().map(str::trim) {
        Some("") => Err(format!("the {} token is empty", role.name())),
        Some(t) => Ok(Some(t.to_string())),
        None => Ok(None),
    }
}

/// How a node signs in to the others' Kafka ports (its replica fetcher):
/// as `admin` with the admin token, which every node of a cluster with
/// sign-in shares (as Kafka's inter-broker principal is a super user).
#[derive(Clone, PartialEq, Eq)]
pub struct NodeSignIn {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for NodeSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeSignIn({}, <secret>)", self.user)
    }
}

/// Whether clients must sign in: a role token is set, an identity
/// provider's tokens are taken, or a user exists.
pub fn sign_in_required(tokens: &RoleTokens, catalog: &Catalog) -> bool {
    tokens.any() || tokens.issuer || !catalog.users.is_empty()
}

/// What an HTTP request signs in with (its `Authorization` header, read
/// by the HTTP server).
pub enum Credentials {
    /// A role's token or one of a user's.
    Bearer(String),
    /// A role with its token, or a user with its password or a token.
    Basic { name: String, password: String },
}

/// Who `credentials` sign in as. `Err`: why not (a 401).
pub async fn sign_in_with(
    tokens: &RoleTokens,
    catalog: &Catalog,
    credentials: Credentials,
) -> Result<Principal, String> {
    match credentials {
        Credentials::Bearer(token) => {
            if let Some(role) = tokens.role_of_token(&token) {
                return Ok(Principal::Role(role));
            }
            let hash = users::token_hash(&token);
            catalog
                .users
                .values()
                .find(|u| u.tokens.contains(&hash))
                .map(|u| Principal::User(u.name.clone()))
                .ok_or_else(|| "the bearer token signs in no one".into())
        }
        Credentials::Basic { name, password } => {
            if let Some(role) = tokens.role_for(&name, &password) {
                return Ok(Principal::Role(role));
            }
            if let Some(user) = catalog.users.get(&name).cloned() {
                let ok = glommio::executor()
                    .spawn_blocking(move || user.check(&password))
                    .await;
                if ok {
                    return Ok(Principal::User(name));
                }
            }
            Err(format!("wrong user name or password for {name:?}"))
        }
    }
}

/// What a role may do.
fn role_allows(role: Role, operation: Operation, resource: ResourceType) -> bool {
    use Operation::*;
    use ResourceType::*;
    if role == Role::Admin {
        return true;
    }
    let writer = role >= Role::Writer;
    match (resource, operation) {
        (Topic, Read | Describe | DescribeConfigs) => true,
        (Topic, Write) => writer,
        (Group, Read | Describe | Delete) => true,
        (Cluster, Describe | DescribeConfigs) => true,
        (Cluster, IdempotentWrite) => writer,
        (TransactionalId, Write | Describe) => writer,
        _ => false,
    }
}

/// What authorization looks at: the catalog's users and ACLs and the
/// node's role tokens.
pub struct Access<'a> {
    pub catalog: &'a Catalog,
    pub tokens: &'a RoleTokens,
}

impl Access<'_> {
    /// Whether `principal`, connected from `host`, may do `operation` on
    /// `resource` named `name`. With sign-in off everyone may do
    /// everything. A user's rights are the ACLs; as Kafka with
    /// `allow.everyone.if.no.acl.found` for groups only, a group no ACL
    /// names may be read and described by every user (a consumer needs no
    /// grant for its own group; deleting needs one), and a user with WRITE
    /// on some topic may produce idempotently (Kafka's KIP-679).
    pub fn allows(
        &self,
        principal: &Principal,
        host: &str,
        operation: Operation,
        resource: ResourceType,
        name: &str,
    ) -> bool {
        let acls = &self.catalog.acls;
        match principal {
            Principal::Anonymous => !sign_in_required(self.tokens, self.catalog),
            Principal::Role(r) => role_allows(*r, operation, resource),
            Principal::User(_) => {
                let who = principal.kafka_name();
                if acl::authorized(acls, &who, host, operation, resource, name) {
                    return true;
                }
                match (resource, operation) {
                    // Joining, committing to and reading one's own group;
                    // deleting a group or its offsets needs a grant.
                    (ResourceType::Group, Operation::Read | Operation::Describe) => {
                        !acls.iter().any(|a| a.covers(ResourceType::Group, name))
                    }
                    (ResourceType::Cluster, Operation::IdempotentWrite) => {
                        self.catalog.topics.keys().any(|t| {
                            let write = Operation::Write;
                            acl::authorized(acls, &who, host, write, ResourceType::Topic, t)
                        })
                    }
                    _ => false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acl::{Acl, PatternType, Permission};

    #[test]
    fn roles_do_what_they_say() {
        use Operation::*;
        use ResourceType::*;
        assert!(role_allows(Role::Reader, Read, Topic));
        assert!(!role_allows(Role::Reader, Write, Topic));
        assert!(role_allows(Role::Writer, Write, Topic));
        assert!(!role_allows(Role::Writer, Create, Topic));
        assert!(!role_allows(Role::Writer, AlterConfigs, Topic));
        assert!(role_allows(Role::Reader, Read, Group));
        assert!(!role_allows(Role::Reader, IdempotentWrite, Cluster));
        assert!(role_allows(Role::Admin, Create, Topic));
        assert!(role_allows(Role::Admin, Alter, Cluster));
    }

    #[test]
    fn users_get_what_acls_grant_and_open_groups() {
        let mut c = Catalog::default();
        c.topics.insert(
            "orders".into(),
            crate::catalog::TopicMeta {
                name: "orders".into(),
                id: [7; 16],
                shards: vec![0],
                nodes: vec![],
                replication: vec![],
                config: Default::default(),
                schema: None,
                throttled_replicas: Default::default(),
            },
        );
        c.users
            .insert("alice".into(), users::User::new("alice", "pw"));
        c.acls.push(Acl {
            resource: ResourceType::Topic,
            pattern: PatternType::Literal,
            name: "orders".into(),
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Write,
            permission: Permission::Allow,
        });
        let alice = Principal::User("alice".into());
        let bob = Principal::User("bob".into());
        let tokens = RoleTokens::default();
        let access = Access {
            catalog: &c,
            tokens: &tokens,
        };
        let can = |p: &Principal, op, r, n: &str| access.allows(p, "h", op, r, n);
        assert!(can(&alice, Operation::Write, ResourceType::Topic, "orders"));
        assert!(can(
            &alice,
            Operation::Describe,
            ResourceType::Topic,
            "orders"
        ));
        assert!(!can(&alice, Operation::Read, ResourceType::Topic, "orders"));
        assert!(!can(&bob, Operation::Write, ResourceType::Topic, "orders"));
        // Idempotent produce follows WRITE on some topic.
        assert!(can(
            &alice,
            Operation::IdempotentWrite,
            ResourceType::Cluster,
            "kafka-cluster"
        ));
        assert!(!can(
            &bob,
            Operation::IdempotentWrite,
            ResourceType::Cluster,
            "kafka-cluster"
        ));
        // A group no ACL names is open to users; one that is named is not.
        assert!(can(&bob, Operation::Read, ResourceType::Group, "g1"));
        let mut c2 = c.clone();
        c2.acls.push(Acl {
            resource: ResourceType::Group,
            pattern: PatternType::Prefixed,
            name: "g".into(),
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        });
        let access2 = Access {
            catalog: &c2,
            tokens: &tokens,
        };
        assert!(!access2.allows(&bob, "h", Operation::Read, ResourceType::Group, "g1"));
        assert!(access2.allows(&alice, "h", Operation::Read, ResourceType::Group, "g1"));
        // Anonymous only while sign-in is off.
        assert!(!can(
            &Principal::Anonymous,
            Operation::Read,
            ResourceType::Topic,
            "orders"
        ));
        let open = Catalog::default();
        let access = Access {
            catalog: &open,
            tokens: &tokens,
        };
        assert!(access.allows(
            &Principal::Anonymous,
            "h",
            Operation::Create,
            ResourceType::Topic,
            "x"
        ));
    }

    #[test]
    fn role_tokens_sign_in_their_role_only() {
        let t = RoleTokens::from_plain(&[(Role::Writer, "w-token"), (Role::Reader, "r-token")]);
        assert_eq!(t.role_for("writer", "w-token"), Some(Role::Writer));
        assert_eq!(t.role_for("reader", "w-token"), None);
        assert_eq!(t.role_for("writer", "r-token"), None);
        assert_eq!(t.role_for("admin", "w-token"), None);
        assert_eq!(t.role_of_token("r-token"), Some(Role::Reader));
        assert!(t.any());
        assert!(!RoleTokens::default().any());
    }
}
