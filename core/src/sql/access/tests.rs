//! The access statements' parser.
use super::*;

fn p(sql: &str) -> Access {
    parse(sql).expect("an access statement").unwrap()
}

#[test]
fn statements_parse() {
    assert_eq!(
        p("CREATE USER alice WITH PASSWORD 'pw';"),
        Access::CreateUser {
            name: "alice".into(),
            password: "pw".into()
        }
    );
    assert_eq!(
        p("drop user if exists bob"),
        Access::DropUser {
            name: "bob".into(),
            if_exists: true
        }
    );
    assert_eq!(
        p("GRANT SELECT, INSERT ON TABLE orders TO alice"),
        Access::Grant {
            ops: vec![Operation::Read, Operation::Write],
            table: "orders".into(),
            user: "alice".into()
        }
    );
    assert_eq!(
        p("REVOKE ALL PRIVILEGES ON orders FROM alice"),
        Access::Revoke {
            ops: vec![Operation::All],
            table: "orders".into(),
            user: "alice".into()
        }
    );
    assert_eq!(
        p("SHOW GRANTS FOR alice"),
        Access::ShowGrants {
            user: Some("alice".into())
        }
    );
    assert_eq!(
        p("CREATE TOKEN FOR alice"),
        Access::CreateToken {
            user: "alice".into()
        }
    );
    assert_eq!(
        p("DROP TOKEN 'abc'"),
        Access::DropToken {
            token: "abc".into()
        }
    );
    assert!(parse("SELECT 1").is_none());
    assert!(parse("CREATE TABLE t (a INT)").is_none());
    let e = parse("GRANT DELETE ON orders TO alice")
        .unwrap()
        .unwrap_err();
    assert!(e.contains("SELECT, INSERT or ALL"), "{e}");
    let e = parse("CREATE USER alice PASSWORD 'x'")
        .unwrap()
        .unwrap_err();
    assert!(e.contains("WITH PASSWORD"), "{e}");
    assert!(parse("GRANT SELECT ON orders TO alice extra")
        .unwrap()
        .is_err());
}
