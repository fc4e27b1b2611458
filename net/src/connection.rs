//! One Kafka connection, on the shard that accepted it.
//!
//! The reader decodes frames and starts a task per request at once, so a
//! client may pipeline (librdkafka keeps five produce requests in flight);
//! the writer awaits those tasks in arrival order, so answers go out in
//! order. A connection's produces take turns (each has its offsets before
//! the next starts, as Kafka handles them in order) so its records land in
//! the order sent, and the next may share the last one's flush; its
//! fetches take turns too. How bytes move (plain or TLS) is
//! `transport`'s.

use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::future::Either;
use futures::io::BufReader;
use futures_rustls::TlsAcceptor;
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use glommio::sync::{Semaphore, StaticPermit};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use std::future::Future;
use std::time::Duration;
use weir_core::auth::Principal;
use weir_core::memory::Grant;
use weir_core::Shard;

use crate::codec::{decode_request, encode_response, encode_response_chunks, Decoded};
use crate::handlers::{self, api_versions, Caller};
use crate::sasl::{SignIn, Then};
use crate::transport;

/// A request's encoded answer, and what it holds until it is sent.
struct Answer {
    chunks: Vec<Bytes>,
    /// A fetch's answer memory (`weir_core::memory`).
    _hold: Vec<Grant>,
    /// A fetch's turn: the connection's next fetch starts once this one's
    /// answer is sent.
    _turn: Option<StaticPermit>,
}

/// A request's answer (none for acks=0 produce), when it is ready.
type ResponseTask = glommio::task::JoinHandle<Option<Answer>>;

/// An answer that is ready now (sign-in steps, handled in line).
fn ready(chunks: Vec<Bytes>) -> ResponseTask {
    glommio::spawn_local(async move {
        Some(Answer {
            chunks,
            _hold: Vec::new(),
            _turn: None,
        })
    })
    .detach()
}

/// `work`'s output, or `None` when `timeout` passes first. Most work is
/// done at its first poll (the frame is buffered, the socket has room):
/// then no timer is set.
async fn within<F: Future>(timeout: Duration, work: F) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    if let std::task::Poll::Ready(out) = futures::poll!(work.as_mut()) {
        return Some(out);
    }
    let timer = std::pin::pin!(glommio::timer::sleep(timeout));
    match futures::future::select(work, timer).await {
        Either::Left((out, _)) => Some(out),
        Either::Right(_) => None,
    }
}

