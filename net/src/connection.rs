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

use crate::apis::{api_versions, dispatch};
use crate::codec::{decode_request, encode_response, encode_response_chunks, Decoded, Request};
use crate::handlers::{self, Caller, RequestContext};
use crate::sasl::{SignIn, Then};
use crate::throttle;
use crate::transport::{self, Inbound, Outbound};

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

/// Who is at the other end: the address logged, and the host as Kafka
/// shows it (`/127.0.0.1`).
struct Peer {
    addr: String,
    host: Rc<str>,
}

/// The connection's turns: one fetch at a time (a client that pipelines
/// fetches and reads none of their answers holds one fetch's memory, not
/// one per request), and one produce at a time in arrival order, as Kafka
/// handles a connection's requests: two pipelined produces run
/// concurrently could append out of order (a typed table's conversion, a
/// hop to another shard), and a compacted topic would then keep an older
/// value as the latest. A produce's turn passes on once its records have
/// their offsets, not once they are durable, so the next one appends
/// behind them and shares their flush. Answers still go out in order;
/// other requests (fetches, metadata) still run beside a produce.
struct Turns {
    fetch: Rc<Semaphore>,
    produce: Rc<Semaphore>,
    /// Until when the connection reads no more than its next frame's
    /// length: a client past its quota (`crate::throttle`) is muted for its
    /// throttle time, as Kafka mutes its channel.
    muted_until: Rc<std::cell::Cell<Option<Instant>>>,
}

/// Each request's answer to come, in arrival order, and for a produce the
/// time its last byte was read (for the shard's histogram).
type Answers = local_channel::LocalSender<(Option<Instant>, ResponseTask)>;

/// Serves one Kafka connection until it closes; with `tls`, after its
/// handshake (a client certificate signs the connection in as its CN).
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, tls: Option<TlsAcceptor>) {
    let peer = Peer {
        addr: stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        host: stream
            .peer_addr()
            .map(|a| format!("/{}", a.ip().to_canonical()))
            .unwrap_or_default()
            .into(),
    };
    let _ = stream.set_nodelay(true);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let mut sign_in = SignIn::new(peer.host.clone());
    let Some((inbound, outbound)) = open(&shard, stream, tls, &peer, &mut sign_in).await else {
        return;
    };
    let (tx, rx) = local_channel::new_bounded(shard.config.max_in_flight_per_connection);
    let writer = glommio::spawn_local(write_answers(
        shard.clone(),
        rx,
        outbound,
        fd,
        peer.addr.clone(),
    ));
    read_requests(&shard, inbound, &mut sign_in, &tx, &peer).await;
    drop(tx);
    writer.await;
}

/// The connection's two directions, after the TLS handshake when there is
/// one (`None`: the handshake failed, and why is logged).
async fn open(
    shard: &Rc<Shard>,
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    peer: &Peer,
    sign_in: &mut SignIn,
) -> Option<(Inbound, Outbound)> {
    let Some(acceptor) = tls else {
        return Some(transport::plain(stream));
    };
    let socket = transport::Socket(stream);
    let buffered = BufReader::with_capacity(transport::READ_BUFFER_BYTES, socket);
    match crate::tls::accept(&acceptor, buffered).await {
        Ok(session) => {
            if let Some(name) = crate::tls::client_name(&session) {
                sign_in.certificate(shard, name);
            }
            Some(transport::tls(session))
        }
        Err(why) => {
            // A plaintext Kafka frame is not a TLS record.
            let hint = if why.contains("InvalidContentType") {
                " (plaintext on the TLS port? the client needs security.protocol SSL or SASL_SSL)"
            } else {
                ""
            };
            log::warn!("{}: closing: {why}{hint}", peer.addr);
            None
        }
    }
}

