//! The listeners of one shard: Kafka on `--kafka` and HTTP on `--addr`,
//! both bound with SO_REUSEPORT so every shard accepts its own share, and
//! with `--shard-ports` Kafka on this shard's own port too. With TLS
//! (`--tls-cert`), both ports speak it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::TlsAcceptor;
use glommio::net::TcpListener;
use glommio::sync::Semaphore;
use weir_core::auth::acl::{Operation, ResourceType};
use weir_core::node::Serving;
use weir_core::registry::api as registry;
use weir_core::Shard;

use crate::connection;

/// Binds this shard's listeners and returns the future that serves them.
pub fn bind(shard: Rc<Shard>, tls: Option<TlsAcceptor>) -> Result<Serving, String> {
    let kafka = TcpListener::bind(shard.config.kafka_addr).map_err(|e| {
        format!(
            "cannot listen for Kafka on {}: {e}",
            shard.config.kafka_addr
        )
    })?;
    let own = match shard.config.shard_listen_addr(shard.id) {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .map_err(|e| format!("cannot listen for Kafka on shard port {addr}: {e}"))?,
        ),
        None => None,
    };
    let http = TcpListener::bind(shard.config.http_addr)
        .map_err(|e| format!("cannot listen for HTTP on {}: {e}", shard.config.http_addr))?;
    // Both Kafka listeners of this shard share its connection slots.
    let slots = Rc::new(Semaphore::new(shard.config.connections_per_shard() as u64));
    Ok(Box::pin(async move {
        let http_task = glommio::spawn_local(serve_http(shard.clone(), http, tls.clone()));
        let own_task = own.map(|l| {
            glommio::spawn_local(accept_kafka(shard.clone(), l, slots.clone(), tls.clone()))
        });
        let result = accept_kafka(shard, kafka, slots, tls).await;
        if let Some(t) = own_task {
            t.cancel().await;
        }
        http_task.cancel().await;
        result
    }))
}

async fn accept_kafka(
    shard: Rc<Shard>,
    listener: TcpListener,
    slots: Rc<Semaphore>,
    tls: Option<TlsAcceptor>,
) -> Result<(), String> {
    // Keep every connection's handle so shutdown can cancel them: a
    // detached task would outlive its executor.
    let live: Rc<RefCell<HashMap<u64, glommio::task::JoinHandle<()>>>> = Rc::default();
    let mut next_id = 0u64;
    let guard = CancelOnDrop(live.clone());
    let mut last_warning = None;
    let mut last_failure = None;
    loop {
        // At the limit, stop accepting (as Kafka's max.connections does):
        // new clients wait in the listen backlog until a connection ends.
        let quiet = last_warning.is_some_and(|t: std::time::Instant| t.elapsed().as_secs() < 10);
        if slots.available() == 0 && !quiet {
            last_warning = Some(std::time::Instant::now());
            log::warn!(
                "shard {}: {} Kafka connections, the limit (--max-connections): not accepting until one closes",
                shard.id,
                shard.config.connections_per_shard()
            );
        }
        let Ok(slot) = slots.acquire_static_permit(1).await else {
            return Ok(());
        };
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: said once in ten seconds.
                if last_failure.is_none_or(|t: std::time::Instant| t.elapsed().as_secs() >= 10) {
                    last_failure = Some(std::time::Instant::now());
                    log::warn!("shard {}: accept failed: {e}", shard.id);
                }
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        weir_core::counters::add(&shard.counters.connections, 1);
        let (s, l, tls) = (shard.clone(), live.clone(), tls.clone());
        let open = &shard.counters.connections_open;
        open.set(open.get() + 1);
        let handle = glommio::spawn_local(async move {
            connection::serve(s.clone(), stream, tls).await;
            let open = &s.counters.connections_open;
            open.set(open.get() - 1);
            l.borrow_mut().remove(&id);
            drop(slot);
        })
        .detach();
        live.borrow_mut().insert(id, handle);
        let _ = &guard;
    }
}

struct CancelOnDrop(Rc<RefCell<HashMap<u64, glommio::task::JoinHandle<()>>>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        for (_, h) in self.0.borrow_mut().drain() {
            h.cancel();
        }
    }
}

