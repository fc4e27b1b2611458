//! Failed sign-ins slow their source down: each failure from an address
//! doubles the wait before the next failure from it is answered (from
//! 100 ms up to 5 s), and a quiet minute or a success forgets it. Only the
//! failing client waits (its answer is delayed on its own task); others
//! are served meanwhile.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_millis(100);
const MOST: Duration = Duration::from_secs(5);
const FORGET_AFTER: Duration = Duration::from_secs(60);
/// Addresses remembered at most per shard (the oldest go first).
const MAX_ADDRESSES: usize = 10_000;

#[derive(Default)]
pub struct Throttle {
    failures: RefCell<HashMap<String, (u32, Instant)>>,
}

impl Throttle {
    /// Counts a failure from `host` and says how long its answer waits.
    pub fn failed(&self, host: &str) -> Duration {
        let now = Instant::now();
        let mut f = self.failures.borrow_mut();
        if f.len() >= MAX_ADDRESSES {
            f.retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
            if f.len() >= MAX_ADDRESSES {
                f.clear();
            }
        }
        let e = f.entry(host.to_string()).or_insert((0, now));
        if now.duration_since(e.1) >= FORGET_AFTER {
            e.0 = 0;
        }
        e.0 = e.0.saturating_add(1);
        e.1 = now;
        FIRST.saturating_mul(1u32 << (e.0 - 1).min(10)).min(MOST)
    }

    /// A sign-in from `host` worked: its count starts again.
    pub fn succeeded(&self, host: &str) {
        self.failures.borrow_mut().remove(host);
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
    }
}
