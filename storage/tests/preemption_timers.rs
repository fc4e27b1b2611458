//! A reactor's preemption timers, as weir's glommio patch removes them
//! (`storage/vendor/glommio/WEIR-PATCH.md`): every pass removes both
//! timers it armed before, with IORING_OP_TIMEOUT_REMOVE instead of an
//! async cancel, and arms them again.
//!
//! One executor runs three task queues: one that spins and yields only when
//! glommio asks it to (`yield_if_needed`), one that sleeps on a timer over
//! and over, and one that reads a file with direct I/O over and over. The
//! sleeper and the reader get the CPU only when the spinner is preempted,
//! and the sleeper wakes only when a timer armed by a pass fires: a
//! removal that takes the wrong timer, or a pass that does not arm one
//! again, stops them for good, and a watchdog thread fails the test when
//! neither moves for 5 s.
//! Bounded by a count and a time (whichever ends first).

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::io::DmaFile;
use glommio::{executor, Latency, LocalExecutorBuilder, Placement, Shares};

const SLEEPS: usize = 300;
const READS: usize = 20_000;
const READS_AT_ONCE: usize = 100;
const BUDGET: Duration = Duration::from_secs(20);
const STALL: Duration = Duration::from_secs(5);

#[test]
fn a_spinning_task_queue_is_preempted_for_timers_and_io() {
    let path = std::env::temp_dir().join(format!("weir-preemption-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 64 * 1024]).expect("the file to read");
    // Removed however the test ends, a failed assertion included (not
    // when the watchdog ends the process).
    let _file = RemovedOnDrop(path.clone());
    let progress = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let run = {
        let progress = progress.clone();
        let file_path = path.clone();
        LocalExecutorBuilder::new(Placement::Unbound)
            .name("preempted")
            .spawn(move || async move {
                let queue = |name| {
                    executor().create_task_queue(
                        Shares::default(),
                        Latency::Matters(Duration::from_millis(10)),
                        name,
                    )
                };
                let stop = Rc::new(Cell::new(false));
                let spinner = glommio::spawn_local_into(
                    {
                        let stop = stop.clone();
                        async move {
                            let mut spins = 0u64;
                            while !stop.get() {
                                spins = std::hint::black_box(spins.wrapping_add(1));
                                glommio::yield_if_needed().await;
                            }
                            spins
                        }
                    },
                    queue("spinner"),
                )
                .expect("the spinner");
                let sleeper = glommio::spawn_local_into(
                    {
                        let progress = progress.clone();
                        async move {
                            let start = Instant::now();
                            let mut n = 0;
                            while n < SLEEPS && start.elapsed() < BUDGET {
                                glommio::timer::sleep(Duration::from_millis(1)).await;
                                n += 1;
                                progress.fetch_add(1, Ordering::AcqRel);
                            }
                            n
                        }
                    },
                    queue("sleeper"),
                )
                .expect("the sleeper");
                let reader = glommio::spawn_local_into(
                    {
                        let progress = progress.clone();
                        async move {
                            let file = DmaFile::open(&file_path).await.expect("open the file");
                            let start = Instant::now();
                            let mut n = 0;
                            while n < READS && start.elapsed() < BUDGET {
                                // A round of concurrent reads: their completions
                                // pile up on the ring, as a shard's do.
                                let reads = (0..READS_AT_ONCE)
                                    .map(|i| file.read_at_aligned((i % 16) as u64 * 4096, 4096));
                                for got in futures::future::join_all(reads).await {
                                    let got = got.expect("a read");
                                    assert!(
                                        got.iter().all(|&b| b == 7),
                                        "read {n} returned other bytes"
                                    );
                                    n += 1;
                                }
                                progress.fetch_add(1, Ordering::AcqRel);
                            }
                            file.close().await.expect("close the file");
                            n
                        }
                    },
                    queue("reader"),
                )
                .expect("the reader");
                let (slept, read) = (sleeper.await, reader.await);
                stop.set(true);
                let spins = spinner.await;
                (slept, read, spins)
            })
            .unwrap()
    };

    let watchdog = common::watchdog(&progress, &done, STALL, "sleep or read", "a timer was lost");

    let (slept, read, spins) = run.join().expect("the executor ran");
    done.store(true, Ordering::Release);
    watchdog.join().expect("the watchdog");
    assert!(spins > 0, "the spinner never ran");
    assert!(
        slept > 0 && read > 0,
        "slept {slept}, read {read}: the spinner was never preempted"
    );
    // Within the budget on any machine this suite runs on; a shortfall
    // means the two starved for long stretches without stopping for good.
    assert_eq!(
        (slept, read),
        (SLEEPS, READS),
        "sleeps and reads done within {BUDGET:?}"
    );
}

/// A file removed when the test lets go of it.
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