/// A small HTTP/1.1 endpoint: `GET /health`, `GET /stats` (every shard's
/// counters and latency histograms), `GET /stats/latency` (all shards'
/// histograms merged), `POST /stats/reset` (empties them), `POST /sql`
/// (statements in the body; the last one's rows as a JSON array, or
/// `{"error": ...}`).
async fn serve_http(shard: Rc<Shard>, listener: TcpListener, tls: Option<TlsAcceptor>) {
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
                None => http_exchange(s, stream, peer).await,
                Some(acceptor) => match crate::tls::accept(&acceptor, stream).await {
                    Ok(session) => http_exchange(s, session, peer).await,
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

/// The largest HTTP request head read.
const MAX_HTTP_HEAD: usize = 16 << 10;
/// The largest SQL body accepted.
const MAX_SQL_BODY: usize = 1 << 20;
/// How much of a refused body is read and dropped after the 413, so that
/// closing does not reset the connection before the client, still sending,
/// reads the answer; a larger body gets the reset.
const MAX_SQL_DISCARD: usize = 64 << 20;
/// How long a refused body may take to arrive while it is dropped (each
/// read, and all of them).
const DISCARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The console (`GET /`): one page, embedded, that reads `/health`,
/// `/metrics` and `POST /sql` (with the token its user gives).
const CONSOLE: &str = include_str!("console.html");

fn json_error(why: &str) -> Vec<u8> {
    let mut out = b"{\"error\":".to_vec();
    serde_json::to_writer(&mut out, why).expect("a string serialises");
    out.push(b'}');
    out
}

/// The header's value (case-insensitive name) in a request head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Writes a response (every response closes its connection).
async fn write_response<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await
}

/// Answers and closes (a request refused before it ran).
async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    body: &[u8],
) -> std::io::Result<()> {
    write_response(stream, status, "application/json", body).await?;
    stream.close().await
}

/// The content type of the schema registry's answers.
const REGISTRY_CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";
/// The largest schema registry request body accepted.
const MAX_REGISTRY_BODY: usize = 1 << 20;

