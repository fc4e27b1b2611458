//! The bookkeeping of flushes in flight, without I/O. Flushes land in any
//! order but count in the order they were prepared: what one made durable
//! (the segments' durable sizes, the high watermark) is applied once it
//! and every flush before it have landed. A failed flush voids the ones
//! prepared after it (the retry writes their bytes again).
//!
//! Invariants, asserted where they could break: flights apply in the order
//! prepared; the high watermark never goes down and never passes the log
//! end (`LogState::apply`); a flight lands or fails once.

use std::collections::VecDeque;

use futures::channel::oneshot;

use super::LogState;

/// A flush whose write may be in flight.
pub(super) struct Flight {
    pub(super) id: u64,
    /// The log end when it was prepared: the high watermark once applied.
    pub(super) target: i64,
    /// Each segment it writes, and the end it writes to.
    pub(super) ends: Vec<(i64, u64)>,
    landed: bool,
    /// Prepared before a flush that failed: landing applies nothing.
    pub(super) void: bool,
    /// A retry after a failure: applying it clears the failure.
    pub(super) clears_failure: bool,
}

#[derive(Default)]
pub(super) struct Flights {
    next_id: u64,
    queue: VecDeque<Flight>,
    /// Flushes waiting until no flight prepared before theirs is in the
    /// queue: (their id, the signal).
    waiting: Vec<(u64, oneshot::Sender<()>)>,
    /// Whether the last flush was prepared while another was in flight
    /// (the next one pads too: under load, flushes follow each other).
    overlapped: bool,
}

/// What preparing a flush needs to know before it builds its writes.
pub(super) struct Takeoff {
    /// Another flush is in flight.
    pub(super) in_flight: bool,
    /// This flush ends in padding, so the next one shares no block with it.
    pub(super) pad: bool,
}

impl Flights {
    /// Whether the next flush pads, and whether one is in flight now.
    pub(super) fn takeoff(&mut self) -> Takeoff {
        let in_flight = !self.queue.is_empty();
        let pad = in_flight || self.overlapped;
        self.overlapped = in_flight;
        Takeoff { in_flight, pad }
    }

