//! One SASL sign-in on the server side, through rsasl (the exchange, its
//! nonces and proofs: no hand-written cryptography). PLAIN gives a name and
//! a password, checked here against the role tokens and the users (a
//! user's Argon2id hash on the blocking pool: it takes tens of
//! milliseconds, which the shard's other clients must not wait for).
//! SCRAM-SHA-256/512 check the client's proof against the user's stored
//! verifier; a name that is not a user gets a fake verifier, stable per
//! name, and fails only at the proof, so names cannot be probed (PLAIN
//! spends an Argon2 check on unknown names for the same reason).

use std::sync::Arc;

use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::scram::properties::ScramStoredPassword;
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLConfig, SASLServer, Session, SessionError, State};
use rsasl::property::{AuthId, AuthzId, Password};
use rsasl::validate::{Validate, Validation, ValidationError};

use super::users::{unhex, ScramHash};
use super::{Principal, RoleTokens};
use crate::catalog::Catalog;

/// The mechanisms rsasl serves here.
pub const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// SASL/OAUTHBEARER, served when the node has a key set (`super::oauth`).
pub const OAUTHBEARER: &str = "OAUTHBEARER";

/// The mechanisms served, as SaslHandshake lists them.
pub fn mechanisms(oauth: bool) -> Vec<&'static str> {
    let mut all = MECHANISMS.to_vec();
    if oauth {
        all.push(OAUTHBEARER);
    }
    all
}

/// What a finished exchange says about the client.
#[derive(Debug)]
enum Claim {
    /// PLAIN: checked after the exchange (`SaslExchange::step`).
    Plain {
        authzid: Option<String>,
        authid: String,
        password: String,
    },
    /// SCRAM: the proof matched the user's verifier.
    Scram { authid: String },
}

struct Claimed;

impl Validation for Claimed {
    type Value = Claim;
}

/// Answers rsasl's questions from the users of a catalog snapshot.
struct Lookup {
    catalog: Arc<Catalog>,
}

impl SessionCallback for Lookup {
    fn callback(
        &self,
        session_data: &SessionData,
        context: &Context,
        request: &mut Request,
    ) -> Result<(), SessionError> {
        let Some(hash) = ScramHash::from_mechanism(session_data.mechanism().mechanism.as_str())
        else {
            return Ok(());
        };
        let Some(name) = context.get_ref::<AuthId>() else {
            return Ok(());
        };
        // A name with no verifier gets a fake one, stable per name, so its
        // exchange looks like a real user's until the proof fails.
        let fake;
        let v = match self.catalog.users.get(name).and_then(|u| u.scram(hash)) {
            Some(v) => v,
            None => {
                fake = super::users::fake_verifier(hash, name);
                &fake
            }
        };
        if let (Some(salt), Some(stored), Some(server)) =
            (unhex(&v.salt), unhex(&v.stored_key), unhex(&v.server_key))
        {
            request.satisfy::<ScramStoredPassword>(&ScramStoredPassword::new(
                v.iterations,
                &salt,
                &stored,
                &server,
            ))?;
        }
        Ok(())
    }

    fn validate(
        &self,
        session_data: &SessionData,
        context: &Context,
        validate: &mut Validate<'_>,
    ) -> Result<(), ValidationError> {
        let authid = context.get_ref::<AuthId>().unwrap_or_default().to_string();
        let claim = if session_data.mechanism().mechanism.as_str() == "PLAIN" {
            Claim::Plain {
                // An empty authorization id is none.
                authzid: context
                    .get_ref::<AuthzId>()
                    .filter(|z| !z.is_empty())
                    .map(str::to_string),
                authid,
                password: context
                    .get_ref::<Password>()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .unwrap_or_default(),
            }
        } else {
            Claim::Scram { authid }
        };
        validate.with::<Claimed, _>(|| Ok(claim))?;
        Ok(())
    }
}

