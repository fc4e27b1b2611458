//! One Kafka connection, on the shard that accepted it.
//!
//! The reader decodes frames and starts a task per request at once, so a
//! client may pipeline (librdkafka keeps five produce requests in flight);
//! the writer awaits those tasks in arrival order, so answers go out in
//! order. Reader and writer use two descriptors of the same socket.

use std::os::fd::{AsRawFd, FromRawFd};
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use weir_core::auth::Principal;
use weir_core::Shard;

use crate::codec::{decode_request, encode_response, encode_response_chunks, Decoded};
use crate::handlers::{self, api_versions, Caller};
use crate::sasl::{SignIn, Then};

/// A request's encoded answer (none for acks=0 produce), when it is ready.
type ResponseTask = glommio::task::JoinHandle<Option<Vec<Bytes>>>;

/// An answer that is ready now (sign-in steps, handled in line).
fn ready(chunks: Vec<Bytes>) -> ResponseTask {
    glommio::spawn_local(async move { Some(chunks) }).detach()
}

/// Read buffer per connection.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Memory for a frame is taken as its bytes arrive, this much at a time, so
/// a client that announces a large frame and sends nothing holds little.
const FRAME_GROWTH: usize = 1 << 20;

/// Reads a frame of `len` bytes into fresh memory without zeroing it first
/// (zeroing each request's buffer was 7% of the node's CPU under produce
/// load). Bytes the reader already buffered come first; the rest is
/// received straight into the frame's spare capacity with a non-blocking
/// `recv` on the socket (`fd`, the reader's own descriptor). When nothing is
/// there, waiting is done by the reader (`fill_buf`), whose few buffered
/// bytes are then copied.
async fn read_frame(
    reader: &mut BufReader<TcpStream>,
    fd: std::os::fd::RawFd,
    len: usize,
) -> std::io::Result<BytesMut> {
    use futures::io::AsyncBufReadExt;
    let mut frame = BytesMut::with_capacity(len.min(FRAME_GROWTH));
    while frame.len() < len {
        let left = len - frame.len();
        let buffered = reader.buffer();
        if !buffered.is_empty() {
            let n = buffered.len().min(left);
            frame.extend_from_slice(&buffered[..n]);
            reader.consume_unpin(n);
            continue;
        }
        if frame.capacity() == frame.len() {
            frame.reserve(left.min(FRAME_GROWTH));
        }
        let spare = frame.spare_capacity_mut();
        let want = spare.len().min(left);
        // SAFETY: the kernel writes at most `want` bytes into the spare
        // capacity, which `frame` owns and nothing else references.
        let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), want, libc::MSG_DONTWAIT) };
        if n > 0 {
            // SAFETY: recv initialised these n bytes.
            unsafe { frame.set_len(frame.len() + n as usize) };
            continue;
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let err = std::io::Error::last_os_error();
        match err.kind() {
            std::io::ErrorKind::WouldBlock => {
                if reader.fill_buf().await?.is_empty() {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
            }
            std::io::ErrorKind::Interrupted => {}
            _ => return Err(err),
        }
    }
    Ok(frame)
}

/// The most pieces one `sendmsg` takes (Linux's IOV_MAX is 1024).
const MAX_IOVECS: usize = 512;

/// Writes a response's chunks in order: as much as the socket takes at once
/// with one vectored, non-blocking `sendmsg` on `fd` (the writer's own
/// descriptor), so a fetch of many batches costs one system call, not one
/// per batch; when the socket is full, the writer sends the rest of the
/// current chunk, waiting for room.
async fn write_chunks(
    writer: &mut TcpStream,
    fd: std::os::fd::RawFd,
    chunks: &[Bytes],
) -> std::io::Result<()> {
    let (mut i, mut off) = (0usize, 0usize); // the next byte to send
    while i < chunks.len() {
        let iov: Vec<libc::iovec> = chunks[i..]
            .iter()
            .take(MAX_IOVECS)
            .enumerate()
            .map(|(k, c)| {
                let part = if k == 0 { &c[off..] } else { &c[..] };
                libc::iovec {
                    iov_base: part.as_ptr() as *mut libc::c_void,
                    iov_len: part.len(),
                }
            })
            .collect();
        // SAFETY: a zeroed msghdr is valid; it points at `iov`, whose
        // entries point into `chunks`, all alive for the call.
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len() as _;
            libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if n >= 0 {
            let mut sent = n as usize;
            while i < chunks.len() && sent >= chunks[i].len() - off {
                sent -= chunks[i].len() - off;
                i += 1;
                off = 0;
            }
            off += sent;
            continue;
        }
        let err = std::io::Error::last_os_error();
        match err.kind() {
            std::io::ErrorKind::WouldBlock => {
                writer.write_all(&chunks[i][off..]).await?;
                i += 1;
                off = 0;
            }
            std::io::ErrorKind::Interrupted => {}
            _ => return Err(err),
        }
    }
    Ok(())
}

pub async fn serve(shard: Rc<Shard>, stream: TcpStream) {
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
    // SAFETY: dup returns a new descriptor we own; TcpStream closes it.
    let fd = unsafe { libc::dup(stream.as_raw_fd()) };
    if fd < 0 {
        log::error!("{peer}: dup failed: {}", std::io::Error::last_os_error());
        return;
    }
    let mut writer = unsafe { TcpStream::from_raw_fd(fd) };
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
            if let Err(e) = write_chunks(&mut writer, fd, &chunks).await {
                log::debug!("write failed: {e}");
                return;
            }
        }
        let _ = writer.close().await;
    });
    let read_fd = stream.as_raw_fd();
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
    let max = shard.config.max_request_bytes;
    let mut sign_in = SignIn::new(client_host.clone());
    loop {
        let mut len = [0u8; 4];
        if reader.read_exact(&mut len).await.is_err() {
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
        let Ok(frame) = read_frame(&mut reader, read_fd, len as usize).await else {
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
                    match encode_response_chunks(key, version, cid, &reply.body, &reply.records) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::AsyncReadExt;
    use glommio::net::TcpListener;

    /// A response of many pieces, larger than the socket takes at once, to
    /// a reader that drains it slowly: the vectored sends fill the socket,
    /// the writer waits for room, and every byte arrives once and in order.
    #[test]
    fn chunks_arrive_whole_when_the_socket_fills() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async move {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                // 2,000 pieces of odd sizes (some empty), ~16 MB in all.
                let chunks: Vec<Bytes> = (0..2000u32)
                    .map(|i| {
                        let len = (i as usize * 7919) % 16411;
                        Bytes::from((0..len).map(|j| (i as usize + j) as u8).collect::<Vec<_>>())
                    })
                    .collect();
                let expected: Vec<u8> = chunks.concat();
                let total = expected.len();
                let reader = glommio::spawn_local(async move {
                    let mut stream = TcpStream::connect(addr).await.unwrap();
                    let mut got = Vec::with_capacity(total);
                    let mut buf = vec![0u8; 64 << 10];
                    while got.len() < total {
                        // Drain slowly, so the sender finds the socket full.
                        glommio::timer::sleep(std::time::Duration::from_micros(200)).await;
                        let n = stream.read(&mut buf).await.unwrap();
                        assert!(n > 0, "closed after {} of {total} bytes", got.len());
                        got.extend_from_slice(&buf[..n]);
                    }
                    got
                });
                let mut writer = listener.accept().await.unwrap();
                let fd = writer.as_raw_fd();
                write_chunks(&mut writer, fd, &chunks).await.unwrap();
                let got = reader.await;
                assert_eq!(got.len(), expected.len());
                assert!(got == expected, "bytes differ");
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
