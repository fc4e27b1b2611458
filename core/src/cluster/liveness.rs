//! A node's life in the cluster: the first voter makes the quorum and
//! seeds it with its catalog; a node that is not a voter joins as a
//! learner; every node registers where it is at each start and, once it
//! has applied that registration, heartbeats to the controller, which
//! fences a node silent past its session timeout (Metadata stops naming
//! it) and lifts the fence when it is heard again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::BasicNode;

use super::peer::{Call, Link, Refusal, Reply};
use super::types::{Applied, Command};
use super::Inner;
use crate::catalog::{Catalog, ClusterNode};

impl Inner {
    pub(super) fn not_controller(&self) -> Refusal {
        let leader = self.raft.metrics().borrow().current_leader;
        let leader = leader.and_then(|l| Some((l, self.member_addr(l)?)));
        Refusal {
            why: "this node is not the controller".into(),
            leader,
        }
    }

    fn is_controller(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// A node asks to follow the metadata log (the controller adds it as
    /// a learner).
    pub(super) async fn add_learner(&self, node: u64, addr: String) -> Result<(), Refusal> {
        if self.config.voters.contains_key(&node) {
            return Err(Refusal {
                why: format!(
                    "node {node} is a voter: voters are members from the start and do not join"
                ),
                leader: None,
            });
        }
        if self.member_addr(node).as_deref() == Some(addr.as_str()) {
            return Ok(());
        }
        match self.raft.add_learner(node, BasicNode { addr }, false).await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(self.not_controller())
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::InProgress(_),
            ))) => Err(Refusal {
                why: "a membership change is in progress; ask again".into(),
                leader: None,
            }),
            Err(e) => Err(Refusal {
                why: e.to_string(),
                leader: None,
            }),
        }
    }

    /// A heartbeat (the controller records it).
    pub(super) fn heard_from(&self, node: u64) -> Result<(), Refusal> {
        if !self.is_controller() {
            return Err(self.not_controller());
        }
        self.heard
            .lock()
            .expect("not poisoned")
            .insert(node as i32, Instant::now());
        Ok(())
    }
}

/// Runs for the node's life on the control runtime.
pub(super) async fn run(inner: Arc<Inner>, me: ClusterNode, local: Arc<Catalog>) {
    let first_voter = inner.config.voters.keys().next().copied();
    if first_voter == Some(inner.id) {
        start_quorum(&inner).await;
        // Ignored once the cluster has a catalog: only a new cluster takes
        // this node's (a single node's topics, users and offsets).
        let seed = Command::Seed {
            node: me.id,
            catalog: Box::new((*local).clone()),
        };
        tokio::spawn(propose_until_done(
            inner.clone(),
            seed,
            "seeding the cluster's catalog",
        ));
    }
    if inner.config.voters.is_empty() {
        if let Some(addr) = inner.config.join.clone() {
            join(&inner, addr).await;
        }
    }
    // As KRaft's broker, heard (and so unfenced) only once this node has
    // applied its own registration: a node back from a stop never counts
    // as live while it still acts on the catalog it had (leading
    // partitions that moved on meanwhile, naming them so in Metadata).
    let registering = inner.clone();
    tokio::spawn(async move {
        let registered = propose_until_done(
            registering.clone(),
            Command::Register(me),
            "registering this node",
        )
        .await;
        if let Applied::Version(version) = registered {
            registering.applied(version).await;
        }
        heartbeats(registering).await
    });
    if let Some(every) = inner.config.leader_balance_interval {
        tokio::spawn(balancing(inner.clone(), every));
    }
    if let Some(every) = inner.config.replica_balance_interval {
        tokio::spawn(replica_balancing(inner.clone(), every));
    }
    fencing(inner).await;
}

/// Makes the quorum of the configured voters, unless this node's log
/// says it exists.
async fn start_quorum(inner: &Inner) {
    match inner.raft.is_initialized().await {
        Ok(true) => {}
        Ok(false) => {
            let members: BTreeMap<u64, BasicNode> = inner
                .config
                .voters
                .iter()
                .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
                .collect();
            match inner.raft.initialize(members).await {
                Ok(()) => log::info!(
                    "made the metadata quorum of voters {:?}",
                    inner.config.voters.keys().collect::<Vec<_>>()
                ),
                Err(e) => log::info!("the metadata quorum exists already: {e}"),
            }
        }
        Err(e) => log::error!("cannot tell whether the metadata quorum exists: {e}"),
    }
}

