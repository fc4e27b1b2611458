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
use weir_core::shard::Serving;
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
        shard
            .stats
            .connections
            .set(shard.stats.connections.get() + 1);
        let (s, l, tls) = (shard.clone(), live.clone(), tls.clone());
        let open = &shard.stats.connections_open;
        open.set(open.get() + 1);
        let handle = glommio::spawn_local(async move {
            connection::serve(s.clone(), stream, tls).await;
            let open = &s.stats.connections_open;
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
    let mut body = head[end..].to_vec();
    let line = head_text.split("\r\n").next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    // Bytes of a refused body still to come, dropped after the answer.
    let mut unread = 0;
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
            let len: usize = header(&head_text, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(body.len());
            if len > MAX_SQL_BODY {
                unread = len.min(MAX_SQL_DISCARD).saturating_sub(body.len());
                (
                    "413 Payload Too Large",
                    json_error(&format!(
                        "the SQL body is {len} bytes: the limit is {MAX_SQL_BODY} bytes"
                    )),
                )
            } else {
                // The body takes from the shard's request memory as a Kafka
                // frame does, and must arrive within the socket timeout.
                let deadline = std::time::Instant::now() + shard.config.socket_timeout;
                let Some(_grant) = shard.request_memory.take(len, deadline).await else {
                    let why = "the node's memory for requests is full: try again";
                    return respond(&mut stream, "503 Service Unavailable", &json_error(why)).await;
                };
                let left = deadline.saturating_duration_since(std::time::Instant::now());
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
                    Ok(true) => {}
                    Ok(false) => return Ok(()), // the client went away
                    Err(_) => {
                        log::warn!(
                            "{peer:?}: closing: an SQL body of {len} bytes did not arrive within {} ms (--socket-timeout-ms)",
                            shard.config.socket_timeout.as_millis()
                        );
                        return Ok(());
                    }
                }
                body.truncate(len);
                let host = peer
                    .map(|a| a.ip().to_canonical().to_string())
                    .unwrap_or_default();
                let principal = weir_core::auth::sign_in_http(
                    &shard.config.role_tokens,
                    &shard.catalog(),
                    header(&head_text, "authorization"),
                )
                .await;
                let caller_principal = match principal {
                    Ok(p) => {
                        shard.sign_in_throttle.succeeded(&host);
                        p
                    }
                    Err(why) => {
                        let wait = shard.sign_in_throttle.failed(&host);
                        log::warn!("{host}: HTTP sign-in refused: {why}");
                        glommio::timer::sleep(wait).await;
                        return respond(&mut stream, "401 Unauthorized", &json_error(&why)).await;
                    }
                };
                let caller = weir_core::sql::Caller {
                    principal: &caller_principal,
                    host: &host,
                };
                match std::str::from_utf8(&body) {
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
        }
        _ => (
            "404 Not Found",
            json_error(&format!("no route for {method} {path}")),
        ),
    };
    write_response(&mut stream, status, content_type, &body).await?;
    if unread > 0 {
        // Bounded in bytes and in time: a client that trickles its body
        // holds the connection at most about twice DISCARD_TIMEOUT.
        let began = std::time::Instant::now();
        while unread > 0 && began.elapsed() < DISCARD_TIMEOUT {
            let read =
                glommio::timer::timeout(DISCARD_TIMEOUT, async { Ok(stream.read(&mut buf).await) });
            let Ok(Ok(n @ 1..)) = read.await else {
                break;
            };
            unread = unread.saturating_sub(n);
        }
    }
    stream.close().await
}