/// What one step of a sign-in gives.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// More is needed: send this to the client.
    Challenge(Vec<u8>),
    /// Signed in; send the last message (SCRAM's server signature).
    /// `expires_ms`: when the credential expires (an OAUTHBEARER token's
    /// `exp`, ms since the epoch), which bounds the session (KIP-368).
    SignedIn {
        principal: Principal,
        last: Vec<u8>,
        expires_ms: Option<i64>,
    },
    /// Refused, and why (for the log and the client).
    Refused(String),
}

/// A sign-in in progress on one connection.
pub struct SaslExchange {
    mechanism: &'static str,
    checker: Checker,
    /// SCRAM: the nonce of the server-first message, once sent.
    nonce: Option<Vec<u8>>,
}

/// What checks an exchange's messages.
enum Checker {
    /// PLAIN and SCRAM: rsasl's session.
    Rsasl(Session<Claimed>),
    /// OAUTHBEARER: the node's token checker.
    Bearer(Arc<super::oauth::OAuth>),
}

/// The value of attribute `name` in a SCRAM message (`r=...,s=...`).
fn scram_attribute(message: &[u8], name: u8) -> Option<&[u8]> {
    message
        .split(|b| *b == b',')
        .find(|part| part.len() >= 2 && part[0] == name && part[1] == b'=')
        .map(|part| &part[2..])
}

impl SaslExchange {
    /// Starts `mechanism` (one of `mechanisms`), checking against the
    /// users of `catalog`, or OAUTHBEARER's tokens with `oauth`.
    pub fn start(
        mechanism: &str,
        catalog: Arc<Catalog>,
        oauth: Option<Arc<super::oauth::OAuth>>,
    ) -> Result<SaslExchange, String> {
        if let (OAUTHBEARER, Some(oauth)) = (mechanism, &oauth) {
            return Ok(SaslExchange {
                mechanism: OAUTHBEARER,
                checker: Checker::Bearer(oauth.clone()),
                nonce: None,
            });
        }
        let Some(&known) = MECHANISMS.iter().find(|m| **m == mechanism) else {
            return Err(format!(
                "mechanism {mechanism:?} is not enabled (enabled: {})",
                mechanisms(oauth.is_some()).join(", ")
            ));
        };
        let config = SASLConfig::builder()
            .with_defaults()
            .with_callback(Lookup { catalog })
            .map_err(|e| format!("SASL configuration: {e}"))?;
        let name = Mechname::parse(known.as_bytes()).map_err(|e| e.to_string())?;
        let session = SASLServer::<Claimed>::new(config)
            .start_suggested(name)
            .map_err(|e| format!("starting {known}: {e}"))?;
        Ok(SaslExchange {
            mechanism: known,
            checker: Checker::Rsasl(session),
            nonce: None,
        })
    }

    /// OAUTHBEARER's one message: the token checked on the blocking pool
    /// (a key set may be fetched again).
    async fn bearer(oauth: Arc<super::oauth::OAuth>, input: &[u8]) -> Step {
        let (token, authzid) = match super::oauth::client_token(input) {
            Ok(t) => t,
            Err(why) => return Step::Refused(format!("OAUTHBEARER: {why}")),
        };
        let checked = glommio::executor()
            .spawn_blocking(move || oauth.check(&token))
            .await;
        match checked {
            Ok(signed) if authzid.as_ref().is_some_and(|a| *a != signed.principal) => {
                Step::Refused(format!(
                    "OAUTHBEARER: the token is {}'s, not {authzid:?}'s",
                    signed.principal
                ))
            }
            Ok(signed) => Step::SignedIn {
                principal: Principal::User(signed.principal),
                last: Vec::new(),
                expires_ms: Some(signed.expires_ms),
            },
            Err(why) => Step::Refused(format!("OAUTHBEARER: {why}")),
        }
    }

