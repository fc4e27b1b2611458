//! How a connection's bytes move: frames in, answers out, over a plain
//! socket or TLS.
//!
//! On a plain socket the reader and the writer share the socket's one
//! descriptor (`Shared`), frames are received straight into their own
//! memory and answers leave with one vectored `sendmsg`. Over TLS both halves share
//! the one rustls session (`futures::io::split`), whose records are read
//! through a buffer (rustls asks the socket for 4 KiB at a time) and whose
//! answers are gathered into large records.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadHalf, WriteHalf,
};
use futures_rustls::server::TlsStream;
use glommio::net::TcpStream;

/// A TLS session over a buffered socket.
pub type Tls = TlsStream<BufReader<Socket>>;

/// glommio's socket, read with a plain non-blocking `recv` first. glommio's
/// own read arms an io_uring poll after every read that fills less than
/// asked, which is nearly every read of a busy connection: under TLS
/// produce load that submission was the node's largest kernel cost.
pub struct Socket(pub TcpStream);

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let fd = self.0.as_raw_fd();
        loop {
            // SAFETY: the kernel writes at most buf.len() bytes into buf.
            let n =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n >= 0 {
                return Poll::Ready(Ok(n as usize));
            }
            let err = std::io::Error::last_os_error();
            match err.kind() {
                // Nothing there: glommio waits for it.
                std::io::ErrorKind::WouldBlock => return Pin::new(&mut self.0).poll_read(cx, buf),
                std::io::ErrorKind::Interrupted => {}
                _ => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        // glommio sends at once and waits only when the socket is full.
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

/// One plain socket for a connection's reader and writer. glommio keeps a
/// socket's read and write readiness apart (a waker each), so the two
/// halves share its one descriptor instead of a `dup` each: with 10,000
/// connections beside 10,000 partitions' segment files, a second
/// descriptor per connection was what ran the node out of them. Each poll
/// borrows the socket only for the call.
#[derive(Clone)]
pub struct Shared(Rc<RefCell<TcpStream>>);

impl AsyncRead for Shared {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // Shuts the sending side down; the descriptor closes with the last
        // half dropped.
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

/// A plain connection's buffered reader, which holds a buffer only while
/// bytes wait in it: an idle connection, parked until its client sends
/// again, holds none (10,000 idle connections held 640 MiB of 64 KiB
/// buffers). Buffers come from, and go back to, the shard's `POOL`.
pub struct PlainReader {
    socket: Shared,
    buf: Option<Box<[u8]>>,
    /// The buffered bytes: `buf[start..end]`.
    start: usize,
    end: usize,
}

thread_local! {
    /// The shard's free read buffers (at most `POOLED_BUFFERS`).
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// Free read buffers a shard keeps for reuse.
const POOLED_BUFFERS: usize = 256;

impl PlainReader {
    /// The bytes buffered.
    fn buffer(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.start..self.end],
            None => &[],
        }
    }

    /// Drops the first `n` buffered bytes; an emptied buffer goes back to
    /// the pool.
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.end {
            self.release();
        }
    }

    fn release(&mut self) {
        self.start = 0;
        self.end = 0;
        if let Some(b) = self.buf.take() {
            POOL.with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOLED_BUFFERS {
                    p.push(b);
                }
            });
        }
    }

    /// Waits for bytes and buffers them (the buffer was empty); 0 when the
    /// client closed. A buffer is taken only to receive into and given
    /// back while waiting: glommio's read only arms a readiness poll when
    /// nothing is there, and keeps nothing of the buffer it was given.
    async fn fill(&mut self) -> std::io::Result<usize> {
        debug_assert!(self.buffer().is_empty());
        std::future::poll_fn(|cx| {
            let mut buf = self.buf.take().unwrap_or_else(|| {
                POOL.with(|p| p.borrow_mut().pop())
                    .unwrap_or_else(|| vec![0u8; READ_BUFFER_BYTES].into_boxed_slice())
            });
            let polled = Pin::new(&mut self.socket).poll_read(cx, &mut buf);
            self.buf = Some(buf);
            match polled {
                Poll::Ready(Ok(n)) if n > 0 => {
                    self.start = 0;
                    self.end = n;
                    Poll::Ready(Ok(n))
                }
                other => {
                    self.release();
                    other
                }
            }
        })
        .await
    }

    /// Fills `out` (a frame's length); an error when the client is gone.
    async fn read_exact(&mut self, out: &mut [u8]) -> std::io::Result<()> {
        let mut at = 0;
        while at < out.len() {
            if self.buffer().is_empty() && self.fill().await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let n = self.buffer().len().min(out.len() - at);
            out[at..at + n].copy_from_slice(&self.buffer()[..n]);
            self.consume(n);
            at += n;
        }
        Ok(())
    }
}

/// Where a connection's frames come from.
pub enum Inbound {
    Plain {
        reader: PlainReader,
        fd: RawFd,
    },
    /// Read straight from the session: rustls keeps what it decrypted.
    Tls(ReadHalf<Tls>),
}

/// Where a connection's answers go.
pub enum Outbound {
    Plain { writer: Shared, fd: RawFd },
    Tls(WriteHalf<Tls>),
}

