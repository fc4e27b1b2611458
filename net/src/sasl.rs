//! A connection's sign-in. SaslHandshake picks a mechanism; with v1 the
//! exchange then runs in SaslAuthenticate requests, with v0 in raw SASL
//! frames (a length and the bytes, no Kafka header) until it ends. The
//! exchange itself is `weir_core::auth::sasl`. While sign-in is on, a
//! connection that has not signed in is served ApiVersions and the SASL
//! requests only: anything else closes it. A refused sign-in is answered
//! (SASL_AUTHENTICATION_FAILED with why), after a wait that grows with each
//! failure from the same address, and the connection closes: no second try
//! on it.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use std::time::{Duration, Instant};

use weir_core::auth::sasl::{mechanisms, SaslExchange, Step};
use weir_core::auth::Principal;
use weir_core::{ErrorCode, Shard};

use crate::handlers::str;

pub const HANDSHAKE_MIN: i16 = 0;
pub const HANDSHAKE_MAX: i16 = 1;
pub const AUTHENTICATE_MIN: i16 = 0;
pub const AUTHENTICATE_MAX: i16 = 2;

/// The largest SASL message taken (PLAIN's and SCRAM's are far smaller).
const MAX_SASL_MESSAGE: usize = 16 << 10;

/// The largest frame a connection may send before it signs in (Kafka's
/// `sasl.server.max.receive.size`).
pub const MAX_FRAME_BEFORE_SIGN_IN: usize = 512 << 10;

/// What a sign-in step leaves the connection to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Then {
    Serve,
    /// Send the answer, then close.
    Close,
}

/// One connection's sign-in state.
pub struct SignIn {
    /// Shared with every request's `Caller` (no copy per request).
    pub principal: Rc<Principal>,
    /// The client's address as Kafka shows it (`/127.0.0.1`).
    pub host: Rc<str>,
    exchange: Option<SaslExchange>,
    /// After SaslHandshake v0: the next frames are raw SASL tokens.
    pub raw: bool,
    /// The mechanism the connection signed in with over SASL: signing in
    /// again (KIP-368's re-authentication) must use the same one, as the
    /// same principal.
    signed_in_with: Option<&'static str>,
    /// When the session ends (KIP-368: at its token's `exp`, or after
    /// `--max-reauth-ms`): past it, only signing in again is served.
    session_ends: Option<Instant>,
}

impl SignIn {
    pub fn new(host: Rc<str>) -> SignIn {
        SignIn {
            principal: Rc::new(Principal::Anonymous),
            host,
            exchange: None,
            raw: false,
            signed_in_with: None,
            session_ends: None,
        }
    }

    /// Whether the session ended without the client signing in again
    /// (KIP-368): the connection then serves nothing else.
    pub fn expired(&self) -> bool {
        self.session_ends.is_some_and(|t| Instant::now() >= t)
    }

    /// Signs the connection in as the subject CN of the certificate it
    /// presented over TLS (verified against `--tls-client-ca`), as Kafka's
    /// SSL listener does; on an open node, as anyone (SASL alike). A SASL
    /// sign-in after this replaces it.
    pub fn certificate(&mut self, shard: &Shard, name: String) {
        if shard.sign_in_required() {
            log::debug!("{}: signed in by certificate as {name}", self.host);
            self.principal = Rc::new(Principal::User(name));
        }
    }

    /// Whether a request of `api` may be served on this connection now.
    pub fn admits(&self, shard: &Shard, api: ApiKey) -> bool {
        matches!(
            api,
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
        ) || *self.principal != Principal::Anonymous
            || !shard.sign_in_required()
    }

    /// SaslHandshake: starts the mechanism asked for, or names the enabled
    /// ones (UNSUPPORTED_SASL_MECHANISM).
    pub fn handshake(
        &mut self,
        shard: &Shard,
        req: &SaslHandshakeRequest,
        version: i16,
    ) -> SaslHandshakeResponse {
        let oauth = shard.config.oauth.clone();
        let names = mechanisms(oauth.is_some()).into_iter().map(str).collect();
        let response = SaslHandshakeResponse::default().with_mechanisms(names);
        if let Some(was) = self.signed_in_with.filter(|m| *m != req.mechanism.as_str()) {
            log::info!(
                "{}: signing in again refused: {} after {was} (KIP-368: the same mechanism)",
                self.host,
                req.mechanism.as_str()
            );
            return response.with_error_code(ErrorCode::IllegalSaslState.code());
        }
        match SaslExchange::start(req.mechanism.as_str(), shard.catalog(), oauth) {
            Ok(exchange) => {
                self.exchange = Some(exchange);
                self.raw = version == 0;
                response
            }
            Err(why) => {
                log::info!("{}: sign-in refused: {why}", self.host);
                response.with_error_code(ErrorCode::UnsupportedSaslMechanism.code())
            }
        }
    }

