//! A replicated partition's role on the node hosting a copy: leading
//! (tracking each follower's durable end, moving the high watermark,
//! asking the quorum to shrink or grow the ISR) or following (the
//! fetcher in `net` fetches for it). Pure bookkeeping: the partition
//! (`crate::partition`) applies its answers to the log.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::catalog::TopicMeta;
use crate::error::{ErrorCode, KafkaError};

/// What this node is for one partition, as the catalog says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not replicated (a single node's partition, or a cluster topic
    /// kept on one replica per partition that no reassignment moved): the
    /// log's durable end is the high watermark.
    Alone,
    Leader(Leading),
    /// Fetching from `leader`, which leads in `epoch`.
    Follower {
        leader: i32,
        epoch: i32,
    },
    /// A replica with no leader to follow (all in-sync replicas fenced).
    Leaderless {
        epoch: i32,
    },
}

/// The leader's view of its followers in one leader epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leading {
    pub me: i32,
    pub epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// `min.insync.replicas`, capped by the replicas.
    pub min_isr: usize,
    /// Each follower's progress in this epoch (none until it fetches).
    pub followers: BTreeMap<i32, Progress>,
    /// An ISR change wanted and not yet seen applied: counted in the high
    /// watermark from the moment it is wanted (Kafka's maximal ISR).
    pub altering: Option<Vec<i32>>,
    /// Whether `altering` has been asked of the quorum.
    pub asked: bool,
    /// After a refused change, nothing is asked again before this
    /// (`refused`): a fenced follower fetching, for one, is refused until
    /// the controller hears it again.
    pub ask_again_at: Option<Instant>,
    /// The log end when this node became leader: a follower joins the
    /// ISR only once it has reached it (Kafka's leader epoch start).
    pub epoch_start: i64,
}

/// One follower as its fetches tell: it holds everything below `end`
/// durably (a follower fetches an offset only once all before it is on
/// its disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub end: Option<i64>,
    /// When it last had everything the leader had (Kafka's
    /// lastCaughtUpTime): an ISR member behind longer than
    /// `replica.lag.time.max.ms` leaves.
    pub caught_up: Instant,
    /// The leader's log end at its previous fetch, and when.
    last_fetch_leader_end: i64,
    last_fetch: Instant,
}

impl Role {
    /// The role the catalog gives node `me` for partition `p` of `t`.
    pub fn from_catalog(t: &TopicMeta, p: i32, me: i32) -> Role {
        let Some(r) = t.replicas_of(p) else {
            return Role::Alone;
        };
        let leader = t
            .nodes
            .get(p as usize)
            .copied()
            .unwrap_or(crate::catalog::NO_LEADER);
        if leader == crate::catalog::NO_LEADER {
            return Role::Leaderless {
                epoch: r.leader_epoch,
            };
        }
        if leader != me {
            return Role::Follower {
                leader,
                epoch: r.leader_epoch,
            };
        }
        let min = t.config.min_insync_replicas.max(1) as usize;
        Role::Leader(Leading {
            me,
            epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            // Capped by the move's target while one is under way (its
            // replicas being added are not yet copies to count on).
            min_isr: min.min(r.target().len()),
            followers: BTreeMap::new(),
            altering: None,
            asked: false,
            ask_again_at: None,
            epoch_start: 0,
        })
    }

    /// Whether this node serves writes (it leads, or the partition is not
    /// replicated).
    pub fn leads(&self) -> bool {
        matches!(self, Role::Alone | Role::Leader(_))
    }

    /// The leader epoch (0 for a partition not replicated).
    pub fn epoch(&self) -> i32 {
        match self {
            Role::Alone => crate::leader_epoch::CURRENT,
            Role::Leader(l) => l.epoch,
            Role::Follower { epoch, .. } | Role::Leaderless { epoch } => *epoch,
        }
    }
}

