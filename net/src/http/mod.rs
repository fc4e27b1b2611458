//! The node's HTTP/1.1 endpoint on `--addr`: the routes (`exchange`),
//! with the wire (`wire`), sign-in (`sign_in`), SQL (`sql`) and the schema
//! registry's face (`registry`) in their own rooms. Core answers typed
//! calls; everything HTTP (parsing, routes, status codes, Basic and Bearer)
//! is here.

use std::rc::Rc;

use futures::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use futures_rustls::TlsAcceptor;
use glommio::net::TcpListener;
use weir_core::Shard;

mod registry;
mod sign_in;
mod sql;
mod wire;

use wire::{json_error, write_response};

/// The largest HTTP request head read.
const MAX_HTTP_HEAD: usize = 16 << 10;
/// How much of a refused body is read and dropped after the 413, so that
/// closing does not reset the connection before the client, still sending,
/// reads the answer; a larger body gets the reset.
const MAX_BODY_DISCARD: usize = 64 << 20;
/// How long a refused body may take to arrive while it is dropped (each
/// read, and all of them).
const DISCARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The console (`GET /`): one page, embedded, that reads `/health`,
/// `/metrics` and `POST /sql` (with the token its user gives).
const CONSOLE: &str = include_str!("console.html");

/// A small HTTP/1.1 endpoint: `GET /health`, `GET /ready` (503 with why
/// until a cluster's node is in sync again), `GET /stats` (every shard's
/// counters and latency histograms), `GET /stats/latency` (all shards'
/// histograms merged), `POST /stats/reset` (empties them), `POST /sql`
/// (statements in the body; the last one's rows as a JSON array, or
/// `{"error": ...}`).
pub async fn serve(shard: Rc<Shard>, listener: TcpListener, tls: Option<TlsAcceptor>) {
    let mut last_warning: Option<std::time::Instant> = None;
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: wait for some to close rather
                // than spin on the error.
                if last_warning.is_none_or(|t| t.elapsed().as_secs() >= 10) {
                    last_warning = Some(std::time::Instant::now());
                    log::warn!("shard {}: HTTP accept failed: {e}", shard.id);
                }
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let s = shard.clone();
        let tls = tls.clone();
        glommio::spawn_local(async move {
            let peer = stream.peer_addr().ok();
            let _ = match tls {
                None => exchange(s, stream, peer).await,
                Some(acceptor) => match crate::tls::accept(&acceptor, stream).await {
                    Ok(session) => exchange(s, session, peer).await,
                    Err(why) => {
                        log::debug!("HTTPS from {peer:?}: {why}");
                        Ok(())
                    }
                },
            };
        })
        .detach();
    }
}

/// One HTTP request and its answer, over a plain socket or TLS; `peer` is
/// the client's address.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    shard: Rc<Shard>,
    mut stream: S,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let Some(head) = wire::read_head(&mut stream).await? else {
        return Ok(());
    };
    let (method, target) = (head.method.as_str(), head.target.as_str());
    let answer = match (method, target) {
        ("POST", "/sql") => return sql::serve(&shard, &mut stream, head, peer).await,
        (_, t) if registry::is_registry_path(t.split('?').next().unwrap_or_default()) => {
            let (method, target) = (head.method.clone(), head.target.clone());
            return registry::serve(
                &shard,
                &mut stream,
                &method,
                &target,
                &head.text,
                head.body,
                peer,
            )
            .await;
        }
        _ => node_route(&shard, method, target).await,
    };
    let (status, content_type, body) = answer.unwrap_or_else(|| {
        (
            "404 Not Found",
            "application/json",
            json_error(&format!("no route for {method} {target}")),
        )
    });
    write_response(&mut stream, status, content_type, &body).await?;
    stream.close().await
}

/// The node's own pages: health, counters, metrics, latency and the
/// console. `None`: no such route.
async fn node_route(
    shard: &Rc<Shard>,
    method: &str,
    path: &str,
) -> Option<(&'static str, &'static str, Vec<u8>)> {
    let json = "application/json";
    Some(match (method, path) {
        ("GET", "/health") => (
            "200 OK",
            json,
            format!(
                "{{\"status\":\"ok\",\"shard\":{},\"shards\":{},\"partitions_on_shard\":{}}}",
                shard.id,
                shard.nr_shards,
                shard.partition_count()
            )
            .into_bytes(),
        ),
        ("GET", "/ready") => match shard.readiness() {
            Ok(()) => ("200 OK", json, b"{\"ready\":true}".to_vec()),
            Err(why) => (
                "503 Service Unavailable",
                json,
                serde_json::to_vec(&serde_json::json!({"ready": false, "why": why}))
                    .unwrap_or_default(),
            ),
        },
        ("GET", "/stats") => (
            "200 OK",
            json,
            serde_json::to_vec(&shard.reports().await).unwrap_or_default(),
        ),
        ("GET", "/") | ("GET", "/console") => (
            "200 OK",
            "text/html; charset=utf-8",
            CONSOLE.as_bytes().to_vec(),
        ),
        ("GET", "/metrics") => {
            let name = |key: i16| {
                kafka_protocol::messages::ApiKey::try_from(key)
                    .map(|k| format!("{k:?}"))
                    .unwrap_or_else(|_| format!("api_{key}"))
            };
            (
                "200 OK",
                weir_core::metrics::CONTENT_TYPE,
                weir_core::metrics::render(shard, name).await.into_bytes(),
            )
        }
        ("GET", "/stats/latency") => (
            "200 OK",
            json,
            serde_json::to_vec(&shard.latency().await).unwrap_or_default(),
        ),
        ("POST", "/stats/reset") => {
            shard.reset_latencies().await;
            ("200 OK", json, b"{\"reset\":\"latency_us\"}".to_vec())
        }
        _ => return None,
    })
}
