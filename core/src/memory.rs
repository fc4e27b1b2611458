//! Memory budgets: the bytes a shard lets requests and answers hold at
//! once. A shard has two (`Shard::request_memory`, `Shard::answer_memory`):
//!
//! - request frames take their announced size when their length arrives
//!   and keep it until their request is answered (Kafka's
//!   `queued.max.request.bytes`, Redpanda's request memory semaphore); a
//!   frame that does not fit waits, unread, so the client's socket fills
//!   and it waits too;
//! - fetch answers take what they may read before reading and keep what
//!   they read until the last byte is on the socket.
//!
//! Waiters are not served in order: a small request passes a large one
//! that does not fit yet, so one 100 MiB frame cannot hold up every other
//! client's small requests. Every wait has a deadline.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

/// Bytes a shard lets one kind of work hold at once.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: Cell<usize>,
    /// Taken the most at once since start (for `/metrics`).
    peak: Cell<usize>,
    /// Tasks waiting for bytes to be given back: all are woken on each
    /// return, and each tries again.
    waiters: RefCell<Vec<Waker>>,
    /// Waits that ran out of time.
    pub timeouts: Cell<u64>,
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
    budget: Rc<MemoryBudget>,
    bytes: usize,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Rc<MemoryBudget> {
        Rc::new(MemoryBudget {
            limit,
            used: Cell::new(0),
            peak: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
            timeouts: Cell::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.get()
    }

    pub fn peak(&self) -> usize {
        self.peak.get()
    }

    /// What `/stats` and `/metrics` show of it.
    pub fn report(&self) -> MemoryReport {
        MemoryReport {
            held: self.used.get(),
            peak: self.peak.get(),
            limit: self.limit,
            timeouts: self.timeouts.get(),
        }
    }

    fn take_now(self: &Rc<Self>, bytes: usize) -> Grant {
        let used = self.used.get() + bytes;
        self.used.set(used);
        self.peak.set(self.peak.get().max(used));
        Grant {
            budget: self.clone(),
            bytes,
        }
    }

    /// `bytes` now, if they fit.
    pub fn try_take(self: &Rc<Self>, bytes: usize) -> Option<Grant> {
        (self.used.get() + bytes <= self.limit).then(|| self.take_now(bytes))
    }

    /// As much of `want` as is free now (possibly nothing).
    pub fn take_up_to(self: &Rc<Self>, want: usize) -> Grant {
        let free = self.limit.saturating_sub(self.used.get());
        self.take_now(want.min(free))
    }

    /// `bytes`, waiting until they fit or `deadline` passes (then `None`).
    /// More than the whole budget never fits: the caller refuses it first.
    pub async fn take(self: &Rc<Self>, bytes: usize, deadline: Instant) -> Option<Grant> {
        if let Some(g) = self.try_take(bytes) {
            return Some(g);
        }
        self.wait_until(deadline, |b| b.try_take(bytes)).await
    }

    /// At least one byte (as much of `want` as is free), waiting until some
    /// is free or `deadline` passes (then `None`).
    pub async fn take_some(self: &Rc<Self>, want: usize, deadline: Instant) -> Option<Grant> {
        let some = |b: &Rc<Self>| {
            let g = b.take_up_to(want);
            (g.bytes > 0 || want == 0).then_some(g)
        };
        if let Some(g) = some(self) {
            return Some(g);
        }
        self.wait_until(deadline, some).await
    }

    async fn wait_until(
        self: &Rc<Self>,
        deadline: Instant,
        mut attempt: impl FnMut(&Rc<Self>) -> Option<Grant>,
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
            self.waiters.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await;
        if got.is_none() {
            self.timeouts.set(self.timeouts.get() + 1);
        }
        got
    }

    fn give_back(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.used.set(self.used.get() - bytes);
        for w in self.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

impl Grant {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives back all but `bytes` (what an answer turned out to hold).
    pub fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.budget.give_back(self.bytes - bytes);
            self.bytes = bytes;
        }
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
            g.shrink_to(10);
            assert_eq!(b.used(), 10);
            drop(g);
            assert_eq!(b.used(), 0);
            assert_eq!(b.peak(), 100);
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
            while b.waiters.borrow().is_empty() {
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
            assert!(b.take_some(10, soon).await.is_none());
            assert_eq!(b.timeouts.get(), 2);
            drop(hog);
            assert_eq!(b.take_some(500, soon).await.unwrap().bytes(), 100);
        });
    }
}
