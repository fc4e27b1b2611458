//! Answers the other nodes on `--peer-addr`: Raft's messages go to the
//! quorum, proposals are written if this node is the controller, joins
//! and heartbeats are taken by the controller. Anything else is refused
//! with the reason, logged, and its connection closed.

use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::raft::AppendEntriesResponse;
use openraft::Snapshot;
use tokio::net::{TcpListener, TcpStream};

use super::peer::{read_frame, write_frame, Call, Reply, Request};
use super::Inner;

pub(super) async fn serve(inner: Arc<Inner>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((s, addr)) => {
                let _ = s.set_nodelay(true);
                tokio::spawn(connection(inner.clone(), s, addr));
            }
            Err(e) => {
                log::warn!("accepting a peer connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(inner: Arc<Inner>, mut s: TcpStream, addr: SocketAddr) {
    loop {
        let body = match read_frame(&mut s).await {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(why) => return refuse(&mut s, addr, why).await,
        };
        let req: Request = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return refuse(&mut s, addr, format!("not a peer request: {e}")).await,
        };
        let reply = match answer(&inner, req).await {
            Ok(r) => r,
            Err(why) => return refuse(&mut s, addr, why).await,
        };
        let body = serde_json::to_vec(&reply).expect("replies serialise");
        if write_frame(&mut s, &body).await.is_err() {
            return;
        }
    }
}

/// Says why, logs it, and ends the connection.
async fn refuse(s: &mut TcpStream, addr: SocketAddr, why: String) {
    log::warn!("refused a peer call from {addr}: {why}");
    let body = serde_json::to_vec(&Reply::Refused(why)).expect("replies serialise");
    let _ = write_frame(s, &body).await;
}

async fn answer(inner: &Inner, req: Request) -> Result<Reply, String> {
    let from = req.from;
    let joining = matches!(req.call, Call::Join { .. });
    if !joining && !inner.is_member(from) {
        return Err(format!(
            "node {from} is not a member of this cluster's metadata quorum"
        ));
    }
    Ok(match req.call {
        Call::Append(rpc) => {
            let vote = rpc.vote;
            let r = inner.raft.append_entries(rpc).await;
            if let Ok(AppendEntriesResponse::HigherVote(newer)) = &r {
                log::warn!(
                    "refused entries from node {from} with vote {vote}: this node has seen a newer one ({newer})"
                );
            }
            Reply::Append(r)
        }
        Call::Vote(rpc) => {
            let asked = rpc.vote;
            let r = inner.raft.vote(rpc).await;
            if let Ok(v) = &r {
                if !v.vote_granted && v.vote > asked {
                    log::info!(
                        "refused a vote to node {from} for {asked}: this node has seen a newer term ({})",
                        v.vote
                    );
                }
            }
            Reply::Vote(r)
        }
        Call::Snapshot { vote, meta, data } => {
            let snapshot = Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            };
            Reply::Snapshot(inner.raft.install_full_snapshot(vote, snapshot).await)
        }
        Call::Write(cmd) => Reply::Written(inner.write_here(cmd).await),
        Call::Join { addr } => Reply::Done(inner.add_learner(from, addr).await),
        Call::Heartbeat => Reply::Done(inner.heard_from(from)),
        Call::Quorum => Reply::Quorum(inner.quorum_here()),
        Call::Forward {
            service,
            catalog_version,
            body,
        } => Reply::Forwarded(
            inner
                .forwarded(service, catalog_version, body.get().as_bytes().to_vec())
                .await
                .and_then(json),
        ),
    })
}

/// A service's answer as the JSON it is.
fn json(answer: Vec<u8>) -> Result<Box<serde_json::value::RawValue>, String> {
    String::from_utf8(answer)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::value::RawValue::from_string(text).map_err(|e| e.to_string()))
        .map_err(|why| format!("this node's answer is not JSON: {why}"))
}