    pub fn mechanism(&self) -> &'static str {
        self.mechanism
    }

    /// Takes the client's next message.
    pub async fn step(&mut self, input: &[u8], tokens: &RoleTokens, catalog: &Catalog) -> Step {
        let session = match &mut self.checker {
            Checker::Rsasl(session) => session,
            Checker::Bearer(oauth) => return Self::bearer(oauth.clone(), input).await,
        };
        if let Some(nonce) = &self.nonce {
            // librdkafka before 2.6.1 sends its own nonce again in front of
            // the combined one; RFC 5802 (and Kafka 4) refuse that. Said
            // plainly, since the proof would only "not match".
            let sent = scram_attribute(input, b'r');
            if sent.is_some_and(|r| r != nonce.as_slice() && r.ends_with(nonce)) {
                return Step::Refused(format!(
                    "{}: the final message repeats the client's nonce (librdkafka before 2.6.1 \
                     does this; Kafka 4 refuses it too): upgrade the client, or use PLAIN over TLS",
                    self.mechanism
                ));
            }
        }
        let mut out = Vec::new();
        let state = match session.step(Some(input), &mut out) {
            Ok(s) => s,
            // rsasl's error may quote the message (a password's character):
            // only its kind is said.
            Err(_) => return Step::Refused(format!("{}: a malformed message", self.mechanism)),
        };
        if state == State::Running {
            if self.mechanism.starts_with("SCRAM") && self.nonce.is_none() {
                self.nonce = scram_attribute(&out, b'r').map(<[u8]>::to_vec);
            }
            return Step::Challenge(out);
        }
        match session.validation() {
            Some(Claim::Scram { authid }) => Step::SignedIn {
                principal: Principal::User(authid),
                last: out,
                expires_ms: None,
            },
            Some(Claim::Plain {
                authzid,
                authid,
                password,
            }) => {
                if authzid.as_ref().is_some_and(|z| *z != authid) {
                    return Step::Refused(format!("{authid} may not act as {authzid:?}"));
                }
                if let Some(role) = tokens.role_for(&authid, &password) {
                    return Step::SignedIn {
                        principal: Principal::Role(role),
                        last: out,
                        expires_ms: None,
                    };
                }
                if let Some(user) = catalog.users.get(&authid).cloned() {
                    let password = password.clone();
                    let ok = glommio::executor()
                        .spawn_blocking(move || user.check(&password))
                        .await;
                    if ok {
                        return Step::SignedIn {
                            principal: Principal::User(authid),
                            last: out,
                            expires_ms: None,
                        };
                    }
                }
                if !super::sign_in_required(tokens, catalog) {
                    // An open node: anyone may connect, SASL or not.
                    return Step::SignedIn {
                        principal: Principal::Anonymous,
                        last: out,
                        expires_ms: None,
                    };
                }
                // An unknown name costs a hash too, so names cannot be
                // told apart by time.
                if !catalog.users.contains_key(&authid) {
                    glommio::executor()
                        .spawn_blocking(move || super::users::check_nobody(&password))
                        .await;
                }
                Step::Refused(format!("wrong user name or password for {authid:?}"))
            }
            // SCRAM wrote "e=invalid-proof" or "e=unknown-user" for the
            // client; it signs in no one.
            None => Step::Refused(format!(
                "{}: the proof does not match (or there is no such user)",
                self.mechanism
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::users::User;
    use crate::auth::Role;
    use rsasl::prelude::SASLClient;

    /// One catalog for every test (a user's salt is drawn when it is made).
    fn catalog() -> Arc<Catalog> {
        static CATALOG: std::sync::OnceLock<Arc<Catalog>> = std::sync::OnceLock::new();
        CATALOG
            .get_or_init(|| {
                let mut c = Catalog::default();
                c.users
                    .insert("alice".into(), User::new("alice", "wonderland"));
                Arc::new(c)
            })
            .clone()
    }

    /// Runs a whole exchange with rsasl's client as `name`/`password`.
    async fn sign_in(mechanism: &str, name: &str, password: &str) -> Step {
        let cat = catalog();
        let tokens = RoleTokens::from_plain(&[(Role::Writer, "w-token")]);
        let mut server = SaslExchange::start(mechanism, cat.clone(), None).unwrap();
        let client_config =
            SASLConfig::with_credentials(None, name.to_string(), password.to_string()).unwrap();
        let mech = Mechname::parse(mechanism.as_bytes()).unwrap();
        let mut client = SASLClient::new(client_config)
            .start_suggested(&[mech])
            .unwrap();
        let mut to_server = Vec::new();
        client.step(None, &mut to_server).unwrap();
        loop {
            match server.step(&to_server, &tokens, &cat).await {
                Step::Challenge(c) => {
                    to_server.clear();
                    client.step(Some(&c), &mut to_server).unwrap();
                }
                Step::SignedIn {
                    principal, last, ..
                } => {
                    // The client checks the server's signature too.
                    if !last.is_empty() {
                        let mut none = Vec::new();
                        client.step(Some(&last), &mut none).unwrap();
                    }
                    return Step::SignedIn {
                        principal,
                        last,
                        expires_ms: None,
                    };
                }
                refused => return refused,
            }
        }
    }

    #[test]
    fn plain_and_scram_sign_in_users_and_roles() {
        weir_storage::testing::run_local(|| async {
            for m in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
                match sign_in(m, "alice", "wonderland").await {
                    Step::SignedIn { principal, .. } => {
                        assert_eq!(principal, Principal::User("alice".into()), "{m}")
                    }
                    other => panic!("{m}: {other:?}"),
                }
                assert!(
                    matches!(sign_in(m, "alice", "wonder").await, Step::Refused(_)),
                    "{m}: a wrong password"
                );
                assert!(
                    matches!(sign_in(m, "mallory", "x").await, Step::Refused(_)),
                    "{m}: no such user"
                );
            }
            match sign_in("PLAIN", "writer", "w-token").await {
                Step::SignedIn { principal, .. } => {
                    assert_eq!(principal, Principal::Role(Role::Writer))
                }
                other => panic!("{other:?}"),
            }
            assert!(matches!(
                sign_in("PLAIN", "admin", "w-token").await,
                Step::Refused(_)
            ));
        });
    }

    /// The server-first message for `name` (its salt and iteration count
    /// are what a prober compares).
    fn server_first(name: &str) -> String {
        let mut server = SaslExchange::start("SCRAM-SHA-256", catalog(), None).unwrap();
        let client_first = format!("n,,n={name},r=abcdefghijklmnop");
        let tokens = RoleTokens::default();
        let cat = catalog();
        let step = futures::executor::block_on(server.step(client_first.as_bytes(), &tokens, &cat));
        match step {
            Step::Challenge(c) => String::from_utf8(c).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_names_look_like_users() {
        let salt = |msg: &str| {
            msg.split(',')
                .filter(|p| p.starts_with("s=") || p.starts_with("i="))
                .collect::<Vec<_>>()
                .join(",")
        };
        // A stable salt for a name that is no user's, as for a user.
        assert_eq!(
            salt(&server_first("mallory")),
            salt(&server_first("mallory"))
        );
        assert_eq!(salt(&server_first("alice")), salt(&server_first("alice")));
        assert_ne!(salt(&server_first("mallory")), salt(&server_first("trudy")));
        assert!(salt(&server_first("mallory")).contains("i=4096"));
    }

    /// librdkafka before 2.6.1 repeats its nonce in the final message: it is
    /// refused with a message that says so.
    #[test]
    fn a_repeated_client_nonce_is_refused_plainly() {
        let mut server = SaslExchange::start("SCRAM-SHA-256", catalog(), None).unwrap();
        let (tokens, cat) = (RoleTokens::default(), catalog());
        let first = futures::executor::block_on(server.step(
            b"n,,n=alice,r=abcdefghijklmnop",
            &tokens,
            &cat,
        ));
        let Step::Challenge(first) = first else {
            panic!("{first:?}")
        };
        let nonce = std::str::from_utf8(scram_attribute(&first, b'r').unwrap()).unwrap();
        assert!(nonce.starts_with("abcdefghijklmnop"), "{nonce}");
        let last = format!("c=biws,r=abcdefghijklmnop{nonce},p=AAAA");
        match futures::executor::block_on(server.step(last.as_bytes(), &tokens, &cat)) {
            Step::Refused(why) => assert!(why.contains("before 2.6.1"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_mechanisms_name_the_enabled_ones() {
        let e = SaslExchange::start("GSSAPI", catalog(), None)
            .err()
            .unwrap();
        assert!(e.contains("PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"), "{e}");
    }
}
