//! SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255): a client signs in with a
//! JWT its identity provider signed. The node checks it as Kafka's
//! `OAuthBearerValidatorCallbackHandler` does: the signature against the
//! provider's JSON Web Key set (a file, or an https:// URL fetched off the
//! shards), the expiry, the issuer and the audience when they are set,
//! and takes the principal from a claim (`sub` by default). A token
//! without a signature (`alg: none`) is refused. JOSE is `jsonwebtoken`'s.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};

/// How often an unknown key id may make the key set be read again (a
/// provider rotating its keys publishes the new one first).
const RELOAD_AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// The longest an https:// key set is fetched for.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The node's settings for OAUTHBEARER (`--oauth-*`).
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// Where the key set is: a path, a `file:` URL or an `https:`/`http:`
    /// URL (Kafka's `sasl.oauthbearer.jwks.endpoint.url`).
    pub jwks: String,
    /// The `iss` a token must carry, if set.
    pub issuer: Option<String>,
    /// Audiences a token's `aud` must name one of, if any.
    pub audience: Vec<String>,
    /// The claim naming the principal (Kafka's
    /// `sasl.oauthbearer.sub.claim.name`).
    pub principal_claim: String,
    /// Leeway on `exp` and `nbf` (Kafka's
    /// `sasl.oauthbearer.clock.skew.seconds`, 30).
    pub clock_skew: Duration,
}

/// A token checked: whose it is, and when it expires (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub principal: String,
    pub expires_ms: i64,
}

/// Why no key checks a token.
enum KeyRefused {
    /// The key set has no key of that id.
    Missing,
    /// The key may not check this token's signature.
    Unfit(String),
}

/// The node's token checker: its settings and the key set last read.
pub struct OAuth {
    config: OAuthConfig,
    keys: RwLock<Arc<JwkSet>>,
    last_read: Mutex<Instant>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("config", &self.config)
            .finish()
    }
}

impl OAuth {
    /// Reads the key set once; a node whose key set cannot be read does
    /// not start, saying why.
    pub fn load(config: OAuthConfig) -> Result<Arc<OAuth>, String> {
        let keys = read_jwks(&config.jwks)?;
        Ok(Arc::new(OAuth {
            config,
            keys: RwLock::new(Arc::new(keys)),
            last_read: Mutex::new(Instant::now()),
        }))
    }

    /// Checks a token. Blocking when an unknown key id makes the key set
    /// be read again: call it off the shards.
    pub fn check(&self, token: &str) -> Result<Signed, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::Json(_) => {
                "the token's header is not a signed JWT's (an unsigned token, alg none, is refused)"
                    .to_string()
            }
            _ => format!("not a JWT: {e}"),
        })?;
        let kid = header.kid.as_deref();
        let found = match self.key(kid, header.alg) {
            Err(KeyRefused::Missing) => {
                self.reload();
                self.key(kid, header.alg)
            }
            found => found,
        };
        let key = found.map_err(|why| match why {
            KeyRefused::Missing => format!(
                "no key {:?} in the key set {}",
                kid.unwrap_or("(none named)"),
                self.config.jwks
            ),
            KeyRefused::Unfit(why) => {
                format!(
                    "the key {:?} is refused: {why}",
                    kid.unwrap_or("(the only one)")
                )
            }
        })?;
        let mut v = Validation::new(header.alg);
        v.leeway = self.config.clock_skew.as_secs();
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp"]);
        match &self.config.issuer {
            Some(iss) => v.set_issuer(&[iss]),
            None => v.iss = None,
        }
        match self.config.audience.is_empty() {
            true => v.validate_aud = false,
            false => v.set_audience(&self.config.audience),
        }
        let data =
            jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &v)
                .map_err(|e| format!("the token is refused: {e}"))?;
        let claim = &self.config.principal_claim;
        let principal = match data.claims.get(claim) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(format!(
                    "the token has no {claim:?} claim naming its principal"
                ))
            }
        };
        let expires_s = data
            .claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        Ok(Signed {
            principal,
            expires_ms: (expires_s * 1000.0) as i64,
        })
    }

    /// The key for `kid` (a set of one key serves tokens that name none),
    /// if it may check a signature made with `alg`: a public key for
    /// signatures (never a shared HMAC secret, which anyone holding the
    /// key set could sign with), of the algorithm it names, if it names
    /// one.
    fn key(
        &self,
        kid: Option<&str>,
        alg: jsonwebtoken::Algorithm,
    ) -> Result<DecodingKey, KeyRefused> {
        use jsonwebtoken::jwk::{AlgorithmParameters, PublicKeyUse};
        let keys = self.keys.read().expect("not poisoned").clone();
        let jwk = match kid {
            Some(kid) => keys.find(kid),
            None if keys.keys.len() == 1 => keys.keys.first(),
            None => None,
        }
        .ok_or(KeyRefused::Missing)?;
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            return Err(KeyRefused::Unfit(
                "a shared secret (kty oct), not a public key".into(),
            ));
        }
        if jwk
            .common
            .public_key_use
            .as_ref()
            .is_some_and(|u| *u != PublicKeyUse::Signature)
        {
            return Err(KeyRefused::Unfit(
                "not for signatures (its use is not sig)".into(),
            ));
        }
        // The JWK's `alg` by its JOSE name (jsonwebtoken writes both
        // enums as their names).
        if let Some(named) = jwk.common.key_algorithm {
            if named.to_string() != format!("{alg:?}") {
                return Err(KeyRefused::Unfit(format!(
                    "for {named}, not the token's {alg:?}"
                )));
            }
        }
        DecodingKey::from_jwk(jwk).map_err(|e| KeyRefused::Unfit(format!("unusable: {e}")))
    }

    /// Reads the key set again, at most once per `RELOAD_AT_MOST_EVERY`;
    /// a failed read keeps the keys there were.
    fn reload(&self) {
        {
            let mut last = self.last_read.lock().expect("not poisoned");
            if last.elapsed() < RELOAD_AT_MOST_EVERY {
                return;
            }
            *last = Instant::now();
        }
        match read_jwks(&self.config.jwks) {
            Ok(keys) => *self.keys.write().expect("not poisoned") = Arc::new(keys),
            Err(why) => log::warn!("OAUTHBEARER: keeping the key set read before: {why}"),
        }
    }
}

