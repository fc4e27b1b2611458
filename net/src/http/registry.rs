//! The schema registry's HTTP face (`weir_core::registry` answers): its
//! paths, its body limit and content type, sign-in and grants, and the hop
//! to the registry's shard.

use std::rc::Rc;

use futures::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::registry::api as registry;
use weir_core::Shard;

use super::sign_in::sign_in;
use super::wire::{
    body_length, decode, receive_body, refuse_large, status_line, write_response, Received,
};
use super::MAX_BODY_DISCARD;

/// The content type of the schema registry's answers.
const REGISTRY_CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";
/// The largest schema registry request body accepted.
const MAX_REGISTRY_BODY: usize = 1 << 20;

/// Whether `path` is one of the registry's.
pub fn is_registry_path(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    matches!(
        first,
        "subjects" | "schemas" | "config" | "mode" | "compatibility"
    )
}

/// One schema registry request (`weir_core::registry`): read, signed in,
/// checked against the caller's grants on the `_schemas` topic (READ to
/// read, WRITE to change), and answered by the registry's shard.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    shard: &Rc<Shard>,
    stream: &mut S,
    method: &str,
    target: &str,
    head: &str,
    body: Vec<u8>,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let len = body_length(head, &body);
    let body = match receive_body(
        shard,
        stream,
        len,
        body,
        MAX_REGISTRY_BODY,
        peer,
        "a schema registry body",
    )
    .await?
    {
        Received::Body(b) => b,
        Received::TooLarge => {
            let a = registry::Answer::error(
                413,
                format!("the request body is {len} bytes: the limit is {MAX_REGISTRY_BODY} bytes"),
            );
            return refuse_large(
                stream,
                REGISTRY_CONTENT_TYPE,
                a.body.as_bytes(),
                len.min(MAX_BODY_DISCARD),
            )
            .await;
        }
        Received::Busy => {
            return registry_answer(
                stream,
                registry::Answer::error(50301, "the node's memory for requests is full: try again"),
            )
            .await;
        }
        Received::Gone => return Ok(()),
    };
    let Some((principal, host)) = sign_in(shard, stream, head, peer).await? else {
        return Ok(());
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let req = registry::Request {
        method: method.to_string(),
        segments: path
            .trim_matches('/')
            .split('/')
            .map(|p| decode(p, false))
            .collect(),
        path: path.to_string(),
        query: super::wire::query(query),
        body,
    };
    let (operation, verb) = if req.writes() {
        (Operation::Write, "change")
    } else {
        (Operation::Read, "read")
    };
    if !shard.allows(
        &principal,
        &host,
        operation,
        ResourceType::Topic,
        weir_core::registry::TOPIC,
    ) {
        let why = format!(
            "{principal} may not {verb} the schema registry (it needs {operation:?} on the topic {})",
            weir_core::registry::TOPIC
        );
        return registry_answer(stream, registry::Answer::error(40301, why)).await;
    }
    // In a cluster the node leading the registry's topic answers.
    match weir_core::registry::served_elsewhere(shard).await {
        Ok(None) => {}
        Ok(Some(node)) => return registry_answer(stream, forward(shard, node, &req).await).await,
        Err(a) => return registry_answer(stream, a).await,
    }
    let owner = weir_core::registry::owner(shard);
    let a = shard
        .invoke_on(
            owner,
            move |s| async move { registry::handle(&s, req).await },
        )
        .await
        .unwrap_or_else(|e| registry::Answer::error(50001, e.message));
    registry_answer(stream, a).await
}

/// Asks node `node` (leading the registry's topic) to answer `req`.
async fn forward(shard: &Rc<Shard>, node: i32, req: &registry::Request) -> registry::Answer {
    let control = shard.cluster.as_ref().expect("only a cluster forwards");
    let service = weir_core::cluster::Service::Registry;
    control
        .ask(node, service, shard.catalog().version, req)
        .await
        .unwrap_or_else(|e| registry::Answer::error(50301, e.message))
}

/// Writes the registry's answer with its status and closes.
async fn registry_answer<S: AsyncWrite + Unpin>(
    stream: &mut S,
    a: registry::Answer,
) -> std::io::Result<()> {
    write_response(
        stream,
        &status_line(a.status),
        REGISTRY_CONTENT_TYPE,
        a.body.as_bytes(),
    )
    .await?;
    stream.close().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_percent_decoded_and_registry_paths_known() {
        assert_eq!(decode("a%2Fb%20c", false), "a/b c");
        assert_eq!(decode("a+b", true), "a b");
        assert_eq!(decode("100%", false), "100%");
        assert_eq!(
            super::super::wire::query("a=1&b=x%20y&c"),
            vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x y".to_string()),
                ("c".to_string(), String::new())
            ]
        );
        assert!(is_registry_path("/subjects/x/versions"));
        assert!(!is_registry_path("/sql"));
    }
}
