//! HTTP/1.1 on the wire: a request's head read and parsed, its body
//! received within limits (and the shard's request memory), responses
//! written with their status lines, and percent-decoding. Every response
//! closes its connection.

use std::rc::Rc;

use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weir_core::Shard;

use super::{DISCARD_TIMEOUT, MAX_HTTP_HEAD};

/// A request's head (its text, method and target) and the bytes of its
/// body that came with it.
pub struct Head {
    pub text: String,
    pub method: String,
    pub target: String,
    pub body: Vec<u8>,
}

/// Reads a request's head (at most `MAX_HTTP_HEAD` bytes); `None` when the
/// client closed first or sent more.
pub async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Option<Head>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HTTP_HEAD {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let line = text.split("\r\n").next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    Ok(Some(Head {
        method,
        target,
        body: head[end..].to_vec(),
        text,
    }))
}

/// `{"error": why}`.
pub fn json_error(why: &str) -> Vec<u8> {
    let mut out = b"{\"error\":".to_vec();
    serde_json::to_writer(&mut out, why).expect("a string serialises");
    out.push(b'}');
    out
}

/// The header's value (case-insensitive name) in a request head.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Writes a response (every response closes its connection).
pub async fn write_response<S: AsyncWrite + Unpin>(
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
pub async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    body: &[u8],
) -> std::io::Result<()> {
    write_response(stream, status, "application/json", body).await?;
    stream.close().await
}

/// The body's length its head gives (else what came with the head).
pub fn body_length(head: &str, body: &[u8]) -> usize {
    header(head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(body.len())
}

/// What became of a request's body.
pub enum Received {
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
pub async fn receive_body<S: AsyncRead + Unpin>(
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
pub async fn refuse_large<S: AsyncRead + AsyncWrite + Unpin>(
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

/// A status code's status line part (`404 Not Found`).
pub fn status_line(code: u16) -> String {
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

/// Percent-decodes a path segment or query part (`+` is a space in a query).
pub fn decode(s: &str, query: bool) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if query => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query string's parts, each percent-decoded.
pub fn query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|q| !q.is_empty())
        .map(|q| {
            let (k, v) = q.split_once('=').unwrap_or((q, ""));
            (decode(k, true), decode(v, true))
        })
        .collect()
}
