//! A reactor going to sleep must never miss a message sent to it: the
//! sleeping side publishes that it sleeps and then sweeps its channels;
//! the sending side queues its message and then reads whether the reactor
//! sleeps (and if so writes its eventfd). With a full fence on each side
//! between the two steps (`storage/vendor/glommio/WEIR-PATCH.md`, which
//! replaced upstream's membarrier IPI on the sleeping side), at least one
//! of the two sees the other's write.
//!
//! Two executors bounce one message back and forth with nothing else to
//! do and no timer: each goes to sleep between messages, so every round
//! trip crosses the window twice. A lost wake leaves both asleep for good;
//! a watchdog thread fails the test when the count stops moving for 5 s.
//! Bounded by a count and a time (whichever ends first).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::shared_channel;
use glommio::{LocalExecutorBuilder, Placement};

const ROUND_TRIPS: usize = 300_000;
const BUDGET: Duration = Duration::from_secs(6);
const STALL: Duration = Duration::from_secs(5);

#[test]
fn a_message_to_a_reactor_falling_asleep_always_wakes_it() {
    let (ping_tx, ping_rx) = shared_channel::new_bounded::<usize>(1);
    let (pong_tx, pong_rx) = shared_channel::new_bounded::<usize>(1);
    let progress = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let echo = LocalExecutorBuilder::new(Placement::Unbound)
        .name("echo")
        .spawn(move || async move {
            let (rx, tx) = (ping_rx.connect().await, pong_tx.connect().await);
            while let Some(n) = rx.recv().await {
                if tx.send(n).await.is_err() {
                    break;
                }
            }
        })
        .unwrap();

    let pinger = {
        let progress = progress.clone();
        LocalExecutorBuilder::new(Placement::Unbound)
            .name("pinger")
            .spawn(move || async move {
                let (tx, rx) = (ping_tx.connect().await, pong_rx.connect().await);
                let start = Instant::now();
                let mut n = 0;
                while n < ROUND_TRIPS && start.elapsed() < BUDGET {
                    tx.send(n).await.expect("echo is alive");
                    assert_eq!(rx.recv().await, Some(n), "the echo of round trip {n}");
                    n += 1;
                    progress.store(n, Ordering::Release);
                }
                n
            })
            .unwrap()
    };

    let watchdog = common::watchdog(&progress, &done, STALL, "round trip", "a wake-up was lost");

    let trips = pinger.join().unwrap();
    echo.join().unwrap();
    done.store(true, Ordering::Release);
    watchdog.join().unwrap();
    assert!(trips > 1000, "only {trips} round trips in {BUDGET:?}");
    eprintln!("{trips} round trips, each through two sleeping reactors");
}