/// The body's length its head gives (else what came with the head).
fn body_length(head: &str, body: &[u8]) -> usize {
    header(head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(body.len())
}

/// What became of a request's body.
enum Received {
    Body(Vec<u8>),
    /// Past the route's limit: refuse it (413).
    TooLarge,
    /// The node's request memory is full (503).
    Busy,
    /// The client went away or was too slow (closed, logged).
    Gone,
}

/// Reads a body of `len` bytes (`body`: what came with the head), within
/// `limit`, taking it from the shard's request memory as a Kafka frame
/// does; it must arrive within the socket timeout.
async fn receive_body<S: AsyncRead + Unpin>(
    shard: &Rc<Shard>,
    stream: &mut S,
    len: usize,
    mut body: Vec<u8>,
    limit: usize,
    peer: Option<std::net::SocketAddr>,
    what: &str,
) -> std::io::Result<Received> {
    if len > limit {
        return Ok(Received::TooLarge);
    }
    let deadline = std::time::Instant::now() + shard.config.socket_timeout;
    let Some(_grant) = shard.request_memory.take(len, deadline).await else {
        return Ok(Received::Busy);
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    let mut buf = [0u8; 4096];
    let receive = async {
        while body.len() < len {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return Ok(false),
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
        }
        Ok(true)
    };
    match glommio::timer::timeout(left, receive).await {
        Ok(true) => {
            body.truncate(len);
            Ok(Received::Body(body))
        }
        Ok(false) => Ok(Received::Gone),
        Err(_) => {
            log::warn!(
                "{peer:?}: closing: {what} of {len} bytes did not arrive within {} ms (--socket-timeout-ms)",
                shard.config.socket_timeout.as_millis()
            );
            Ok(Received::Gone)
        }
    }
}

/// Answers a body too large, then reads and drops up to `unread` bytes of
/// it (bounded in time) so the client, still sending, reads the answer.
async fn refuse_large<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    content_type: &str,
    answer: &[u8],
    mut unread: usize,
) -> std::io::Result<()> {
    write_response(stream, "413 Payload Too Large", content_type, answer).await?;
    let mut buf = [0u8; 4096];
    let began = std::time::Instant::now();
    while unread > 0 && began.elapsed() < DISCARD_TIMEOUT {
        let read =
            glommio::timer::timeout(DISCARD_TIMEOUT, async { Ok(stream.read(&mut buf).await) });
        let Ok(Ok(n @ 1..)) = read.await else {
            break;
        };
        unread = unread.saturating_sub(n);
    }
    stream.close().await
}

/// Signs the request in (Basic or Bearer, as `/sql`); answers 401 itself
/// and gives `None` when that fails.
async fn sign_in<S: AsyncWrite + Unpin>(
    shard: &Rc<Shard>,
    stream: &mut S,
    head: &str,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<Option<(weir_core::auth::Principal, String)>> {
    let host = peer
        .map(|a| a.ip().to_canonical().to_string())
        .unwrap_or_default();
    match weir_core::auth::sign_in_http(
        &shard.config.role_tokens,
        &shard.catalog(),
        header(head, "authorization"),
    )
    .await
    {
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

/// One schema registry request (`weir_core::registry`): read, signed in,
/// checked against the caller's grants on the `_schemas` topic (READ to
/// read, WRITE to change), and answered by the registry's shard.
async fn serve_registry<S: AsyncRead + AsyncWrite + Unpin>(
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
                len.min(MAX_SQL_DISCARD),
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
    let query = query
        .split('&')
        .filter(|q| !q.is_empty())
        .map(|q| {
            let (k, v) = q.split_once('=').unwrap_or((q, ""));
            (registry::decode(k, true), registry::decode(v, true))
        })
        .collect();
    let req = registry::Request {
        method: method.to_string(),
        path: path.to_string(),
        query,
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

fn status_line(code: u16) -> String {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    format!("{code} {reason}")
}

/// One HTTP request and its answer, over a plain socket or TLS; `peer` is
/// the client's address.
async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    shard: Rc<Shard>,
    mut stream: S,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HTTP_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head_text = String::from_utf8_lossy(&head[..end]).into_owned();
    let body = head[end..].to_vec();
    let line = head_text.split("\r\n").next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut content_type = "application/json";
    let (status, body): (&str, Vec<u8>) = match (method, path) {
        ("GET", "/health") => (
            "200 OK",
            format!(
                "{{\"status\":\"ok\",\"shard\":{},\"shards\":{},\"partitions_on_shard\":{}}}",
                shard.id,
                shard.nr_shards,
                shard.partition_count()
            )
            .into_bytes(),
        ),
        ("GET", "/stats") => (
            "200 OK",
            serde_json::to_vec(&shard.reports().await).unwrap_or_default(),
        ),
        ("GET", "/") | ("GET", "/console") => {
            content_type = "text/html; charset=utf-8";
            ("200 OK", CONSOLE.as_bytes().to_vec())
        }
        ("GET", "/metrics") => {
            content_type = weir_core::metrics::CONTENT_TYPE;
            let name = |key: i16| {
                kafka_protocol::messages::ApiKey::try_from(key)
                    .map(|k| format!("{k:?}"))
                    .unwrap_or_else(|_| format!("api_{key}"))
            };
            (
                "200 OK",
                weir_core::metrics::render(&shard, name).await.into_bytes(),
            )
        }
        ("GET", "/stats/latency") => (
            "200 OK",
            serde_json::to_vec(&shard.latency().await).unwrap_or_default(),
        ),
        ("POST", "/stats/reset") => {
            shard.reset_latencies().await;
            ("200 OK", b"{\"reset\":\"latency_us\"}".to_vec())
        }
        ("POST", "/sql") => {
            let len = body_length(&head_text, &body);
            let body_len = body.len();
            let mut sql_body = match receive_body(
                &shard,
                &mut stream,
                len,
                body,
                MAX_SQL_BODY,
                peer,
                "an SQL body",
            )
            .await?
            {
                Received::Body(b) => b,
                Received::TooLarge => {
                    let unread = len.min(MAX_SQL_DISCARD).saturating_sub(body_len);
                    let why =
                        format!("the SQL body is {len} bytes: the limit is {MAX_SQL_BODY} bytes");
                    return refuse_large(
                        &mut stream,
                        "application/json",
                        &json_error(&why),
                        unread,
                    )
                    .await;
                }
                Received::Busy => {
                    let why = "the node's memory for requests is full: try again";
                    return respond(&mut stream, "503 Service Unavailable", &json_error(why)).await;
                }
                Received::Gone => return Ok(()),
            };
            sql_body.truncate(len);
            let Some((caller_principal, host)) =
                sign_in(&shard, &mut stream, &head_text, peer).await?
            else {
                return Ok(());
            };
            let caller = weir_core::sql::Caller {
                principal: &caller_principal,
                host: &host,
            };
            match std::str::from_utf8(&sql_body) {
                Err(_) => ("400 Bad Request", json_error("the statement is not UTF-8")),
                Ok(sql) => match weir_core::sql::execute(&shard, sql, &caller).await {
                    Ok(r) => ("200 OK", r.to_json()),
                    Err(weir_core::sql::SqlError::Statement(why)) => {
                        ("400 Bad Request", json_error(&why))
                    }
                    Err(weir_core::sql::SqlError::Denied(why)) => {
                        ("403 Forbidden", json_error(&why))
                    }
                    Err(weir_core::sql::SqlError::Node(why)) => {
                        log::error!("SQL failed: {why}");
                        ("500 Internal Server Error", json_error(&why))
                    }
                },
            }
        }
        (_, p) if registry::is_registry_path(p.split('?').next().unwrap_or_default()) => {
            return serve_registry(&shard, &mut stream, method, p, &head_text, body, peer).await;
        }
        _ => (
            "404 Not Found",
            json_error(&format!("no route for {method} {path}")),
        ),
    };
    write_response(&mut stream, status, content_type, &body).await?;
    stream.close().await
}
