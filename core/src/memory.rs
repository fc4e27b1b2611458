//! Memory budgets: the bytes a shard lets requests and answers hold at
//! once. A shard has two (`Shard::request_memory`, `Shard::answer_memory`):
//!
//! - request frames take their announced size when their length arrives
//!   and keep it until their request is answered (Kafka's
//!   `queued.max.request.bytes`, Redpanda's request memory semaphore); a
//!   frame that does not fit waits, unread, so the client's socket fills
//!   and it waits too;
//! - fetch reads take what they read from the partitions' owner's budget
//!   as they read (no more than is free; at least one batch), and keep it
//!   until the last byte is on the client's socket, on whichever shard
//!   holds the connection. A fetch waiting for data holds nothing.
//!
//! Waiters are not served in order: a small request passes a large one
//! that does not fit yet, so one 100 MiB frame cannot hold up every other
//! client's small requests. Every wait has a deadline. Only the budget's
//! own shard waits on it (glommio wakes a task on its own executor); a
//! grant may be given back from any shard.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Instant;

/// Bytes a shard lets one kind of work hold at once.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    /// Taken the most at once since start (for `/metrics`).
    peak: AtomicUsize,
    /// Tasks of the budget's shard waiting for bytes to be given back: all
    /// are woken on each return, and each tries again.
    waiters: Mutex<Vec<Waker>>,
    /// Waits that ran out of time.
    timeouts: AtomicU64,
}

/// A budget at a moment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MemoryReport {
    pub held: usize,
    /// The most held at once since start.
    pub peak: usize,
    pub limit: usize,
    /// Waits for room that ran out of time.
    pub timeouts: u64,
}

/// Bytes taken from a budget, given back when dropped.
#[derive(Debug)]
pub struct Grant {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            waiters: Mutex::new(Vec::new()),
            timeouts: AtomicU64::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// What `/stats` and `/metrics` show of it.
    pub fn report(&self) -> MemoryReport {
        MemoryReport {
            held: self.used(),
            peak: self.peak(),
            limit: self.limit,
            timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }

    /// Takes as much of `want` as `fits` allows of what is free now.
    fn take_with(self: &Arc<Self>, want: usize, fits: impl Fn(usize, usize) -> usize) -> Grant {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let bytes = fits(want, self.limit.saturating_sub(used));
            match self.used.compare_exchange_weak(
                used,
                used + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(used + bytes, Ordering::Relaxed);
                    return Grant {
                        budget: self.clone(),
                        bytes,
                    };
                }
                Err(now) => used = now,
            }
        }
    }

    /// `bytes` now, if they fit.
    pub fn try_take(self: &Arc<Self>, bytes: usize) -> Option<Grant> {
        let g = self.take_with(bytes, |want, free| if want <= free { want } else { 0 });
        (g.bytes == bytes).then_some(g)
    }

    /// As much of `want` as is free now (possibly nothing).
    pub fn take_up_to(self: &Arc<Self>, want: usize) -> Grant {
        self.take_with(want, usize::min)
    }

    /// Counts `bytes` held whether they fit or not (a read's first batch
    /// beyond what was free).
    fn count_anyway(&self, bytes: usize) {
        let used = self.used.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(used, Ordering::Relaxed);
    }

    /// `bytes`, waiting until they fit or `deadline` passes (then `None`).
    /// More than the whole budget never fits: the caller refuses it first.
    pub async fn take(self: &Arc<Self>, bytes: usize, deadline: Instant) -> Option<Grant> {
        if let Some(g) = self.try_take(bytes) {
            return Some(g);
        }
        self.wait_until(deadline, |b| b.try_take(bytes)).await
    }

    async fn wait_until(
        self: &Arc<Self>,
        deadline: Instant,
        mut attempt: impl FnMut(&Arc<Self>) -> Option<Grant>,
    ) -> Option<Grant> {
        let mut timer = Box::pin(glommio::timer::sleep(
            deadline.saturating_duration_since(Instant::now()),
        ));
        let got = std::future::poll_fn(|cx| {
            if let Some(g) = attempt(self) {
                return Poll::Ready(Some(g));
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            self.waiters
                .lock()
                .expect("not poisoned")
                .push(cx.waker().clone());
            // Given back between the attempt and the push: try again.
            if let Some(g) = attempt(self) {
                return Poll::Ready(Some(g));
            }
            Poll::Pending
        })
        .await;
        if got.is_none() {
            self.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        got
    }

    fn give_back(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        let waiters = std::mem::take(&mut *self.waiters.lock().expect("not poisoned"));
        for w in waiters {
            w.wake();
        }
    }
}

impl Grant {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes the grant `bytes` (what a read turned out to hold): gives
    /// back the rest, or takes what it read beyond (its first batch).
    pub fn resize_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.budget.give_back(self.bytes - bytes);
        } else if bytes > self.bytes {
            self.budget.count_anyway(bytes - self.bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run<F: Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        glommio::LocalExecutorBuilder::default()
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    /// Lets the other tasks run once.
    async fn yield_once() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    #[test]
    fn grants_come_back_when_dropped_and_shrunk() {
        run(|| async {
            let b = MemoryBudget::new(100);
            let mut g = b.try_take(60).unwrap();
            assert!(b.try_take(50).is_none());
            assert_eq!(b.take_up_to(50).bytes(), 40);
            assert_eq!(b.used(), 60);
            g.resize_to(10);
            assert_eq!(b.used(), 10);
            // A first batch larger than what was free is held all the same.
            g.resize_to(120);
            assert_eq!(b.used(), 120);
            drop(g);
            assert_eq!(b.used(), 0);
            assert_eq!(b.peak(), 120);
        });
    }

    /// A small request passes a large one waiting for room; the large one
    /// gets its bytes once they come back; a wait past its deadline ends.
    #[test]
    fn small_takes_pass_large_waiters_and_waits_end_at_deadlines() {
        run(|| async {
            let b = MemoryBudget::new(100);
            let held = b.try_take(70).unwrap();
            let far = Instant::now() + Duration::from_secs(30);
            let large = glommio::spawn_local({
                let b = b.clone();
                async move { b.take(80, far).await.map(|g| g.bytes()) }
            })
            .detach();
            while b.waiters.lock().unwrap().is_empty() {
                yield_once().await;
            }
            let small = b.take(20, far).await.expect("a small take fits at once");
            assert_eq!(b.used(), 90);
            drop(small);
            drop(held);
            assert_eq!(large.await.flatten(), Some(80));
            let hog = b.try_take(100).unwrap();
            let soon = Instant::now() + Duration::from_millis(20);
            assert!(b.take(1, soon).await.is_none());
            assert_eq!(b.report().timeouts, 1);
            drop(hog);
            assert_eq!(b.take_up_to(500).bytes(), 100);
        });
    }
}
