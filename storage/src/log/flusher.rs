//! The log's own flushers and the durable watermark they publish.
//!
//! An append only stages bytes. `durable_past` (or `flush_soon` for a
//! producer that does not wait) starts a flusher task unless
//! `max_in_flight` run; a flusher flushes until nothing is left unwritten,
//! so one durable write covers every batch appended meanwhile (group
//! commit), and a second flusher writes what arrives while the first
//! one's write is in flight. After each flush the log publishes its durable
//! end: the appenders it passed are answered, the followers'
//! fetches `watch_durable` are woken if it moved, and the readers
//! `watch`ing if the high watermark moved (the same event for an
//! unreplicated log; a replicated log's moves with `set_high_watermark`). While flushes are small a zero-writing
//! task of the log's own keeps zeros ahead of the end (`ahead`).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;

use futures::channel::oneshot;

use super::{FlushTimes, PartitionLog};
use crate::StorageError;

/// Where a log's flush times go (the shard's histograms).
type FlushObserver = Box<dyn Fn(FlushTimes)>;

/// An appender waiting for the high watermark to pass its last offset.
pub(super) struct AckWaiter {
    pub(super) last_offset: i64,
    tx: oneshot::Sender<Result<(), StorageError>>,
}

/// The flusher tasks' bookkeeping and the watermark's waiters.
pub(super) struct Flushers {
    /// Flusher tasks running (their writes may be in flight together).
    pub(super) running: Cell<usize>,
    /// The most flusher tasks at once (`set_flushing`).
    max_in_flight: Cell<usize>,
    /// Whether the zero-writing task runs.
    pub(super) zero_task: Cell<bool>,
    pub(super) acks: RefCell<Vec<AckWaiter>>,
    /// Readers waiting for the high watermark to move.
    watchers: RefCell<Vec<oneshot::Sender<()>>>,
    /// The high watermark readers were last woken for (a flush that lands
    /// before an earlier one moves nothing, and wakes no one).
    announced: Cell<i64>,
    /// Fetches (a leader's followers) waiting for the durable end to move.
    durable_watchers: RefCell<Vec<oneshot::Sender<()>>>,
    /// The durable end those were last woken for.
    durable_announced: Cell<i64>,
    /// Where each flush's times go.
    on_flush: RefCell<Option<FlushObserver>>,
}

impl Flushers {
    pub(super) fn new(high_watermark: i64) -> Flushers {
        Flushers {
            running: Cell::new(0),
            max_in_flight: Cell::new(1),
            zero_task: Cell::new(false),
            acks: RefCell::new(Vec::new()),
            watchers: RefCell::new(Vec::new()),
            announced: Cell::new(high_watermark),
            durable_watchers: RefCell::new(Vec::new()),
            durable_announced: Cell::new(high_watermark),
            on_flush: RefCell::new(None),
        }
    }
}

impl Flushers {
    /// Wakes the readers if the high watermark moved past what they were
    /// last woken for.
    pub(super) fn announce(&self, hw: i64) {
        if hw > self.announced.get() {
            self.announced.set(hw);
            for w in self.watchers.borrow_mut().drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// The high watermark was set (`set_replicated`) or cut back
    /// (`truncate_to`): readers are woken for moves from `hw` on.
    pub(super) fn reset_announced(&self, hw: i64) {
        self.announced.set(hw);
    }

    /// The log started over, empty, at `offset` (`start_over_at`): its
    /// high watermark and durable end are there; readers waiting look
    /// again.
    pub(super) fn started_at(&self, offset: i64) {
        self.announced.set(offset);
        self.durable_announced.set(offset);
        for w in self.watchers.borrow_mut().drain(..) {
            let _ = w.send(());
        }
    }

    /// A truncation cut the log back to `end`, the high watermark to
    /// `hw`: moves from there on wake the watchers.
    pub(super) fn cut_to(&self, hw: i64, end: i64) {
        self.announced.set(self.announced.get().min(hw));
        self.durable_announced.set(end);
    }
}

/// Adds a waiter to `list`, dropping those whose receiver is gone (so an
/// idle partition's list stays as long as its live waiters).
fn register(list: &RefCell<Vec<oneshot::Sender<()>>>) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let mut list = list.borrow_mut();
    list.retain(|w| !w.is_canceled());
    list.push(tx);
    rx
}

impl PartitionLog {
    /// How many flushes may be in flight at once (at least one) and where
    /// each flush's wait and write times go.
    pub fn set_flushing(&self, max_in_flight: usize, on_flush: impl Fn(FlushTimes) + 'static) {
        self.flushers.max_in_flight.set(max_in_flight.max(1));
        *self.flushers.on_flush.borrow_mut() = Some(Box::new(on_flush));
    }