/// Writes each answer as it becomes ready, in arrival order. An answer the
/// client does not take within the socket timeout closes the connection
/// abortively (`transport::abort`).
async fn write_answers(
    shard: Rc<Shard>,
    rx: local_channel::LocalReceiver<(Option<Instant>, ResponseTask)>,
    mut outbound: Outbound,
    fd: std::os::fd::RawFd,
    peer: String,
) {
    let latency = shard.stats.latency.clone();
    let timeout = shard.config.socket_timeout;
    while let Some((read_at, pending)) = rx.recv().await {
        let Some(Some(answer)) = pending.await else {
            continue;
        };
        // Timed up to the send: a loopback send runs the receiver's
        // wake-up inline, which is the client's time, not the node's.
        if let Some(t) = read_at {
            latency.produce(t.elapsed());
            weir_core::timeline::note_since("produce", t, || peer.clone());
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
                    "{peer}: closing: an answer of {bytes} bytes was not taken within {} ms (--socket-timeout-ms); the client reads nothing",
                    timeout.as_millis()
                );
                transport::abort(fd);
                return;
            }
        }
        drop(answer);
    }
    outbound.close().await;
}

/// Reads frames until the connection closes or must be closed, answering
/// sign-in steps in line and starting a task for every other request.
async fn read_requests(
    shard: &Rc<Shard>,
    mut inbound: Inbound,
    sign_in: &mut SignIn,
    answers: &Answers,
    peer: &Peer,
) {
    let turns = Turns {
        fetch: Rc::new(Semaphore::new(1)),
        produce: Rc::new(Semaphore::new(1)),
        muted_until: Rc::new(std::cell::Cell::new(None)),
    };
    while let Some((frame, grant, read_at)) =
        read_frame(shard, &mut inbound, sign_in, peer, &turns.muted_until).await
    {
        if sign_in.raw {
            if !raw_sign_in_step(shard, sign_in, &frame, answers).await {
                return;
            }
            continue;
        }
        let decoded = match decode_request(frame.freeze()) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("{}: closing: {e}", peer.addr);
                return;
            }
        };
        weir_core::counters::add(&shard.counters.requests, 1);
        if let Decoded::Request(req) = &decoded {
            match sign_in_step(shard, sign_in, req, peer, answers).await {
                Some(true) => continue,
                Some(false) => return,
                None => {}
            }
        }
        let Some(task) = start_request(shard, decoded, grant, read_at, sign_in, &turns, peer).await
        else {
            return;
        };
        if answers.send(task).await.is_err() {
            return;
        }
    }
}

/// The next frame, the request memory it holds until answered and when its
/// last byte was read; `None` when the connection closed or must close
/// (why is logged).
async fn read_frame(
    shard: &Rc<Shard>,
    inbound: &mut Inbound,
    sign_in: &SignIn,
    peer: &Peer,
    muted_until: &std::cell::Cell<Option<Instant>>,
) -> Option<(BytesMut, Grant, Instant)> {
    let mut len = [0u8; 4];
    inbound.read_exact(&mut len).await.ok()?; // closed

    // A throttled client's next frame stays in the socket until its
    // throttle time is over: it holds none of the shard's request memory
    // meanwhile (Kafka mutes the channel).
    if let Some(until) = muted_until.take() {
        glommio::timer::sleep(until.saturating_duration_since(Instant::now())).await;
    }
    let len = i32::from_be_bytes(len);
    // Before signing in, only small frames (SASL and ApiVersions).
    let max = shard.config.max_request_bytes;
    let max = if *sign_in.principal == Principal::Anonymous && shard.sign_in_required() {
        max.min(crate::sasl::MAX_FRAME_BEFORE_SIGN_IN)
    } else {
        max
    };
    if len < 0 || len as usize > max {
        log::warn!(
            "{}: closing: a frame of {len} bytes (the limit is {max})",
            peer.addr
        );
        return None;
    }
    // The frame's bytes are the shard's request memory's until it is
    // answered; a frame that does not fit waits unread. Waiting and
    // receiving together take at most the socket timeout.
    let timeout = shard.config.socket_timeout;
    let deadline = Instant::now() + timeout;
    let memory = &shard.request_memory;
    let Some(grant) = memory.take(len as usize, deadline).await else {
        log::warn!(
            "{}: closing: a frame of {len} bytes waited {} ms (--socket-timeout-ms) for room in the shard's request memory ({} of {} bytes held by requests being received or served; --request-memory-bytes)",
            peer.addr,
            timeout.as_millis(),
            memory.used(),
            memory.limit()
        );
        return None;
    };
    let left = deadline.saturating_duration_since(Instant::now());
    match within(left, inbound.read_frame(len as usize)).await {
        Some(Ok(frame)) => Some((frame, grant, Instant::now())),
        Some(Err(_)) => None,
        None => {
            log::warn!(
                "{}: closing: a frame of {len} bytes did not arrive within {} ms (--socket-timeout-ms)",
                peer.addr,
                timeout.as_millis()
            );
            None
        }
    }
}