    /// One step of the exchange with the client's bytes: what to send back
    /// (a challenge, or the last message once signed in) and the session's
    /// lifetime in ms (KIP-368; 0: unbounded), or why it was refused (the
    /// connection then closes).
    pub async fn step(
        &mut self,
        shard: &Shard,
        input: &[u8],
    ) -> Result<(Vec<u8>, i64, Then), (ErrorCode, String)> {
        let Some(exchange) = self.exchange.as_mut() else {
            let why = "SaslAuthenticate before a SaslHandshake".to_string();
            return Err((ErrorCode::IllegalSaslState, why));
        };
        if input.len() > MAX_SASL_MESSAGE {
            self.exchange = None;
            let why = format!(
                "a SASL message of {} bytes (at most {MAX_SASL_MESSAGE})",
                input.len()
            );
            return Err((ErrorCode::SaslAuthenticationFailed, why));
        }
        // Checks from one address wait out its last failure's penalty and
        // run a few at a time, so guessing costs the node little.
        let Some(_attempt) = shard.sign_in_throttle.begin(&self.host) else {
            self.exchange = None;
            let why = "too many sign-ins at once from this address".to_string();
            return Err((ErrorCode::SaslAuthenticationFailed, why));
        };
        let pause = shard.sign_in_throttle.penalty(&self.host);
        if !pause.is_zero() {
            glommio::timer::sleep(pause).await;
        }
        let catalog = shard.catalog();
        match exchange
            .step(input, &shard.config.role_tokens, &catalog)
            .await
        {
            Step::Challenge(c) => Ok((c, 0, Then::Serve)),
            Step::SignedIn {
                principal,
                last,
                expires_ms,
            } => {
                let again = self.signed_in_with.is_some();
                if again && *self.principal != principal {
                    self.exchange = None;
                    let why = format!(
                        "signing in again as {principal}, not {}: a connection keeps its principal (KIP-368)",
                        self.principal
                    );
                    log::warn!("{}: {why}", self.host);
                    return Err((ErrorCode::SaslAuthenticationFailed, why));
                }
                let lifetime = match session_lifetime(shard.config.max_reauth, expires_ms) {
                    Ok(ms) => ms,
                    Err(why) => {
                        self.exchange = None;
                        return Err((ErrorCode::SaslAuthenticationFailed, why));
                    }
                };
                log::debug!(
                    "{}: signed in as {principal} ({})",
                    self.host,
                    exchange.mechanism()
                );
                shard.sign_in_throttle.succeeded(&self.host);
                self.signed_in_with = Some(exchange.mechanism());
                self.principal = Rc::new(principal);
                self.exchange = None;
                self.raw = false;
                self.session_ends =
                    (lifetime > 0).then(|| Instant::now() + Duration::from_millis(lifetime as u64));
                Ok((last, lifetime, Then::Serve))
            }
            Step::Refused(why) => {
                self.exchange = None;
                let wait = shard.sign_in_throttle.failed(&self.host);
                // The name is in `why`; the password never is.
                log::warn!("{}: sign-in refused: {why}", self.host);
                glommio::timer::sleep(wait).await;
                Err((ErrorCode::SaslAuthenticationFailed, why))
            }
        }
    }

    /// SaslAuthenticate: a step, answered in the response.
    pub async fn authenticate(
        &mut self,
        shard: &Shard,
        req: &SaslAuthenticateRequest,
    ) -> (SaslAuthenticateResponse, Then) {
        match self.step(shard, &req.auth_bytes).await {
            Ok((bytes, lifetime, then)) => (
                SaslAuthenticateResponse::default()
                    .with_auth_bytes(Bytes::from(bytes))
                    .with_session_lifetime_ms(lifetime),
                then,
            ),
            Err((code, why)) => (
                SaslAuthenticateResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(str(&format!("authentication failed: {why}")))),
                Then::Close,
            ),
        }
    }
}

/// A session's lifetime in ms, as Kafka's `SaslServerAuthenticator` sets
/// it (`calcCompletionTimesAndReturnSessionLifetimeMs`): the time left on
/// the credential (an OAUTHBEARER token's `exp`), bounded by
/// `connections.max.reauth.ms` (`max`) when that is set; `max` alone for a
/// password; 0 (the session lasts as long as the connection) for a
/// password with no `max`. A credential already expired (within the
/// clock-skew leeway its check allows) is refused.
fn session_lifetime(max: Duration, expires_ms: Option<i64>) -> Result<i64, String> {
    let max = max.as_millis().min(i64::MAX as u128) as i64;
    match expires_ms.map(|e| e - weir_core::clock::now_ms()) {
        Some(left) if left <= 0 => Err("the token has expired".to_string()),
        Some(left) if max > 0 => Ok(left.min(max)),
        Some(left) => Ok(left),
        None => Ok(max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_lasts_to_its_token_s_expiry_and_the_reauthentication_bound() {
        let now = weir_core::clock::now_ms();
        let none = Duration::ZERO;
        let five_s = Duration::from_secs(5);
        // A password: no bound, no end; with a bound, the bound.
        assert_eq!(session_lifetime(none, None), Ok(0));
        assert_eq!(session_lifetime(five_s, None), Ok(5_000));
        // A token: its time left, even with no bound; the shorter of the two.
        let in_a_minute = now + 60_000;
        let left = session_lifetime(none, Some(in_a_minute)).expect("a live token");
        assert!((55_000..=60_000).contains(&left), "{left}");
        assert_eq!(session_lifetime(five_s, Some(in_a_minute)), Ok(5_000));
        // A token past its exp (within the leeway its check allowed).
        assert!(session_lifetime(none, Some(now - 1_000)).is_err());
        assert!(session_lifetime(five_s, Some(now - 1_000)).is_err());
    }
}