async fn propose_until_done(inner: Arc<Inner>, cmd: Command, what: &'static str) -> Applied {
    loop {
        match inner.propose(cmd.clone()).await {
            Ok(applied) => return applied,
            Err(e) => {
                log::warn!("{what}: {e}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Asks `addr` (and then the controller it names) to take this node as
/// a learner, until one does.
async fn join(inner: &Inner, mut addr: String) {
    let peer_addr = inner.config.peer_advertised.clone();
    loop {
        let mut link = Link::new(inner.caller(), addr.clone());
        let r = link
            .call(
                Call::Join {
                    addr: peer_addr.clone(),
                },
                Duration::from_secs(10),
            )
            .await;
        match r {
            Ok(Reply::Done(Ok(()))) => {
                log::info!("joined the cluster through {addr}");
                return;
            }
            Ok(Reply::Done(Err(Refusal {
                leader: Some((_, leader)),
                ..
            }))) => addr = leader,
            Ok(other) => log::warn!("joining through {addr}: {other:?}"),
            Err(e) => log::warn!("joining through {addr}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Tells the controller, every quarter of the session timeout, that this
/// node lives.
async fn heartbeats(inner: Arc<Inner>) {
    let every = inner.config.session_timeout / 4;
    let mut link: Option<(u64, Link)> = None;
    loop {
        tokio::time::sleep(every).await;
        if inner.is_controller() {
            let _ = inner.heard_from(inner.id);
            continue;
        }
        let Refusal {
            leader: Some((leader, addr)),
            ..
        } = inner.not_controller()
        else {
            continue;
        };
        if link.as_ref().map(|(l, _)| *l) != Some(leader) {
            link = Some((leader, Link::new(inner.caller(), addr)));
        }
        let (_, l) = link.as_mut().expect("made");
        if let Err(e) = l
            .call(Call::Heartbeat, every.max(Duration::from_millis(200)))
            .await
        {
            log::debug!("heartbeat to the controller (node {leader}): {e}");
        }
    }
}

/// On the controller, every `every`: leaderships whose preferred replica
/// (the first) is live and in sync again go back to it, so that leaders
/// stay spread as the replicas were placed (KRaft's controller balances
/// so too, auto.leader.rebalance.enable).
async fn balancing(inner: Arc<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if !inner.is_controller() {
            continue;
        }
        let cat = inner.catalogs.borrow().clone();
        let moved = crate::replication::imbalanced(&cat);
        if moved.is_empty() {
            continue;
        }
        log::info!(
            "balancing leaders: {} partitions back to their preferred replicas",
            moved.len()
        );
        let cmd = Command::ElectLeaders {
            partitions: Some(moved),
            unclean: false,
        };
        if let Err(e) = inner.propose(cmd).await {
            log::warn!("balancing leaders: {e}");
        }
    }
}

/// How many partitions one round of replica balancing moves at most.
const BALANCING_MOVES: usize = 4;

/// On the controller, every `every` with no reassignment under way:
/// up to `BALANCING_MOVES` replicas move from the live nodes keeping the
/// most to those keeping the fewest (`reassign::spread`), as moves that
/// keep every copy until the new one is in sync.
async fn replica_balancing(inner: Arc<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if !inner.is_controller() {
            continue;
        }
        let cat = inner.catalogs.borrow().clone();
        let moves = crate::replication::reassign::spread(&cat, BALANCING_MOVES);
        if moves.is_empty() {
            continue;
        }
        log::info!(
            "balancing replicas: moving {}",
            moves
                .iter()
                .map(|(t, p, to)| format!("{t}-{p} to {to:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Err(e) = inner.propose(Command::Reassign(moves)).await {
            log::warn!("balancing replicas: {e}");
        }
    }
}

/// On the controller: fences registered nodes not heard within the
/// session timeout, and lifts the fence of those heard again.
///
/// Silence is counted only while this loop runs on time: a controller
/// stopped (SIGSTOP, a stall of its machine) finds every other node
/// unheard when it resumes, a silence of its own, and fencing them all
/// would move every partition to it alone. A tick that comes more than
/// half a session late gives every node a new session from now, as a
/// controller that has just taken over does.
async fn fencing(inner: Arc<Inner>) {
    const TICK: Duration = Duration::from_millis(250);
    let timeout = inner.config.session_timeout;
    let mut leading_since: Option<Instant> = None;
    let mut last_tick = Instant::now();
    loop {
        tokio::time::sleep(TICK).await;
        let gap = last_tick.elapsed();
        last_tick = Instant::now();
        if !inner.is_controller() {
            leading_since = None;
            continue;
        }
        if gap > TICK + timeout / 2 {
            log::warn!(
                "the fencing check ran {} ms apart (this node was stopped or starved): \
                 every node's session starts again",
                gap.as_millis()
            );
            leading_since = Some(last_tick);
        }
        let since = *leading_since.get_or_insert_with(Instant::now);
        let catalog = inner.catalogs.borrow().clone();
        let now = Instant::now();
        let changes: Vec<Command> = {
            let heard = inner.heard.lock().expect("not poisoned");
            catalog
                .nodes
                .values()
                // A node stopping keeps its fence until it registers anew.
                .filter(|n| !(n.stopping && n.fenced))
                .filter_map(|n| {
                    let last = heard.get(&n.id).copied().unwrap_or(since).max(since);
                    let silent = now.duration_since(last) > timeout && n.id as u64 != inner.id;
                    (silent != n.fenced).then_some(Command::Fence {
                        node: n.id,
                        fenced: silent,
                    })
                })
                .collect()
        };
        for cmd in changes {
            if let Command::Fence { node, fenced } = &cmd {
                match fenced {
                    true => log::warn!(
                        "fencing node {node}: not heard for {} ms",
                        timeout.as_millis()
                    ),
                    false => log::info!("node {node} is heard again: lifting its fence"),
                }
            }
            if let Err(e) = inner.propose(cmd).await {
                log::warn!("changing a node's fence: {e}");
            }
        }
    }
}