/// A plain socket's two ends, on its one descriptor.
pub fn plain(stream: TcpStream) -> (Inbound, Outbound) {
    let fd = stream.as_raw_fd();
    let shared = Shared(Rc::new(RefCell::new(stream)));
    let reader = PlainReader {
        socket: shared.clone(),
        buf: None,
        start: 0,
        end: 0,
    };
    (
        Inbound::Plain { reader, fd },
        Outbound::Plain { writer: shared, fd },
    )
}

/// A TLS session's two ends.
pub fn tls(stream: Tls) -> (Inbound, Outbound) {
    let (r, w) = stream.split();
    (Inbound::Tls(r), Outbound::Tls(w))
}

impl Inbound {
    /// Fills `buf` (a frame's length); an error when the client is gone.
    pub async fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        match self {
            Inbound::Plain { reader, .. } => reader.read_exact(buf).await,
            Inbound::Tls(reader) => reader.read_exact(buf).await,
        }
    }

    /// The next `len` bytes, in memory of their own.
    pub async fn read_frame(&mut self, len: usize) -> std::io::Result<BytesMut> {
        match self {
            Inbound::Plain { reader, fd } => read_frame(reader, *fd, len).await,
            Inbound::Tls(reader) => {
                // Decrypted bytes are copied anyway: zeroing first costs
                // little beside the cipher. Memory still grows as bytes
                // arrive, as on a plain socket.
                let mut frame = BytesMut::new();
                while frame.len() < len {
                    let from = frame.len();
                    let more = (len - from).min(FRAME_GROWTH);
                    frame.resize(from + more, 0);
                    reader.read_exact(&mut frame[from..]).await?;
                }
                Ok(frame)
            }
        }
    }
}

/// Small answers are gathered up to this size before rustls seals them,
/// so a fetch of many small batches is a few large records, not many
/// small ones.
const TLS_GATHER: usize = 64 << 10;

impl Outbound {
    /// Sends one answer's chunks, in order.
    pub async fn write(&mut self, chunks: &[Bytes]) -> std::io::Result<()> {
        match self {
            Outbound::Plain { writer, fd } => write_chunks(writer, *fd, chunks).await,
            Outbound::Tls(writer) => {
                let mut gathered = Vec::new();
                for chunk in chunks {
                    if gathered.len() + chunk.len() > TLS_GATHER && !gathered.is_empty() {
                        writer.write_all(&gathered).await?;
                        gathered.clear();
                    }
                    if chunk.len() >= TLS_GATHER {
                        writer.write_all(chunk).await?;
                    } else {
                        gathered.extend_from_slice(chunk);
                    }
                }
                if !gathered.is_empty() {
                    writer.write_all(&gathered).await?;
                }
                writer.flush().await
            }
        }
    }

    /// Closes the sending side (for TLS, after its close_notify).
    pub async fn close(self) {
        let _ = match self {
            Outbound::Plain { mut writer, .. } => writer.close().await,
            Outbound::Tls(mut writer) => writer.close().await,
        };
    }
}

/// Closes the connection on `fd` abortively: what the client never took
/// goes with the socket (an RST when it closes) rather than staying in the
/// kernel, which would probe the shut window for minutes to deliver it.
/// The shutdown wakes the reader too, which may be waiting for bytes.
pub fn abort(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt and shutdown on the connection's own descriptor
    // (still open: the connection's stream owns it until both directions
    // end), with a linger value that outlives the call.
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
}

/// Read buffer per connection.
pub const READ_BUFFER_BYTES: usize = 64 << 10;

/// Memory for a frame is taken as its bytes arrive, this much at a time, so
/// a client that announces a large frame and sends nothing holds little.
const FRAME_GROWTH: usize = 1 << 20;

/// Reads a frame of `len` bytes into fresh memory without zeroing it first
/// (zeroing each request's buffer was 7% of the node's CPU under produce
/// load). Bytes the reader already buffered come first; the rest is
/// received straight into the frame's spare capacity with a non-blocking
/// `recv` on the socket (`fd`, the reader's descriptor). When nothing is
/// there, waiting is done by the reader (`fill_buf`), whose few buffered
/// bytes are then copied.
async fn read_frame(
    reader: &mut PlainReader,
    fd: std::os::fd::RawFd,
    len: usize,
) -> std::io::Result<BytesMut> {
    let mut frame = BytesMut::with_capacity(len.min(FRAME_GROWTH));
    while frame.len() < len {
        let left = len - frame.len();
        let buffered = reader.buffer();
        if !buffered.is_empty() {
            let n = buffered.len().min(left);
            frame.extend_from_slice(&buffered[..n]);
            reader.consume(n);
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
                if reader.fill().await? == 0 {
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
/// with one vectored, non-blocking `sendmsg` on `fd` (the writer's
/// descriptor), so a fetch of many batches costs one system call, not one
/// per batch; when the socket is full, the writer sends the rest of the
/// current chunk, waiting for room.
async fn write_chunks<W: AsyncWrite + Unpin>(
    writer: &mut W,
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::AsyncReadExt;
    use glommio::net::TcpListener;
    use std::os::fd::AsRawFd;

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