    /// Completes when everything up to `last_offset` is durable here (the
    /// durable end passed it: acks=1, and a follower before it fetches
    /// again), or with the error of the flush that failed. For a
    /// replicated log this says nothing of the high watermark.
    /// Registers before it starts a flusher, so no flush can land unseen.
    pub fn durable_past(
        self: &Rc<Self>,
        last_offset: i64,
    ) -> impl Future<Output = Result<(), StorageError>> {
        let (tx, rx) = oneshot::channel();
        self.flushers
            .acks
            .borrow_mut()
            .push(AckWaiter { last_offset, tx });
        self.remember_self();
        self.flush_soon();
        async move {
            rx.await.unwrap_or_else(|_| {
                Err(StorageError::Io(
                    "the node stopped before the batch was durable".into(),
                ))
            })
        }
    }

    /// A receiver that completes when the high watermark next moves
    /// (consumers' long polls: what they may read grew).
    pub fn watch(&self) -> oneshot::Receiver<()> {
        register(&self.flushers.watchers)
    }

    /// A receiver that completes when the durable end next moves: a
    /// leader's follower fetches wait on it, since they read past the
    /// high watermark (which moves only once followers have fetched).
    pub fn watch_durable(&self) -> oneshot::Receiver<()> {
        register(&self.flushers.durable_watchers)
    }

    /// Starts a flusher unless `max_in_flight` run. It flushes until
    /// nothing is left unwritten; a second one starts when batches arrive
    /// while the first one writes, and writes them at once instead of
    /// waiting for the first write to land.
    pub fn flush_soon(self: &Rc<Self>) {
        let f = &self.flushers;
        let running = f.running.get();
        if running >= f.max_in_flight.get() {
            return;
        }
        f.running.set(running + 1);
        self.remember_self();
        let log = self.clone();
        glommio::spawn_local(async move {
            loop {
                let result = log.flush_timed().await.map(|(hw, times)| {
                    if let (Some(t), Some(observe)) = (times, &*log.flushers.on_flush.borrow()) {
                        observe(t);
                    }
                    hw
                });
                let failed = result.is_err();
                log.publish(result);
                // After a failure the staged data waits for the next
                // append, which retries the flush before appending more.
                if failed {
                    break;
                }
                // A segment the flush finished is sealed only now, after
                // its appenders were answered, and in a task of its own:
                // sealing truncates on glommio's blocking pool and syncs,
                // and no ack waits on it.
                log.seal_soon();
                log.write_out_soon();
                log.start_zeroing();
                // Batches that arrived meanwhile found this flusher counted
                // and started none: it must take them. No await between
                // this check and the count going down.
                if !log.has_unwritten() {
                    break;
                }
            }
            log.flushers.running.set(log.flushers.running.get() - 1);
        })
        .detach();
    }

    /// Keeps zeros written ahead of the end (so later syncs are a single
    /// device flush) in a task of its own: flushes never wait for it unless
    /// their write reaches the piece being zeroed.
    fn start_zeroing(self: &Rc<Self>) {
        // No task per flush when nothing is wanted (the common case).
        if self.flushers.zero_task.get() || !self.wants_zeros() {
            return;
        }
        self.flushers.zero_task.set(true);
        let log = self.clone();
        glommio::spawn_local(async move {
            while let Ok(true) = log.zero_ahead().await {}
            log.flushers.zero_task.set(false);
        })
        .detach();
    }

    /// Publishes a flush's outcome (the durable end it returned): the
    /// appenders it passed are answered, durable watchers woken if it
    /// moved and readers if the high watermark moved; after a failure
    /// every waiting appender gets the error.
    pub(super) fn publish(&self, result: Result<i64, StorageError>) {
        let f = &self.flushers;
        match result {
            Ok(durable) => {
                // Published as the flush returns it, with no await between:
                // the log's own durable end, which never goes down (but by
                // a truncation, which resets what was announced).
                assert!(
                    durable >= f.durable_announced.get(),
                    "published durable end {durable} below {} announced",
                    f.durable_announced.get()
                );
                let done: Vec<_> = {
                    let mut acks = f.acks.borrow_mut();
                    let (done, wait) = acks.drain(..).partition(|a| a.last_offset < durable);
                    *acks = wait;
                    done
                };
                for a in done {
                    let _ = a.tx.send(Ok(()));
                }
                if durable > f.durable_announced.get() {
                    f.durable_announced.set(durable);
                    for w in f.durable_watchers.borrow_mut().drain(..) {
                        let _ = w.send(());
                    }
                }
                self.state.borrow_mut().follow();
                // Unreplicated: the same value, the same moment as before.
                f.announce(self.high_watermark());
            }
            Err(e) => {
                for a in f.acks.borrow_mut().drain(..) {
                    let _ = a.tx.send(Err(e.clone()));
                }
            }
        }
    }
}
