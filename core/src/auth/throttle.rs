//! Failed sign-ins slow their source down: each failure from an address
//! doubles the wait before the failure is answered (from 100 ms up to
//! 5 s), and the next attempt from that address is checked only after
//! that wait; a quiet minute or a success forgets it. At most
//! `MAX_AT_ONCE` sign-ins from one address are checked at a time, so
//! guessing in parallel costs the node no more hashing. Only the failing
//! client waits (on its own task); others are served meanwhile.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_millis(100);
const MOST: Duration = Duration::from_secs(5);
const FORGET_AFTER: Duration = Duration::from_secs(60);
/// Addresses remembered at most per shard (the oldest go first).
const MAX_ADDRESSES: usize = 10_000;
/// Sign-ins checked at once from one address.
pub const MAX_AT_ONCE: usize = 4;

/// One address's failures: how many, the last one's time and its wait.
struct Failures {
    count: u32,
    at: Instant,
    wait: Duration,
}

#[derive(Default)]
pub struct Throttle {
    failures: RefCell<HashMap<String, Failures>>,
    /// Failed sign-ins since start (for `/metrics`).
    failed_total: std::cell::Cell<u64>,
    /// Per address: sign-ins being checked.
    in_flight: RefCell<HashMap<String, usize>>,
}

/// A sign-in being checked; dropping it ends it.
pub struct Attempt<'a> {
    throttle: &'a Throttle,
    host: String,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let mut f = self.throttle.in_flight.borrow_mut();
        if let Some(n) = f.get_mut(&self.host) {
            *n -= 1;
            if *n == 0 {
                f.remove(&self.host);
            }
        }
    }
}

impl Throttle {
    /// Starts checking a sign-in from `host`, unless `MAX_AT_ONCE` are.
    pub fn begin(&self, host: &str) -> Option<Attempt<'_>> {
        let mut f = self.in_flight.borrow_mut();
        let n = f.entry(host.to_string()).or_default();
        if *n >= MAX_AT_ONCE {
            return None;
        }
        *n += 1;
        Some(Attempt {
            throttle: self,
            host: host.to_string(),
        })
    }

    /// How long a sign-in from `host` waits before it is checked: what is
    /// left of its last failure's wait.
    pub fn penalty(&self, host: &str) -> Duration {
        self.failures
            .borrow()
            .get(host)
            .map_or(Duration::ZERO, |f| f.wait.saturating_sub(f.at.elapsed()))
    }

    /// Counts a failure from `host` and says how long its answer waits.
    pub fn failed(&self, host: &str) -> Duration {
        self.failed_total.set(self.failed_total.get() + 1);
        let now = Instant::now();
        let mut all = self.failures.borrow_mut();
        if all.len() >= MAX_ADDRESSES {
            all.retain(|_, f| now.duration_since(f.at) < FORGET_AFTER);
            if all.len() >= MAX_ADDRESSES {
                all.clear();
            }
        }
        let f = all.entry(host.to_string()).or_insert(Failures {
            count: 0,
            at: now,
            wait: Duration::ZERO,
        });
        if now.duration_since(f.at) >= FORGET_AFTER {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.at = now;
        f.wait = FIRST
            .saturating_mul(1u32 << (f.count - 1).min(10))
            .min(MOST);
        f.wait
    }

    /// A sign-in from `host` worked: its count starts again.
    pub fn succeeded(&self, host: &str) {
        self.failures.borrow_mut().remove(host);
    }

    /// Failed sign-ins since start.
    pub fn failed_total(&self) -> u64 {
        self.failed_total.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_doubles_the_wait_up_to_a_bound() {
        let t = Throttle::default();
        let waits: Vec<_> = (0..8).map(|_| t.failed("/10.0.0.1")).collect();
        assert_eq!(waits[0], Duration::from_millis(100));
        assert_eq!(waits[1], Duration::from_millis(200));
        assert_eq!(waits[3], Duration::from_millis(800));
        assert_eq!(waits[7], MOST);
        // Another address is not slowed by these.
        assert_eq!(t.failed("/10.0.0.2"), FIRST);
        t.succeeded("/10.0.0.1");
        assert_eq!(t.failed("/10.0.0.1"), FIRST);
        assert!(t.penalty("/10.0.0.1") > Duration::ZERO);
        assert_eq!(t.penalty("/10.0.0.9"), Duration::ZERO);
    }

    #[test]
    fn a_few_sign_ins_at_once_per_address() {
        let t = Throttle::default();
        let held: Vec<_> = (0..MAX_AT_ONCE).map(|_| t.begin("/a").unwrap()).collect();
        assert!(t.begin("/a").is_none());
        assert!(t.begin("/b").is_some());
        drop(held);
        assert!(t.begin("/a").is_some());
    }
}