impl Leading {
    /// Carries what is still true into the catalog's newer view of the
    /// same leadership (`next`: same epoch, a new ISR or partition epoch).
    pub fn update(&mut self, next: Leading) {
        debug_assert_eq!(self.epoch, next.epoch);
        self.partition_epoch = next.partition_epoch;
        self.replicas = next.replicas;
        self.isr = next.isr;
        self.min_isr = next.min_isr;
        self.altering = None;
        self.asked = false;
    }

    /// Starts leading at log end `log_end`: every in-sync follower counts
    /// as caught up now (Kafka's lastCaughtUpTime at election).
    pub fn start(&mut self, log_end: i64, now: Instant) {
        self.epoch_start = log_end;
        for &n in self.isr.iter().filter(|&&n| n != self.me) {
            self.followers.insert(n, Progress::new(now));
        }
    }

    /// A follower's fetch at `offset` (everything below it is durable
    /// there), with the leader's log end `log_end` and high watermark `hw`
    /// now. Refused from a node that holds no replica. A follower out of
    /// the ISR that has reached the high watermark and this epoch's start
    /// is wanted back in at once (Kafka's maybeExpandIsr): judged at its
    /// fetch, since under load the high watermark moves on between two
    /// looks.
    pub fn fetched(
        &mut self,
        node: i32,
        offset: i64,
        log_end: i64,
        hw: i64,
        now: Instant,
    ) -> Result<(), KafkaError> {
        if !self.replicas.contains(&node) || node == self.me {
            return Err(KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!("node {node} keeps no replica of this partition"),
            ));
        }
        let p = self
            .followers
            .entry(node)
            .or_insert_with(|| Progress::new(now));
        if offset >= log_end {
            p.caught_up = now;
        } else if offset >= p.last_fetch_leader_end {
            p.caught_up = p.caught_up.max(p.last_fetch);
        }
        p.end = Some(offset);
        p.last_fetch_leader_end = log_end;
        p.last_fetch = now;
        let joins = !self.isr.contains(&node) && offset >= hw && offset >= self.epoch_start;
        if joins && self.altering.is_none() {
            let mut isr = self.isr.clone();
            isr.push(node);
            isr.sort_unstable();
            self.altering = Some(isr);
            self.asked = false;
        }
        Ok(())
    }

    /// The high watermark the ISR allows with the leader's durable end
    /// `durable`: the least durable end of the in-sync replicas; `None`
    /// while an in-sync follower has not fetched in this epoch.
    ///
    /// Counted over the ISR with the members being added (Kafka's maximal
    /// ISR): once the quorum adds one, the high watermark is already
    /// within what it holds.
    pub fn high_watermark(&self, durable: i64) -> Option<i64> {
        let joining = self.altering.iter().flatten();
        let mut hw = durable;
        for n in self.isr.iter().chain(joining).filter(|&&n| n != self.me) {
            hw = hw.min(self.followers.get(n)?.end?);
        }
        Some(hw)
    }

    /// Whether an acks=all produce may be taken now (Kafka's check before
    /// the append): enough replicas in sync.
    pub fn enough_in_sync(&self) -> bool {
        self.isr.len() >= self.min_isr
    }

    /// The ISR this leader should ask the quorum for now, if any: one
    /// wanted at a follower's fetch (`fetched`) and not asked yet, or,
    /// with none wanted, the ISR without the followers behind longer than
    /// `lag`. Marks it asked.
    pub fn isr_to_ask(&mut self, lag: Duration, now: Instant) -> Option<Vec<i32>> {
        if self.ask_again_at.is_some_and(|at| now < at) {
            return None;
        }
        match (&self.altering, self.asked) {
            (Some(_), true) => return None,
            (Some(isr), false) => {
                self.asked = true;
                return Some(isr.clone());
            }
            (None, _) => {}
        }
        let isr = self.shrunk_isr(lag, now)?;
        self.altering = Some(isr.clone());
        self.asked = true;
        Some(isr)
    }

    /// The quorum refused the change asked (or could not be reached): it
    /// is no longer wanted, and nothing is asked again for `backoff`.
    pub fn refused(&mut self, now: Instant, backoff: Duration) {
        self.altering = None;
        self.asked = false;
        self.ask_again_at = Some(now + backoff);
    }

    /// The ISR without the followers not caught up for longer than `lag`,
    /// if any is.
    fn shrunk_isr(&self, lag: Duration, now: Instant) -> Option<Vec<i32>> {
        let mut isr: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|&n| {
                n == self.me
                    || self
                        .followers
                        .get(&n)
                        .is_some_and(|p| now.duration_since(p.caught_up) <= lag)
            })
            .collect();
        isr.sort_unstable();
        let mut have = self.isr.clone();
        have.sort_unstable();
        (isr != have).then_some(isr)
    }
}

