//! openraft's network: each Raft message to another node is one call over
//! that node's `peer::Link`.

use std::future::Future;

use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Snapshot, Vote};

use super::peer::{Call, Link, Reply};
use super::types::Meta;

/// Makes a `PeerClient` for each node Raft talks to.
pub struct Network {
    /// This node (each call says who sends it).
    pub from: super::peer::Caller,
}

pub struct PeerClient {
    target: u64,
    link: Link,
}

impl RaftNetworkFactory<Meta> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            link: Link::new(self.from, node.addr.clone()),
        }
    }
}

#[derive(Debug)]
struct Why(String);

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Why {}

fn unreachable(why: String) -> Unreachable {
    Unreachable::new(&Why(why))
}

fn wrong(reply: Reply) -> NetworkError {
    NetworkError::new(&Why(format!("an answer of the wrong kind: {reply:?}")))
}

impl RaftNetwork<Meta> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Meta>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.link.call(Call::Append(rpc), option.hard_ttl()).await {
            Ok(Reply::Append(Ok(r))) => Ok(r),
            Ok(Reply::Append(Err(e))) => Err(RemoteError::new(self.target, e).into()),
            Ok(other) => Err(wrong(other).into()),
            Err(e) => Err(unreachable(e).into()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.link.call(Call::Vote(rpc), option.hard_ttl()).await {
            Ok(Reply::Vote(Ok(r))) => Ok(r),
            Ok(Reply::Vote(Err(e))) => Err(RemoteError::new(self.target, e).into()),
            Ok(other) => Err(wrong(other).into()),
            Err(e) => Err(unreachable(e).into()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot<Meta>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<Meta, Fatal<u64>>> {
        let call = Call::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot.into_inner(),
        };
        let sent = self.link.call(call, option.hard_ttl());
        tokio::select! {
            closed = cancel => Err(closed.into()),
            r = sent => match r {
                Ok(Reply::Snapshot(Ok(r))) => Ok(r),
                Ok(Reply::Snapshot(Err(e))) => Err(RemoteError::new(self.target, e).into()),
                Ok(other) => Err(wrong(other).into()),
                Err(e) => Err(unreachable(e).into()),
            }
        }
    }
}
