//! Kafka's ACLs and its authorizer's rules: an entry allows or denies a
//! principal an operation on resources named literally or by prefix; a
//! deny wins; ALL covers every operation; READ, WRITE, DELETE and ALTER
//! imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS. SQL grants are
//! ACLs seen through SQL (SELECT is READ, INSERT is WRITE on the topic).
//! The numbers are Kafka's wire codes.

use serde::{Deserialize, Serialize};

/// What an ACL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(i8)]
pub enum ResourceType {
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
}

impl ResourceType {
    pub fn from_code(c: i8) -> Option<ResourceType> {
        Some(match c {
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            _ => return None,
        })
    }
}

/// How an ACL's resource name matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(i8)]
pub enum PatternType {
    /// The name itself, or every name for `*`.
    Literal = 3,
    /// Every name that starts with it.
    Prefixed = 4,
}

impl PatternType {
    pub fn from_code(c: i8) -> Option<PatternType> {
        Some(match c {
            3 => PatternType::Literal,
            4 => PatternType::Prefixed,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(i8)]
pub enum Operation {
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
}

impl Operation {
    pub fn from_code(c: i8) -> Option<Operation> {
        use Operation::*;
        Some(match c {
            2 => All,
            3 => Read,
            4 => Write,
            5 => Create,
            6 => Delete,
            7 => Alter,
            8 => Describe,
            9 => ClusterAction,
            10 => DescribeConfigs,
            11 => AlterConfigs,
            12 => IdempotentWrite,
            _ => return None,
        })
    }

    /// Whether an allow for `self` also allows `wanted`.
    fn allows(self, wanted: Operation) -> bool {
        use Operation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(i8)]
pub enum Permission {
    Deny = 2,
    Allow = 3,
}

impl Permission {
    pub fn from_code(c: i8) -> Option<Permission> {
        Some(match c {
            2 => Permission::Deny,
            3 => Permission::Allow,
            _ => return None,
        })
    }
}

/// One ACL entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Acl {
    pub resource: ResourceType,
    pub pattern: PatternType,
    /// The resource's name (`kafka-cluster` for the cluster), or `*`.
    pub name: String,
    /// `User:name`, or `User:*` for every user.
    pub principal: String,
    /// The client's host, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// The cluster's resource name in ACLs.
pub const CLUSTER: &str = "kafka-cluster";

impl Acl {
    /// Whether this entry is about `resource` named `name`.
    pub fn covers(&self, resource: ResourceType, name: &str) -> bool {
        self.resource == resource
            && match self.pattern {
                PatternType::Literal => self.name == "*" || self.name == name,
                PatternType::Prefixed => name.starts_with(&self.name),
            }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == "User:*")
            && (self.host == "*" || self.host == host)
    }
}

/// Whether `acls` let `principal` (as `User:name`) from `host` do
/// `operation` on `resource` named `name`: some entry allows it and none
/// denies it.
pub fn authorized(
    acls: &[Acl],
    principal: &str,
    host: &str,
    operation: Operation,
    resource: ResourceType,
    name: &str,
) -> bool {
    let mut allowed = false;
    for a in acls
        .iter()
        .filter(|a| a.covers(resource, name) && a.applies_to(principal, host))
    {
        match a.permission {
            // A deny of the operation (or of ALL) wins over any allow.
            Permission::Deny if a.operation == operation || a.operation == Operation::All => {
                return false
            }
            Permission::Deny => {}
            Permission::Allow => allowed |= a.operation.allows(operation),
        }
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> Acl {
        Acl {
            resource: ResourceType::Topic,
            pattern,
            name: name.into(),
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    #[test]
    fn kafka_authorizer_rules() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        let acls = vec![
            acl("orders", Literal, "User:alice", Read, Allow),
            acl("logs-", Prefixed, "User:alice", Write, Allow),
            acl("logs-secret", Literal, "User:alice", All, Deny),
            acl("*", Literal, "User:*", Describe, Allow),
            acl("billing", Literal, "User:bob", All, Allow),
        ];
        let can = |who: &str, op, name: &str| {
            authorized(&acls, who, "10.0.0.1", op, ResourceType::Topic, name)
        };
        assert!(can("User:alice", Read, "orders"));
        assert!(!can("User:alice", Write, "orders"));
        // READ implies DESCRIBE.
        assert!(can("User:alice", Describe, "orders"));
        assert!(can("User:alice", Write, "logs-app"));
        assert!(can("User:alice", Describe, "logs-app"));
        // A deny wins, whatever allows.
        assert!(!can("User:alice", Write, "logs-secret"));
        // The wildcard principal and the wildcard name.
        assert!(can("User:carol", Describe, "anything"));
        assert!(!can("User:carol", Read, "anything"));
        assert!(can("User:bob", Delete, "billing"));
        assert!(can("User:bob", AlterConfigs, "billing"));
        // No entry: no access.
        assert!(!can("User:dave", Read, "orders"));
        // Other resource types are not topics.
        assert!(!authorized(
            &acls,
            "User:bob",
            "*",
            Read,
            ResourceType::Group,
            "billing"
        ));
    }

    #[test]
    fn alter_configs_implies_describe_configs_only() {
        let acls = vec![Acl {
            resource: ResourceType::Topic,
            pattern: PatternType::Literal,
            name: "t".into(),
            principal: "User:a".into(),
            host: "*".into(),
            operation: Operation::AlterConfigs,
            permission: Permission::Allow,
        }];
        let can = |op| authorized(&acls, "User:a", "h", op, ResourceType::Topic, "t");
        assert!(can(Operation::DescribeConfigs));
        assert!(!can(Operation::Describe));
        assert!(!can(Operation::Read));
    }
}

/// What DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter, by
/// wire codes): `ANY` (1) for a code, or `None` for a name, principal or
/// host, matches everything; the MATCH pattern (2) selects the entries that
/// would apply to the named resource (its literal name, `*`, and every
/// prefix of it).
#[derive(Debug, Clone)]
pub struct AclFilter {
    pub resource: i8,
    pub name: Option<String>,
    pub pattern: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

const ANY: i8 = 1;
const MATCH: i8 = 2;

impl AclFilter {
    /// Why the filter cannot select anything (unknown codes), if so.
    pub fn invalid(&self) -> Option<String> {
        let ok = |c: i8, known: bool| c == ANY || known;
        if !ok(
            self.resource,
            ResourceType::from_code(self.resource).is_some(),
        ) {
            return Some(format!("unknown resource type {}", self.resource));
        }
        if !(ok(self.pattern, PatternType::from_code(self.pattern).is_some())
            || self.pattern == MATCH)
        {
            return Some(format!("unknown pattern type {}", self.pattern));
        }
        if !ok(
            self.operation,
            Operation::from_code(self.operation).is_some(),
        ) {
            return Some(format!("unknown operation {}", self.operation));
        }
        if !ok(
            self.permission,
            Permission::from_code(self.permission).is_some(),
        ) {
            return Some(format!("unknown permission type {}", self.permission));
        }
        None
    }

    pub fn matches(&self, a: &Acl) -> bool {
        let code = |want: i8, have: i8| want == ANY || want == have;
        let text = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let name = match (self.pattern, &self.name) {
            (_, None) => true,
            (MATCH, Some(n)) => a.covers(a.resource, n),
            (p, Some(n)) => (p == ANY || p == a.pattern as i8) && a.name == *n,
        };
        let pattern =
            self.pattern == ANY || self.pattern == MATCH || self.pattern == a.pattern as i8;
        code(self.resource, a.resource as i8)
            && pattern
            && name
            && text(&self.principal, &a.principal)
            && text(&self.host, &a.host)
            && code(self.operation, a.operation as i8)
            && code(self.permission, a.permission as i8)
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    #[test]
    fn filters_select_as_kafka_does() {
        let acl = |name: &str, pattern| Acl {
            resource: ResourceType::Topic,
            pattern,
            name: name.into(),
            principal: "User:a".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        };
        let all = AclFilter {
            resource: 1,
            name: None,
            pattern: 1,
            principal: None,
            host: None,
            operation: 1,
            permission: 1,
        };
        let lit = acl("orders", PatternType::Literal);
        let pre = acl("ord", PatternType::Prefixed);
        let star = acl("*", PatternType::Literal);
        assert!(all.matches(&lit) && all.matches(&pre));
        let exact = AclFilter {
            name: Some("orders".into()),
            pattern: 3,
            ..all.clone()
        };
        assert!(exact.matches(&lit) && !exact.matches(&pre) && !exact.matches(&star));
        let matching = AclFilter {
            name: Some("orders".into()),
            pattern: 2,
            ..all.clone()
        };
        assert!(matching.matches(&lit) && matching.matches(&pre) && matching.matches(&star));
        let groups = AclFilter {
            resource: 3,
            ..all.clone()
        };
        assert!(!groups.matches(&lit));
        let writes = AclFilter {
            operation: 4,
            ..all
        };
        assert!(!writes.matches(&lit));
        assert!(AclFilter {
            operation: 99,
            ..writes
        }
        .invalid()
        .is_some());
    }
}