/// Serves one Kafka connection until it closes; with `tls`, after its
/// handshake (a client certificate signs the connection in as its CN).
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, tls: Option<TlsAcceptor>) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let client_host: std::rc::Rc<str> = stream
        .peer_addr()
        .map(|a| format!("/{}", a.ip().to_canonical()))
        .unwrap_or_default()
        .into();
    let _ = stream.set_nodelay(true);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let mut sign_in = SignIn::new(client_host.clone());
    let (mut inbound, mut outbound) = match tls {
        None => transport::plain(stream),
        Some(acceptor) => {
            let socket = transport::Socket(stream);
            let buffered = BufReader::with_capacity(transport::READ_BUFFER_BYTES, socket);
            match crate::tls::accept(&acceptor, buffered).await {
                Ok(session) => {
                    if let Some(name) = crate::tls::client_name(&session) {
                        sign_in.certificate(&shard, name);
                    }
                    transport::tls(session)
                }
                Err(why) => {
                    // A plaintext Kafka frame is not a TLS record.
                    let hint = if why.contains("InvalidContentType") {
                        " (plaintext on the TLS port? the client needs security.protocol SSL or SASL_SSL)"
                    } else {
                        ""
                    };
                    log::warn!("{peer}: closing: {why}{hint}");
                    return;
                }
            }
        }
    };
    // Each request's answer to come, in arrival order, and for a produce
    // request the time its last byte was read (for the shard's histogram).
    let (tx, rx) = local_channel::new_bounded::<(Option<Instant>, ResponseTask)>(
        shard.config.max_in_flight_per_connection,
    );
    let latency = shard.stats.latency.clone();
    let timeout = shard.config.socket_timeout;
    let writer_peer = peer.clone();
    let write_task = glommio::spawn_local(async move {
        while let Some((read_at, pending)) = rx.recv().await {
            let Some(Some(answer)) = pending.await else {
                continue;
            };
            // Timed up to the send: a loopback send runs the receiver's
            // wake-up inline, which is the client's time, not the node's.
            if let Some(t) = read_at {
                latency.produce(t.elapsed());
            }
            match within(timeout, outbound.write(&answer.chunks)).await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    log::debug!("write failed: {e}");
                    return;
                }
                None => {
                    let bytes: usize = answer.chunks.iter().map(Bytes::len).sum();
                    log::warn!(
                        "{writer_peer}: closing: an answer of {bytes} bytes was not taken within {} ms (--socket-timeout-ms); the client reads nothing",
                        timeout.as_millis()
                    );
                    // An abortive close: what the client never took goes
                    // with the socket (an RST when it closes) rather than
                    // staying in the kernel, which would probe the shut
                    // window for minutes to deliver it.
                    let linger = libc::linger {
                        l_onoff: 1,
                        l_linger: 0,
                    };
                    // SAFETY: setsockopt and shutdown on the connection's
                    // own descriptor, with a linger value that outlives the
                    // call. The shutdown wakes the reader too, which may be
                    // waiting for bytes.
                    unsafe {
                        libc::setsockopt(
                            fd,
                            libc::SOL_SOCKET,
                            libc::SO_LINGER,
                            (&linger as *const libc::linger).cast(),
                            std::mem::size_of::<libc::linger>() as libc::socklen_t,
                        );
                        libc::shutdown(fd, libc::SHUT_RDWR);
                    }
                    return;
                }
            }
            drop(answer);
        }
        outbound.close().await;
    });
    // One fetch at a time: a client that pipelines fetches and reads none
    // of their answers holds one fetch's memory, not one per request.
    let fetch_turns = Rc::new(Semaphore::new(1));
    // One produce at a time, in arrival order, as Kafka handles a
    // connection's requests: two pipelined produces run concurrently could
    // append out of order (a typed table's conversion, a hop to another
    // shard), and a compacted topic would then keep an older value as the
    // latest. The turn passes on once a produce's records have their
    // offsets, not once they are durable, so the next one appends behind
    // them and shares their flush. Answers still go out in order; other
    // requests (fetches, metadata) still run beside a produce.
    let produce_turns = Rc::new(Semaphore::new(1));
    let max = shard.config.max_request_bytes;
    loop {
        let mut len = [0u8; 4];
        if inbound.read_exact(&mut len).await.is_err() {
            break; // closed
        }
        let len = i32::from_be_bytes(len);
        // Before signing in, only small frames (SASL and ApiVersions).
        let max = if *sign_in.principal == Principal::Anonymous && shard.sign_in_required() {
            max.min(crate::sasl::MAX_FRAME_BEFORE_SIGN_IN)
        } else {
            max
        };
        if len < 0 || len as usize > max {
            log::warn!("{peer}: closing: a frame of {len} bytes (the limit is {max})");
            break;
        }
        // The frame's bytes are the shard's request memory's until it is
        // answered; a frame that does not fit waits unread. Waiting and
        // receiving together take at most the socket timeout.
        let deadline = Instant::now() + shard.config.socket_timeout;
        let memory = &shard.request_memory;
        let Some(grant) = memory.take(len as usize, deadline).await else {
            log::warn!(
                "{peer}: closing: a frame of {len} bytes waited {} ms (--socket-timeout-ms) for room in the shard's request memory ({} of {} bytes held by requests being received or served; --request-memory-bytes)",
                shard.config.socket_timeout.as_millis(),
                memory.used(),
                memory.limit()
            );
            break;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = match within(left, inbound.read_frame(len as usize)).await {
            Some(Ok(frame)) => frame,
            Some(Err(_)) => break,
            None => {
                log::warn!(
                    "{peer}: closing: a frame of {len} bytes did not arrive within {} ms (--socket-timeout-ms)",
                    shard.config.socket_timeout.as_millis()
                );
                break;
            }
        };
        let read_at = Instant::now();
        if sign_in.raw {
            // After SaslHandshake v0 a frame is a raw SASL token, answered
            // with one (a length and the bytes).
            let Ok((bytes, _)) = sign_in.step(&shard, &frame).await else {
                break;
            };
            let mut out = BytesMut::with_capacity(4 + bytes.len());
            out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
            out.extend_from_slice(&bytes);
            if tx.send((None, ready(vec![out.freeze()]))).await.is_err() {
                break;
            }
            continue;
        }
        let decoded = match decode_request(frame.freeze()) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("{peer}: closing: {e}");
                break;
            }
        };
        shard.stats.requests.set(shard.stats.requests.get() + 1);
        if let Decoded::Request(req) = &decoded {
            if !sign_in.admits(&shard, req.api_key) {
                log::warn!(
                    "{peer}: closing: {:?} before signing in (sign-in is on: SASL first)",
                    req.api_key
                );
                break;
            }
            // Sign-in steps run in line: the next request may depend on them.
            let (key, version, cid) = (req.api_key, req.version, req.header.correlation_id);
            let answer = match &req.body {
                RequestKind::SaslHandshake(r) => Some((
                    ResponseKind::SaslHandshake(sign_in.handshake(&shard, r, version)),
                    Then::Serve,
                )),
                RequestKind::SaslAuthenticate(r) => {
                    let (body, then) = sign_in.authenticate(&shard, r).await;
                    Some((ResponseKind::SaslAuthenticate(body), then))
                }
                _ => None,
            };
            if let Some((body, then)) = answer {
                let Ok(chunks) = encode_response_chunks(key, version, cid, &body, &[]) else {
                    break;
                };
                if tx.send((None, ready(chunks))).await.is_err() || then == Then::Close {
                    break;
                }
                continue;
            }
        }
        let produce = matches!(&decoded, Decoded::Request(r) if r.api_key == ApiKey::Produce);
        let fetch = matches!(&decoded, Decoded::Request(r) if r.api_key == ApiKey::Fetch);
        // Taken here, in arrival order: the previous fetch's answer is sent.
        let turn = match fetch {
            true => match fetch_turns.acquire_static_permit(1).await {
                Ok(t) => Some(t),
                Err(_) => break,
            },
            false => None,
        };
        let produce_turn = match produce {
            true => match produce_turns.acquire_static_permit(1).await {
                Ok(t) => Some(t),
                Err(_) => break,
            },
            false => None,
        };
        let s = shard.clone();
        let client_host = client_host.clone();
        let caller = Caller {
            principal: sign_in.principal.clone(),
            host: client_host.clone(),
            produce_turn: std::cell::Cell::new(produce_turn),
        };
        let task = glommio::spawn_local(async move {
            // The frame's request memory is given back once it is answered.
            let _grant = grant;
            match decoded {
                Decoded::UnsupportedApiVersions { correlation_id } => {
                    let body = ResponseKind::ApiVersions(api_versions::response(
                        weir_core::ErrorCode::UnsupportedVersion.code(),
                    ));
                    encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)
                        .ok()
                        .map(|b| Answer {
                            chunks: vec![b],
                            _hold: Vec::new(),
                            _turn: None,
                        })
                }
                Decoded::Request(mut req) => {
                    req.client_host = Some(client_host);
                    let (key, version, cid) = (req.api_key, req.version, req.header.correlation_id);
                    let reply = handlers::handle(&s, *req, &caller).await;
                    // Answered: the connection's next produce may go, if
                    // the produce handler did not let it go already.
                    drop(caller.produce_turn.take());
                    let reply = reply?;
                    handlers::response_errors::record(&s, key, &reply.body);
                    let encoded =
                        encode_response_chunks(key, version, cid, &reply.body, &reply.records);
                    s.record_request(key as i16, read_at.elapsed());
                    match encoded {
                        Ok(chunks) => Some(Answer {
                            chunks,
                            _hold: reply.hold,
                            _turn: turn,
                        }),
                        Err(e) => {
                            log::error!("{e}");
                            None
                        }
                    }
                }
            }
        })
        .detach();
        if tx.send((produce.then_some(read_at), task)).await.is_err() {
            break;
        }
    }
    drop(tx);
    write_task.await;
}
