//! An HTTP request's sign-in: its `Authorization` header read as Bearer
//! or Basic credentials (`weir_core::auth::Credentials`), checked by core,
//! with failures throttled per address as the Kafka port throttles them.

use std::rc::Rc;

use futures::io::AsyncWrite;
use weir_core::auth::{Credentials, Principal};
use weir_core::Shard;

use super::wire::{header, json_error, respond};

/// The credentials an `Authorization` header carries: `Bearer <token>`
/// or `Basic` base64 of name:password. `Err`: why it carries none.
pub fn credentials(authorization: Option<&str>) -> Result<Credentials, String> {
    let Some(header) = authorization else {
        return Err("sign in: Authorization: Bearer <token>, or Basic".into());
    };
    let (scheme, value) = header.split_once(' ').unwrap_or((header, ""));
    let value = value.trim();
    if scheme.eq_ignore_ascii_case("Bearer") {
        return Ok(Credentials::Bearer(value.to_string()));
    }
    if scheme.eq_ignore_ascii_case("Basic") {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(value)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or("Basic credentials are not base64 of name:password")?;
        let (name, password) = decoded
            .split_once(':')
            .ok_or("Basic credentials are not name:password")?;
        return Ok(Credentials::Basic {
            name: name.to_string(),
            password: password.to_string(),
        });
    }
    Err(format!("unsupported Authorization scheme {scheme:?}"))
}

/// Who the request in `head` signs in as: anyone while sign-in is off,
/// else who its credentials name. `Err`: why not (a 401).
async fn principal(shard: &Shard, head: &str) -> Result<Principal, String> {
    let catalog = shard.catalog();
    if !weir_core::auth::sign_in_required(&shard.config.role_tokens, &catalog) {
        return Ok(Principal::Anonymous);
    }
    let credentials = credentials(header(head, "authorization"))?;
    weir_core::auth::sign_in_with(&shard.config.role_tokens, &catalog, credentials).await
}

/// Signs the request in (Basic or Bearer); answers 401 itself and gives
/// `None` when that fails. The principal comes with the client's address.
pub async fn sign_in<S: AsyncWrite + Unpin>(
    shard: &Rc<Shard>,
    stream: &mut S,
    head: &str,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<Option<(Principal, String)>> {
    let host = peer
        .map(|a| a.ip().to_canonical().to_string())
        .unwrap_or_default();
    match principal(shard, head).await {
        Ok(p) => {
            shard.sign_in_throttle.succeeded(&host);
            Ok(Some((p, host)))
        }
        Err(why) => {
            let wait = shard.sign_in_throttle.failed(&host);
            log::warn!("{host}: HTTP sign-in refused: {why}");
            glommio::timer::sleep(wait).await;
            respond(stream, "401 Unauthorized", &json_error(&why)).await?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_headers_read_as_credentials() {
        match credentials(Some("Bearer abc")) {
            Ok(Credentials::Bearer(t)) => assert_eq!(t, "abc"),
            _ => panic!("a bearer token"),
        }
        // "alice:s3cret:x" in base64: the password may hold a colon.
        match credentials(Some("basic YWxpY2U6czNjcmV0Ong=")) {
            Ok(Credentials::Basic { name, password }) => {
                assert_eq!((name.as_str(), password.as_str()), ("alice", "s3cret:x"))
            }
            _ => panic!("basic credentials"),
        }
        let err = |h| credentials(h).err().expect("refused");
        assert_eq!(
            err(Some("Basic !!")),
            "Basic credentials are not base64 of name:password"
        );
        assert_eq!(
            err(Some("Basic YWxpY2U=")),
            "Basic credentials are not name:password"
        );
        assert_eq!(
            err(Some("Digest x")),
            "unsupported Authorization scheme \"Digest\""
        );
        assert!(err(None).starts_with("sign in:"));
    }
}