    /// Queues a flush that makes the log durable up to `target` once
    /// applied, writing each segment of `ends` to its end; returns its id.
    pub(super) fn prepare(&mut self, target: i64, ends: Vec<(i64, u64)>, retry: bool) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(last) = self.queue.back() {
            assert!(
                last.void || target >= last.target,
                "flight {id} targets {target}, before flight {} at {}",
                last.id,
                last.target
            );
        }
        self.queue.push_back(Flight {
            id,
            target,
            ends,
            landed: false,
            void: false,
            clears_failure: retry,
        });
        id
    }

    /// The flights in the queue (id, landed, void) and the flushes
    /// waiting, for a test that must say why it hangs.
    #[cfg(test)]
    pub(super) fn describe(&self) -> String {
        let q: Vec<_> = self
            .queue
            .iter()
            .map(|f| (f.id, f.landed, f.void))
            .collect();
        let w: Vec<_> = self.waiting.iter().map(|(id, _)| *id).collect();
        format!("flights {q:?} waiting {w:?} next {}", self.next_id)
    }

    /// The id the next flush will get: waiting for every flight before it
    /// is waiting until none is in flight.
    pub(super) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// A signal for when every flight prepared before `id` has landed or
    /// failed; `None` when none is in flight already.
    pub(super) fn wait_for_earlier(&mut self, id: u64) -> Option<oneshot::Receiver<()>> {
        if self.queue.front().is_none_or(|f| f.id >= id) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.waiting.push((id, tx));
        Some(rx)
    }

    /// A flight's writes landed: it, and the landed flights after it, are
    /// applied once nothing before them is in flight.
    pub(super) fn landed(&mut self, id: u64, st: &mut LogState) {
        let f = self
            .queue
            .iter_mut()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("flight {id} landed but is not in flight"));
        assert!(!f.landed, "flight {id} landed twice");
        f.landed = true;
        self.settle(st);
    }

    /// A flight's write failed: it is dropped, and the flights prepared
    /// after it apply nothing when they land.
    pub(super) fn failed(&mut self, id: u64, st: &mut LogState) {
        let before = self.queue.len();
        self.queue.retain(|f| f.id != id);
        assert_eq!(before, self.queue.len() + 1, "flight {id} failed twice");
        for f in self.queue.iter_mut().filter(|f| f.id > id) {
            f.void = true;
        }
        self.settle(st);
    }

    /// Applies the landed flights at the front of the queue (nothing
    /// before them is in flight any more), then wakes the flushes that no
    /// earlier flight holds back.
    fn settle(&mut self, st: &mut LogState) {
        while self.queue.front().is_some_and(|f| f.landed) {
            let f = self.queue.pop_front().expect("a flight");
            // Flights apply in the order they were prepared.
            assert!(
                self.queue.front().is_none_or(|next| next.id > f.id),
                "flight {} applied before an earlier one",
                f.id
            );
            st.apply(&f);
        }
        let front = self.queue.front().map_or(u64::MAX, |f| f.id);
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].0 <= front {
                let (_, tx) = self.waiting.swap_remove(i);
                let _ = tx.send(());
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A log's state with no segments (flights' `ends` then change none):
    /// what is left is the high watermark and the failure.
    fn state(next_offset: i64) -> LogState {
        LogState {
            segments: BTreeMap::new(),
            log_start: 0,
            next_offset,
            durable_offset: 0,
            replicated_hw: None,
            follows_durable: false,
            failed: None,
            write_out_failed: false,
        }
    }

    #[test]
    fn flights_landing_out_of_order_apply_in_order() {
        let mut st = state(30);
        let mut f = Flights::default();
        let a = f.prepare(10, vec![], false);
        let b = f.prepare(20, vec![], false);
        let c = f.prepare(30, vec![], false);
        // The last lands first: nothing moves while earlier ones fly.
        f.landed(c, &mut st);
        assert_eq!(st.durable_offset, 0);
        f.landed(b, &mut st);
        assert_eq!(st.durable_offset, 0);
        // The first lands: all three apply, the watermark is the last's.
        f.landed(a, &mut st);
        assert_eq!(st.durable_offset, 30);
        assert!(f.wait_for_earlier(f.next_id()).is_none(), "none in flight");
    }

    #[test]
    fn a_failure_voids_the_flights_after_it_and_a_retry_clears_it() {
        let mut st = state(20);
        let mut f = Flights::default();
        let a = f.prepare(10, vec![], false);
        let b = f.prepare(20, vec![], false);
        st.failed = Some("disk full".into());
        f.failed(a, &mut st);
        // b's bytes follow a's, which never landed: b counts for nothing.
        f.landed(b, &mut st);
        assert_eq!(st.durable_offset, 0);
        assert!(st.failed.is_some());
        let retry = f.prepare(20, vec![], true);
        f.landed(retry, &mut st);
        assert_eq!(st.durable_offset, 20);
        assert!(st.failed.is_none(), "a retry that lands clears the failure");
    }

    #[test]
    fn waiters_wake_when_every_earlier_flight_is_down() {
        let mut st = state(20);
        let mut f = Flights::default();
        let a = f.prepare(10, vec![], false);
        let b = f.prepare(20, vec![], false);
        let mut after_a = f.wait_for_earlier(b).expect("a is in flight");
        let mut idle = f.wait_for_earlier(f.next_id()).expect("both in flight");
        f.landed(a, &mut st);
        assert_eq!(after_a.try_recv(), Ok(Some(())));
        assert_eq!(idle.try_recv(), Ok(None), "b still flies");
        f.landed(b, &mut st);
        assert_eq!(idle.try_recv(), Ok(Some(())));
    }

    #[test]
    fn padding_follows_overlap() {
        let mut f = Flights::default();
        let t = f.takeoff();
        assert!(!t.in_flight && !t.pad);
        f.prepare(1, vec![], false);
        let t = f.takeoff();
        assert!(t.in_flight && t.pad, "prepared while another flies");
        let mut st = state(2);
        f.prepare(2, vec![], false);
        f.landed(0, &mut st);
        f.landed(1, &mut st);
        // Nothing in flight, but the last one overlapped: pad once more.
        let t = f.takeoff();
        assert!(!t.in_flight && t.pad);
        let t = f.takeoff();
        assert!(!t.pad);
    }

    /// Random interleavings of prepare, land and fail: the watermark never
    /// goes down, never passes the log end, and after everything lands it
    /// is the last good flight's target.
    #[test]
    fn any_order_of_landings_keeps_the_watermark_monotonic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..500 {
            let mut st = state(0);
            let mut f = Flights::default();
            let mut flying: Vec<u64> = Vec::new();
            let mut last_hw = 0;
            for _ in 0..40 {
                match next() % 4 {
                    0 | 1 => {
                        st.next_offset += (next() % 5) as i64;
                        let retry = st.failed.is_some();
                        flying.push(f.prepare(st.next_offset, vec![], retry));
                    }
                    2 if !flying.is_empty() => {
                        let id = flying.swap_remove((next() as usize) % flying.len());
                        f.landed(id, &mut st);
                    }
                    3 if !flying.is_empty() && next() % 4 == 0 => {
                        let id = flying.swap_remove((next() as usize) % flying.len());
                        st.failed = Some("write failed".into());
                        f.failed(id, &mut st);
                    }
                    _ => {}
                }
                assert!(st.durable_offset >= last_hw);
                assert!(st.durable_offset <= st.next_offset);
                last_hw = st.durable_offset;
            }
            for id in flying.drain(..) {
                f.landed(id, &mut st);
            }
            if st.failed.is_none() {
                assert!(f.wait_for_earlier(f.next_id()).is_none());
            }
        }
    }
}
