//! One Kafka connection, on the shard that accepted it.
//!
//! The reader decodes frames and starts a task per request at once, so a
//! client may pipeline (librdkafka keeps five produce requests in flight);
//! the writer awaits those tasks in arrival order, so answers go out in
//! order. How bytes move (plain or TLS) is `transport`'s.

use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::io::BufReader;
use futures_rustls::TlsAcceptor;
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use weir_core::auth::Principal;
use weir_core::Shard;

use crate::codec::{decode_request, encode_response, encode_response_chunks, Decoded};
use crate::handlers::{self, api_versions, Caller};
use crate::sasl::{SignIn, Then};
use crate::transport;

/// A request's encoded answer (none for acks=0 produce), when it is ready.
type ResponseTask = glommio::task::JoinHandle<Option<Vec<Bytes>>>;

/// An answer that is ready now (sign-in steps, handled in line).
fn ready(chunks: Vec<Bytes>) -> ResponseTask {
    glommio::spawn_local(async move { Some(chunks) }).detach()
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
    let mut sign_in = SignIn::new(client_host.clone());
    let (mut inbound, mut outbound) = match tls {
        None => match transport::plain(stream) {
            Ok(ends) => ends,
            Err(e) => {
                log::error!("{peer}: dup failed: {e}");
                return;
            }
        },
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
    let write_task = glommio::spawn_local(async move {
        while let Some((read_at, pending)) = rx.recv().await {
            let Some(Some(chunks)) = pending.await else {
                continue;
            };
            // Timed up to the send: a loopback send runs the receiver's
            // wake-up inline, which is the client's time, not the node's.
            if let Some(t) = read_at {
                latency.produce(t.elapsed());
            }
            if let Err(e) = outbound.write(&chunks).await {
                log::debug!("write failed: {e}");
                return;
            }
        }
        outbound.close().await;
    });
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
        let Ok(frame) = inbound.read_frame(len as usize).await else {
            break;
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
        let s = shard.clone();
        let client_host = client_host.clone();
        let caller = Caller {
            principal: sign_in.principal.clone(),
            host: client_host.clone(),
        };
        let task = glommio::spawn_local(async move {
            match decoded {
                Decoded::UnsupportedApiVersions { correlation_id } => {
                    let body = ResponseKind::ApiVersions(api_versions::response(
                        weir_core::ErrorCode::UnsupportedVersion.code(),
                    ));
                    encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)
                        .ok()
                        .map(|b| vec![b])
                }
                Decoded::Request(mut req) => {
                    req.client_host = Some(client_host);
                    let (key, version, cid) = (req.api_key, req.version, req.header.correlation_id);
                    let reply = handlers::handle(&s, *req, &caller).await?;
                    handlers::response_errors::record(&s, key, &reply.body);
                    let encoded =
                        encode_response_chunks(key, version, cid, &reply.body, &reply.records);
                    s.record_request(key as i16, read_at.elapsed());
                    match encoded {
                        Ok(b) => Some(b),
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
