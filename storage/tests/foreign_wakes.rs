//! Stress of glommio's *foreign* wakers: a `std::task::Waker` of a task on
//! one executor, woken or dropped on another thread, while the task's own
//! executor completes the task and drops its handle.
//!
//! Every hop between weir's shards ends this way (a oneshot completed on
//! the owner shard wakes the asking shard's task), and glommio 0.9.0 freed
//! such a task twice: a foreign `drop_waker` counted the task's references
//! down to 0 and only then added one back to hand the task to its executor,
//! and in between the executor's `JoinHandle::drop` saw no reference left
//! and freed the task (`storage/vendor/glommio/WEIR-PATCH.md`). The first
//! test fails within a second on the unpatched crate (SIGSEGV, glibc's
//! double-free abort, or a heap-use-after-free under AddressSanitizer).
//! The second is the shape of weir's own hops, receivers dropped early
//! included: it checks that every task still ends with the patch (it did
//! not happen to hit the window in 8 s runs on the unpatched crate; the
//! node's crash loop did, in minutes).
//!
//! Each is bounded by a count and a time (whichever ends first), so a
//! slow machine runs fewer rounds rather than longer.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::future::{select, Either};
use glommio::channels::shared_channel;
use glommio::{LocalExecutorBuilder, Placement};

/// How long each stress runs at most.
const BUDGET: Duration = Duration::from_secs(4);

/// A task completes with a clone of its own waker as its output; another
/// thread drops that waker at the moment the task's executor drops the
/// task's handle. One of the two holds the last reference; whichever it
/// is, the task must be freed exactly once.
#[test]
fn a_waker_dropped_abroad_as_the_handle_is_dropped_frees_its_task_once() {
    const ROUNDS: usize = 400_000;
    // The waker handed across (round, waker), and the round the other
    // thread has taken it in.
    let slot: Arc<Mutex<Option<(usize, Waker)>>> = Arc::new(Mutex::new(None));
    let taken = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let abroad = {
        let (slot, taken, done) = (slot.clone(), taken.clone(), done.clone());
        std::thread::spawn(move || {
            let mut dropped = 0usize;
            while !done.load(Ordering::Acquire) {
                let Some((round, waker)) = slot.lock().unwrap().take() else {
                    std::hint::spin_loop();
                    continue;
                };
                taken.store(round, Ordering::Release);
                // Sweep the moment of the drop against the handle's drop
                // on the executor thread.
                for _ in 0..(round % 64) {
                    std::hint::spin_loop();
                }
                drop(waker);
                dropped += 1;
            }
            dropped
        })
    };

    let rounds = LocalExecutorBuilder::new(Placement::Unbound)
        .name("foreign-drop")
        .spawn(move || async move {
            let start = Instant::now();
            let mut round = 0;
            while round < ROUNDS && start.elapsed() < BUDGET {
                round += 1;
                // The task puts a clone of its own waker here and completes.
                let own: Rc<RefCell<Option<Waker>>> = Rc::default();
                let handle = {
                    let own = own.clone();
                    glommio::spawn_local(async move {
                        let waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
                        *own.borrow_mut() = Some(waker);
                    })
                    .detach()
                };
                // It has completed once its waker is out; its handle stays.
                while own.borrow().is_none() {
                    yield_now().await;
                }
                let waker = own.borrow_mut().take().unwrap();
                *slot.lock().unwrap() = Some((round, waker));
                while taken.load(Ordering::Acquire) != round {
                    std::hint::spin_loop();
                }
                drop(handle);
                // Let the executor take the wakes sent to it.
                yield_now().await;
            }
            round
        })
        .unwrap()
        .join()
        .unwrap();
    done.store(true, Ordering::Release);
    let dropped = abroad.join().unwrap();
    assert_eq!(
        dropped, rounds,
        "every waker handed across was dropped there"
    );
}

/// Gives the executor one turn: other tasks run and wakes sent from other
/// threads are taken.
async fn yield_now() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Two executors as two shards: tasks on one send the sending half of a
/// oneshot to the other (over glommio's own channel, as a hop does) and
/// wait for the answer, or give up on it at once, while their handles are
/// awaited or dropped; the other answers, or drops the sender unanswered.
/// Every task must end, and the process must not fault.
#[test]
fn oneshot_hops_with_receivers_dropped_early_end_cleanly() {
    const HOPS: usize = 20_000_000;
    const IN_FLIGHT: usize = 64;
    let (to_owner, from_asker) =
        shared_channel::new_bounded::<(usize, oneshot::Sender<usize>)>(1024);

    let owner = LocalExecutorBuilder::new(Placement::Unbound)
        .name("owner")
        .spawn(move || async move {
            let from_asker = from_asker.connect().await;
            let mut answered = 0usize;
            while let Some((hop, tx)) = from_asker.recv().await {
                if hop.is_multiple_of(7) {
                    drop(tx);
                } else if tx.send(hop).is_ok() {
                    answered += 1;
                }
            }
            answered
        })
        .unwrap();

    let asker = LocalExecutorBuilder::new(Placement::Unbound)
        .name("asker")
        .spawn(move || async move {
            let to_owner = Rc::new(to_owner.connect().await);
            let start = Instant::now();
            let mut hop = 0usize;
            let (mut received, mut ended) = (0usize, 0usize);
            while hop < HOPS && start.elapsed() < BUDGET {
                let mut kept = Vec::with_capacity(IN_FLIGHT);
                for _ in 0..IN_FLIGHT {
                    hop += 1;
                    let this = hop;
                    let to_owner = to_owner.clone();
                    let task = glommio::spawn_local(async move {
                        let (tx, rx) = oneshot::channel();
                        if to_owner.send((this, tx)).await.is_err() {
                            return None;
                        }
                        match this % 3 {
                            // Waits for the answer.
                            0 => rx.await.ok(),
                            // Races the answer against one turn and drops
                            // the receiver if the turn wins.
                            1 => match select(rx, Box::pin(yield_now())).await {
                                Either::Left((answer, _)) => answer.ok(),
                                Either::Right(_) => None,
                            },
                            // Gives up on the answer at once.
                            _ => {
                                drop(rx);
                                None
                            }
                        }
                    })
                    .detach();
                    if this.is_multiple_of(2) {
                        kept.push(task);
                    } else {
                        ended += 1;
                    }
                }
                for task in kept {
                    if let Some(answer) = task.await {
                        received += usize::from(answer.is_some());
                    }
                    ended += 1;
                }
            }
            drop(to_owner);
            (hop, received, ended)
        })
        .unwrap();

    let (hops, received, ended) = asker.join().unwrap();
    let answered = owner.join().unwrap();
    assert_eq!(ended, hops, "every task was awaited or let go");
    assert!(received <= answered, "no answer arrived that was not sent");
    assert!(hops >= 10_000, "the stress ran ({hops} hops in {BUDGET:?})");
}