/// After SaslHandshake v0 a frame is a raw SASL token, answered with one (a
/// length and the bytes). `false`: the connection closes.
async fn raw_sign_in_step(
    shard: &Rc<Shard>,
    sign_in: &mut SignIn,
    frame: &[u8],
    answers: &Answers,
) -> bool {
    let Ok((bytes, _, _)) = sign_in.step(shard, frame).await else {
        return false;
    };
    let mut out = BytesMut::with_capacity(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
    out.extend_from_slice(&bytes);
    answers
        .send((None, ready(vec![out.freeze()])))
        .await
        .is_ok()
}

/// Admits `req` under sign-in and answers it in line when it is a sign-in
/// step (the next request may depend on it). `None`: not a sign-in step,
/// serve it; `Some(true)`: answered, read on; `Some(false)`: close.
async fn sign_in_step(
    shard: &Rc<Shard>,
    sign_in: &mut SignIn,
    req: &Request,
    peer: &Peer,
    answers: &Answers,
) -> Option<bool> {
    let signing_in = matches!(
        req.api_key,
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    );
    if sign_in.expired() && !signing_in {
        log::info!(
            "{}: closing: its SASL session ended and the client did not sign in again (KIP-368, --max-reauth-ms); {:?} refused",
            peer.addr,
            req.api_key
        );
        return Some(false);
    }
    if !sign_in.admits(shard, req.api_key) {
        log::warn!(
            "{}: closing: {:?} before signing in (sign-in is on: SASL first)",
            peer.addr,
            req.api_key
        );
        return Some(false);
    }
    let (key, version, cid) = (req.api_key, req.version, req.header.correlation_id);
    let (body, then) = match &req.body {
        RequestKind::SaslHandshake(r) => (
            ResponseKind::SaslHandshake(sign_in.handshake(shard, r, version)),
            Then::Serve,
        ),
        RequestKind::SaslAuthenticate(r) => {
            let (body, then) = sign_in.authenticate(shard, r).await;
            (ResponseKind::SaslAuthenticate(body), then)
        }
        _ => return None,
    };
    let Ok(chunks) = encode_response_chunks(key, version, cid, &body, &[]) else {
        return Some(false);
    };
    let sent = answers.send((None, ready(chunks))).await.is_ok();
    Some(sent && then != Then::Close)
}

/// Takes the request's turn (a fetch's or a produce's, in arrival order)
/// and starts the task that serves it. `None`: the connection closes.
async fn start_request(
    shard: &Rc<Shard>,
    decoded: Decoded,
    grant: Grant,
    read_at: Instant,
    sign_in: &SignIn,
    turns: &Turns,
    peer: &Peer,
) -> Option<(Option<Instant>, ResponseTask)> {
    let key = match &decoded {
        Decoded::Request(r) => Some(r.api_key),
        Decoded::UnsupportedApiVersions { .. } => None,
    };
    let produce = key == Some(ApiKey::Produce);
    // Taken here, in arrival order: the previous fetch's answer is sent.
    let fetch_turn = match key == Some(ApiKey::Fetch) {
        true => Some(turns.fetch.acquire_static_permit(1).await.ok()?),
        false => None,
    };
    let produce_turn = match produce {
        true => Some(turns.produce.acquire_static_permit(1).await.ok()?),
        false => None,
    };
    let muted_until = turns.muted_until.clone();
    let caller = Caller {
        principal: sign_in.principal.clone(),
        host: peer.host.clone(),
        produce_turn: std::cell::Cell::new(produce_turn),
    };
    let shard = shard.clone();
    let task = glommio::spawn_local(async move {
        // The frame's request memory is given back once it is answered.
        let _grant = grant;
        match decoded {
            Decoded::UnsupportedApiVersions { correlation_id } => {
                unsupported_api_versions(correlation_id)
            }
            Decoded::Request(req) => {
                let answer = answer(shard, *req, caller, read_at, &muted_until).await?;
                Some(Answer {
                    _turn: fetch_turn,
                    ..answer
                })
            }
        }
    })
    .detach();
    Some((produce.then_some(read_at), task))
}

/// ApiVersions at a version not served: the v0 body with
/// UNSUPPORTED_VERSION, as Kafka answers, so the client retries lower.
fn unsupported_api_versions(correlation_id: i32) -> Option<Answer> {
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

/// Runs `req`'s handler and encodes its answer (none for acks=0
/// produce), held to the caller's quotas (`crate::throttle`): a throttle
/// time goes into the answer and mutes the connection for that long.
async fn answer(
    shard: Rc<Shard>,
    req: Request,
    caller: Caller,
    read_at: Instant,
    muted_until: &std::cell::Cell<Option<Instant>>,
) -> Option<Answer> {
    let (key, version, cid) = (req.api_key, req.version, req.header.correlation_id);
    let request_bytes = req.size;
    let cx = RequestContext {
        shard,
        caller,
        version,
        client_id: req.header.client_id,
    };
    let who = throttle::Who::of(&cx);
    let held = throttle::held(&req.body, version);
    let (mut reply, busy) = match who.as_ref().is_some_and(throttle::Who::timed) {
        true => throttle::timed(dispatch(&cx, req.body)).await,
        false => (dispatch(&cx, req.body).await, Duration::ZERO),
    };
    // Answered: the connection's next produce may go, if the produce
    // handler did not let it go already.
    drop(cx.caller.produce_turn.take());
    let mut throttle_ms = match &who {
        Some(w) => w.before_answer(&cx, key, request_bytes, busy, held).await,
        None => 0,
    };
    let mute = |ms: u32| {
        if ms > 0 {
            let until = Instant::now() + Duration::from_millis(ms as u64);
            muted_until.set(Some(muted_until.get().map_or(until, |t| t.max(until))));
        }
    };
    let Some(mut body) = reply.body.take() else {
        mute(throttle_ms);
        return None;
    };
    handlers::response_errors::record(&cx.shard, key, &body);
    if throttle_ms > 0 {
        throttle::set_throttle_time(&mut body, throttle_ms);
    }
    let mut encoded = encode_response_chunks(key, version, cid, &body, &reply.records);
    if let (Some(w), ApiKey::Fetch, true, Ok(chunks)) = (&who, key, held, &encoded) {
        let bytes = chunks.iter().map(Bytes::len).sum();
        throttle_ms = w.fetched(&cx, bytes, throttle_ms).await;
        if throttle_ms > 0 {
            body = throttle::empty_fetch(&body, throttle_ms);
            reply.hold.clear();
            encoded = encode_response_chunks(key, version, cid, &body, &[]);
        }
    }
    mute(throttle_ms);
    cx.shard.record_request(key as i16, read_at.elapsed());
    match encoded {
        Ok(chunks) => Some(Answer {
            chunks,
            _hold: reply.hold,
            _turn: None,
        }),
        Err(e) => {
            log::error!("{e}");
            None
        }
    }
}