impl Progress {
    fn new(now: Instant) -> Progress {
        Progress {
            end: None,
            caught_up: now,
            last_fetch_leader_end: 0,
            last_fetch: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leading() -> Leading {
        Leading {
            me: 1,
            epoch: 3,
            partition_epoch: 5,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            min_isr: 2,
            followers: BTreeMap::new(),
            altering: None,
            asked: false,
            ask_again_at: None,
            epoch_start: 0,
        }
    }

    #[test]
    fn the_high_watermark_waits_for_every_in_sync_follower() {
        let now = Instant::now();
        let mut l = leading();
        l.start(10, now);
        assert_eq!(l.high_watermark(10), None, "nobody fetched yet");
        l.fetched(2, 10, 10, 0, now).unwrap();
        assert_eq!(l.high_watermark(10), None);
        l.fetched(3, 7, 10, 0, now).unwrap();
        assert_eq!(l.high_watermark(12), Some(7));
        l.fetched(3, 12, 12, 7, now).unwrap();
        assert_eq!(l.high_watermark(12), Some(10));
        assert!(l.fetched(4, 0, 12, 10, now).is_err());
    }

    #[test]
    fn a_lagging_follower_leaves_and_a_caught_up_one_joins_at_its_fetch() {
        let t0 = Instant::now();
        let lag = Duration::from_millis(100);
        let mut l = leading();
        l.start(0, t0);
        l.fetched(2, 0, 0, 0, t0).unwrap();
        l.fetched(3, 0, 0, 0, t0).unwrap();
        let t1 = t0 + Duration::from_millis(50);
        l.fetched(2, 0, 5, 0, t1).unwrap(); // behind since now
        l.fetched(3, 5, 5, 0, t1).unwrap();
        assert_eq!(l.isr_to_ask(lag, t1), None);
        let t2 = t0 + Duration::from_millis(200);
        l.fetched(3, 5, 5, 0, t2).unwrap();
        assert_eq!(l.isr_to_ask(lag, t2), Some(vec![1, 3]));
        assert_eq!(l.isr_to_ask(lag, t2), None, "one change at a time");
        l.update(Leading {
            isr: vec![1, 3],
            partition_epoch: 6,
            ..leading()
        });
        // 2 reaches the high watermark at a fetch: wanted back at once, and
        // counted in the high watermark from then on.
        l.fetched(2, 5, 9, 5, t2).unwrap();
        assert_eq!(l.altering, Some(vec![1, 2, 3]));
        assert_eq!(l.high_watermark(9), Some(5));
        assert_eq!(l.isr_to_ask(lag, t2), Some(vec![1, 2, 3]));
        assert_eq!(l.isr_to_ask(lag, t2), None);
        // Refused (2 still fenced, say): not wanted, and not asked again
        // within the backoff even though 2 fetches on.
        l.refused(t2, Duration::from_millis(500));
        assert_eq!(l.altering, None);
        l.fetched(2, 9, 9, 9, t2).unwrap();
        assert_eq!(l.isr_to_ask(lag, t2 + Duration::from_millis(400)), None);
        let t3 = t2 + Duration::from_millis(500);
        assert_eq!(l.isr_to_ask(lag, t3), Some(vec![1, 2, 3]));
    }

    #[test]
    fn min_insync_is_capped_by_the_replicas() {
        let mut l = leading();
        assert!(l.enough_in_sync());
        l.isr = vec![1];
        assert!(!l.enough_in_sync());
    }
}
