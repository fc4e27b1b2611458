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
use weir_core::auth::sasl::{SaslExchange, Step, MECHANISMS};
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
}

impl SignIn {
    pub fn new(host: Rc<str>) -> SignIn {
        SignIn {
            principal: Rc::new(Principal::Anonymous),
            host,
            exchange: None,
            raw: false,
        }
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
        let mechanisms = MECHANISMS.iter().map(|m| str(m)).collect();
        let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
        match SaslExchange::start(req.mechanism.as_str(), shard.catalog()) {
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
    /// (a challenge, or the last message once signed in), or why it was
    /// refused (the connection then closes).
    pub async fn step(
        &mut self,
        shard: &Shard,
        input: &[u8],
    ) -> Result<(Vec<u8>, Then), (ErrorCode, String)> {
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
            Step::Challenge(c) => Ok((c, Then::Serve)),
            Step::SignedIn { principal, last } => {
                log::debug!(
                    "{}: signed in as {principal} ({})",
                    self.host,
                    exchange.mechanism()
                );
                shard.sign_in_throttle.succeeded(&self.host);
                self.principal = Rc::new(principal);
                self.exchange = None;
                self.raw = false;
                Ok((last, Then::Serve))
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
            Ok((bytes, then)) => (
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes)),
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
