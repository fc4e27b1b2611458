//! What the glommio patch's tests share.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A thread that ends the test process when `progress` stops moving for
/// `stall` before `done` is set: an executor that lost a wake-up or a
/// timer never returns, and a join would wait for ever. `what` names the
/// step that stopped ("round trip") and `why` the likely cause.
pub fn watchdog(
    progress: &Arc<AtomicUsize>,
    done: &Arc<AtomicBool>,
    stall: Duration,
    what: &'static str,
    why: &'static str,
) -> JoinHandle<()> {
    let (progress, done) = (progress.clone(), done.clone());
    std::thread::spawn(move || {
        let (mut last, mut since) = (0, Instant::now());
        while !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
            let now = progress.load(Ordering::Acquire);
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() > stall {
                eprintln!("no {what} for {stall:?} after {now}: {why}");
                std::process::exit(1);
            }
        }
    })
}
