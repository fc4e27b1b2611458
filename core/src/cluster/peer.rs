//! How nodes talk to each other (`--peer-addr`): Raft's messages, proposals
//! carried to the controller, joins and heartbeats. A frame is a 4-byte
//! big-endian length and that many bytes of JSON (`Request` one way,
//! `Reply` the other); a connection carries one call at a time.
//!
//! Bad input is answered, never trusted: a frame too long or not a
//! request, or from a node that is not a member, gets `Reply::Refused`
//! saying why (and is logged), and the connection is closed.

use std::time::Duration;

use openraft::error::{Fatal, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, SnapshotMeta, Vote};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::types::{Applied, Command, Meta};

/// The longest frame taken (a catalog snapshot of many topics fits).
pub const MAX_FRAME: usize = 256 << 20;

/// A frame's bytes are read this many at a time.
const READ_CHUNK: usize = 64 << 10;

/// How long a frame's bytes may take to arrive once its length has.
const FRAME_WITHIN: Duration = Duration::from_secs(30);

/// One call from another node.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    /// The calling node's id.
    pub from: u64,
    pub call: Call,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    Append(AppendEntriesRequest<Meta>),
    Vote(VoteRequest<u64>),
    Snapshot {
        vote: Vote<u64>,
        meta: SnapshotMeta<u64, BasicNode>,
        data: Vec<u8>,
    },
    /// A proposal for the controller's log.
    Write(Command),
    /// A node not among the voters asks to follow the metadata log.
    Join {
        addr: String,
    },
    /// A node says it is alive (to the controller).
    Heartbeat,
    /// The quorum as the controller sees it (DescribeQuorum).
    Quorum,
    /// A request for this node's shards.
    Forward {
        service: super::Service,
        /// The catalog version the asking node had.
        catalog_version: u64,
        /// The service's request, JSON carried as it is.
        body: Box<RawValue>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    Snapshot(Result<SnapshotResponse<u64>, Fatal<u64>>),
    /// What the proposal applied as, and the log index it is at.
    Written(Result<(Applied, u64), Refusal>),
    Done(Result<(), Refusal>),
    Quorum(Result<super::QuorumView, Refusal>),
    Forwarded(Result<Box<RawValue>, String>),
    /// The request was not taken: why.
    Refused(String),
}

/// A call the node could not do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refusal {
    pub why: String,
    /// The controller, when this node is not it and knows it.
    pub leader: Option<(u64, String)>,
}

/// Reads one frame; `Ok(None)` at a clean end of the stream.
pub async fn read_frame(s: &mut TcpStream) -> Result<Option<Vec<u8>>, String> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(format!(
            "a frame of {len} bytes is longer than the {MAX_FRAME} taken"
        ));
    }
    // Grown as the bytes arrive: a length alone holds no memory.
    let mut body = Vec::with_capacity(len.min(READ_CHUNK));
    let read = async {
        while body.len() < len {
            let want = (len - body.len()).min(READ_CHUNK);
            let at = body.len();
            body.resize(at + want, 0);
            s.read_exact(&mut body[at..]).await?;
        }
        Ok::<(), std::io::Error>(())
    };
    match tokio::time::timeout(FRAME_WITHIN, read).await {
        Ok(Ok(())) => Ok(Some(body)),
        Ok(Err(e)) => Err(format!("reading a frame of {len} bytes: {e}")),
        Err(_) => Err(format!(
            "a frame of {len} bytes did not arrive within {} s",
            FRAME_WITHIN.as_secs()
        )),
    }
}

pub async fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    s.write_all(&out).await
}

/// Who calls: a node's id, and the address its calls leave from (its
/// peer address's, unless it listens on every address) so the others see
/// each node's traffic come from where it listens.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub id: u64,
    pub source: Option<std::net::IpAddr>,
}

impl Caller {
    pub fn new(id: u64, listen: std::net::SocketAddr) -> Caller {
        let ip = listen.ip();
        Caller {
            id,
            source: (!ip.is_unspecified()).then_some(ip),
        }
    }
}

/// One node's connection to another, made on first use and made again
/// after an error.
pub struct Link {
    addr: String,
    from: Caller,
    stream: Option<TcpStream>,
}

impl Link {
    pub fn new(from: Caller, addr: String) -> Link {
        Link {
            addr,
            from,
            stream: None,
        }
    }

    async fn connect(&self) -> std::io::Result<TcpStream> {
        let Some(source) = self.from.source else {
            return TcpStream::connect(&self.addr).await;
        };
        let to = tokio::net::lookup_host(&self.addr)
            .await?
            .find(|a| a.is_ipv4() == source.is_ipv4())
            .ok_or_else(|| std::io::Error::other("no address of the same family"))?;
        let socket = match source {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(std::net::SocketAddr::new(source, 0))?;
        socket.connect(to).await
    }

    /// Makes one call, within `ttl`. The connection is taken out of the
    /// link for the call and put back only once its answer is read: a call
    /// dropped half way (openraft's own timeout, a cancelled snapshot)
    /// drops its connection with it, so no later call reads its answer.
    pub async fn call(&mut self, call: Call, ttl: Duration) -> Result<Reply, String> {
        let req = serde_json::to_vec(&Request {
            from: self.from.id,
            call,
        })
        .map_err(|e| e.to_string())?;
        let stream = self.stream.take();
        let r = match tokio::time::timeout(ttl, self.exchange(stream, &req)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", ttl.as_millis())),
        };
        match r {
            Ok((reply, stream)) => {
                // A refusal ends its connection at the other side.
                if !matches!(reply, Reply::Refused(_)) {
                    self.stream = Some(stream);
                }
                Ok(reply)
            }
            Err(e) => Err(format!("{}: {e}", self.addr)),
        }
    }

    async fn exchange(
        &self,
        stream: Option<TcpStream>,
        req: &[u8],
    ) -> Result<(Reply, TcpStream), String> {
        let mut s = match stream {
            Some(s) => s,
            None => {
                let s = self.connect().await.map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                s
            }
        };
        write_frame(&mut s, req).await.map_err(|e| e.to_string())?;
        let body = read_frame(&mut s)
            .await?
            .ok_or_else(|| "the connection closed".to_string())?;
        let reply = serde_json::from_slice(&body)
            .map_err(|e| format!("an answer that is not a reply: {e}"))?;
        Ok((reply, s))
    }
}