/// A JWK set from a path, a `file:` URL or an `http(s):` URL.
fn read_jwks(source: &str) -> Result<JwkSet, String> {
    let text = if source.starts_with("https://") || source.starts_with("http://") {
        ureq::AgentBuilder::new()
            .timeout(FETCH_TIMEOUT)
            .build()
            .get(source)
            .call()
            .map_err(|e| format!("fetching the key set {source}: {e}"))?
            .into_string()
            .map_err(|e| format!("reading the key set {source}: {e}"))?
    } else {
        let path = source.strip_prefix("file://").unwrap_or(source);
        std::fs::read_to_string(path).map_err(|e| format!("reading the key set {path}: {e}"))?
    };
    serde_json::from_str(&text).map_err(|e| format!("the key set {source} is not a JWK set: {e}"))
}

/// The token in an OAUTHBEARER client message (RFC 7628 §3.1: a GS2 header,
/// then `key=value` pairs each ended by 0x01, `auth=Bearer <token>` among
/// them) and the authorization id the header names, if any.
pub fn client_token(message: &[u8]) -> Result<(String, Option<String>), String> {
    let text = std::str::from_utf8(message).map_err(|_| "the message is not UTF-8".to_string())?;
    let mut parts = text.split('\u{1}');
    let gs2 = parts.next().unwrap_or_default();
    let authzid = match gs2.split(',').collect::<Vec<_>>().as_slice() {
        ["n" | "y", a, ""] => a.strip_prefix("a=").map(str::to_string),
        _ => return Err("the message does not start with a GS2 header (n,,)".into()),
    };
    let auth = parts
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "auth")
        .map(|(_, v)| v)
        .ok_or("the message has no auth=Bearer <token>")?;
    let token = match auth.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => return Err("the auth value is not \"Bearer <token>\"".into()),
    };
    if token.is_empty() {
        return Err("the bearer token is empty".into());
    }
    Ok((token.to_string(), authzid.filter(|a| !a.is_empty())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_a_client_message() {
        let msg = b"n,,\x01auth=Bearer abc.def.ghi\x01\x01";
        assert_eq!(client_token(msg), Ok(("abc.def.ghi".into(), None)));
        let msg = b"n,a=alice,\x01host=x\x01auth=bearer t.o.k\x01\x01";
        assert_eq!(
            client_token(msg),
            Ok(("t.o.k".into(), Some("alice".into())))
        );
        assert!(client_token(b"p=tls-unique,,\x01auth=Bearer x\x01\x01").is_err());
        assert!(client_token(b"n,,\x01auth=Basic x\x01\x01").is_err());
        assert!(client_token(b"n,,\x01\x01").is_err());
    }

    /// A key set file holding `jwks`, and a checker reading it.
    fn checker(name: &str, jwks: &str) -> (Arc<OAuth>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("weir-oauth-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jwks.json");
        std::fs::write(&path, jwks).unwrap();
        let oauth = OAuth::load(OAuthConfig {
            jwks: path.display().to_string(),
            issuer: None,
            audience: Vec::new(),
            principal_claim: "sub".into(),
            clock_skew: Duration::from_secs(30),
        })
        .unwrap();
        (oauth, dir)
    }

    #[test]
    fn keys_unfit_to_check_a_signature_are_refused() {
        use jsonwebtoken::Algorithm::{HS256, RS256, RS512};
        // A public RSA key (the modulus need not be a real one to be refused
        // for its use or algorithm), a shared secret, an encryption key.
        let n = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";
        let (oauth, dir) = checker(
            "keys",
            &format!(
                r#"{{"keys":[
                {{"kty":"RSA","kid":"rs256","use":"sig","alg":"RS256","n":"{n}","e":"AQAB"}},
                {{"kty":"RSA","kid":"enc","use":"enc","n":"{n}","e":"AQAB"}},
                {{"kty":"oct","kid":"secret","k":"c2VjcmV0"}}]}}"#
            ),
        );
        assert!(oauth.key(Some("rs256"), RS256).is_ok());
        let unfit = |kid, alg| match oauth.key(Some(kid), alg) {
            Err(KeyRefused::Unfit(why)) => why,
            Err(KeyRefused::Missing) => panic!("{kid}: missing"),
            Ok(_) => panic!("{kid} with {alg:?}: taken"),
        };
        assert!(unfit("rs256", RS512).contains("for RS256"));
        assert!(unfit("enc", RS256).contains("not for signatures"));
        assert!(unfit("secret", HS256).contains("shared secret"));
        assert!(matches!(
            oauth.key(Some("other"), RS256),
            Err(KeyRefused::Missing)
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unsigned_token_is_refused() {
        let (oauth, dir) = checker("unsigned", r#"{"keys":[]}"#);
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let unsigned = format!(
            "{}.{}.",
            b64(r#"{"alg":"none","typ":"JWT"}"#),
            b64(r#"{"sub":"mallory","exp":99999999999}"#)
        );
        let why = oauth.check(&unsigned).unwrap_err();
        assert!(why.contains("unsigned"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
