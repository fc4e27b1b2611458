//! Crash images from the simulated disk (`sim_disk`), seed by seed: a
//! workload of plain and idempotent producers appends batches of random
//! sizes to a log of small segments, some waiting for their acks and some
//! not, with up to three flushes in flight while the disk completes writes
//! out of order and fails some. At a moment the seed picks, the disk takes
//! a crash image (in-flight writes dropped, applied or torn at any byte;
//! files cut back past their last completed write). The real
//! `PartitionLog::open` recovers the image, which must hold exactly a
//! prefix of what was appended, at its offsets, byte for byte, reaching
//! at least the high watermark of the moment (every acknowledged batch);
//! the idempotent producers' last batches must be known as duplicates, and
//! the log must take appends and reopen.
//!
//! `WEIR_SIM_SEEDS=N` runs N seeds (2,000 by default, split over two
//! threads); `WEIR_SIM_SEED=S` runs seed S alone. A failure names its seed.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::*;
use crate::batch::{split_produced, tests::make_batch, BatchHeader, BatchIter};
use crate::sim_disk::{AtCrash, Fates, Rng, SimDisk};

/// A batch of `count` records stamped `ts` (so no two are alike), from an
/// idempotent producer when `producer` gives its id and sequence.
fn batch(count: i32, ts: i64, producer: Option<(i64, i32)>) -> Vec<(BatchHeader, Bytes)> {
    let mut b = make_batch(count, ts, 0);
    if let Some((pid, seq)) = producer {
        b[43..51].copy_from_slice(&pid.to_be_bytes());
        b[51..53].copy_from_slice(&0i16.to_be_bytes());
        b[53..57].copy_from_slice(&seq.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    split_produced(&Bytes::from(b)).expect("a valid batch")
}

/// What one seed did and what its image held.
#[derive(Default)]
struct Tally {
    seeds: u64,
    /// Seeds whose image was taken with writes in flight.
    mid_flight: u64,
    fates: Fates,
    writes: u64,
    failures: u64,
    most_in_flight: usize,
    /// Batches appended, and kept by recoveries beyond the high watermark.
    appended: u64,
    kept_past_watermark: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.seeds += o.seeds;
        self.mid_flight += o.mid_flight;
        self.fates.add(&o.fates);
        self.writes += o.writes;
        self.failures += o.failures;
        self.most_in_flight = self.most_in_flight.max(o.most_in_flight);
        self.appended += o.appended;
        self.kept_past_watermark += o.kept_past_watermark;
    }
}

thread_local! {
    /// Where the seed running is (said when one does not end).
    static STAGE: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
    /// The log the seed running works on (described when it does not end).
    static CURRENT: RefCell<std::rc::Weak<PartitionLog>> =
        const { RefCell::new(std::rc::Weak::new()) };
}

fn describe_current() -> String {
    let Some(log) = CURRENT.with(|c| c.borrow().upgrade()) else {
        return "no log".into();
    };
    let st = log.state.try_borrow();
    let state = match st {
        Ok(st) => format!(
            "end {} durable {} failed {:?} unwritten {}",
            st.next_offset,
            st.durable_offset,
            st.failed,
            st.unsealed().any(|s| s.unwritten())
        ),
        Err(_) => "state borrowed".into(),
    };
    format!(
        "{state}; {}; flushers {} zero task {} acks {:?}; zeroing {:?}; append lock {} zero lock {}",
        log.flights.borrow().describe(),
        log.flushers.running.get(),
        log.flushers.zero_task.get(),
        log.flushers.acks.borrow().iter().map(|a| a.last_offset).collect::<Vec<_>>(),
        log.zeroing.get(),
        log.append_lock.available(),
        log.zero_lock.available()
    )
}

fn stage(s: &'static str) {
    STAGE.with(|c| c.set(s));
}

/// Runs one seed in `root`: the workload on the simulated disk, then the
/// image's recovery and its checks.
async fn run_seed(seed: u64, root: &Path, tally: &mut Tally) {
    stage("workload");
    let mut rng = Rng::new(seed);
    let dir = root.join("log");
    let image = root.join("image");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = LogConfig {
        segment_bytes: [12 << 10, 20 << 10, 64 << 10][rng.below(3) as usize],
        ..LogConfig::default()
    };
    let tasks = 1 + rng.below(4);
    let per_task = 4 + rng.below(20);
    // About two events a write, a write a batch or fewer (group commit),
    // and a few pieces of zeros.
    let crash_at = 1 + rng.below(tasks * per_task * 2 + 8);
    let fail_one_in = if rng.one_in(3) { 6 } else { 0 };
    let disk = SimDisk::install(seed, &dir, &image, crash_at, fail_one_in);
    let log = Rc::new(PartitionLog::open(&dir, cfg, 0).await.unwrap());
    CURRENT.with(|c| *c.borrow_mut() = Rc::downgrade(&log));
    log.set_flushing(1 + rng.below(3) as usize, |_| {});
    let weak = Rc::downgrade(&log);
    disk.observe(move || {
        let log = weak.upgrade().expect("the log is open");
        AtCrash {
            high_watermark: log.high_watermark(),
            log_end: log.log_end(),
        }
    });
    // Base offset → the batch as stored.
    let appended: Rc<RefCell<BTreeMap<i64, Bytes>>> = Rc::default();
    let mut joins = Vec::new();
    for t in 0..tasks {
        let log = log.clone();
        let appended = appended.clone();
        let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(t));
        let pid = rng.one_in(2).then_some(1000 + t as i64);
        joins.push(glommio::spawn_local(async move {
            let mut seq = 0;
            for i in 0..per_task {
                let most = if rng.one_in(4) { 1500 } else { 200 };
                let count = 1 + rng.below(most) as i32;
                let b = batch(count, (t * 1000 + i) as i64, pid.map(|p| (p, seq)));
                let result = match log.append(&b, 5).await {
                    Ok(r) => Ok(r),
                    // The log failed a write: the shard retries the flush
                    // once before refusing (`Partition::append`).
                    Err(_) => match log.flush().await {
                        Ok(_) => log.append(&b, 5).await,
                        Err(e) => Err(e),
                    },
                };
                let Ok((a, stored)) = result else {
                    continue; // refused; the producer sends the sequence again
                };
                assert_eq!(
                    stored.len(),
                    1,
                    "seed {seed}: a new batch was taken as a resend"
                );
                appended
                    .borrow_mut()
                    .insert(a.base_offset, stored[0].1.to_bytes());
                seq += count; // sequences count records
                match rng.below(3) {
                    0 => {
                        let _ = log.durable_past(a.last_offset).await;
                    }
                    1 => log.flush_soon(),
                    _ => {}
                }
            }
        }));
    }
    for (t, j) in joins.into_iter().enumerate() {
        STAGE.with(|c| c.set(["appender 0", "appender 1", "appender 2", "appender 3"][t]));
        j.await;
    }
    stage("final flush");
    let mut tries = 0;
    while log.flush().await.is_err() {
        tries += 1;
        assert!(tries < 100, "seed {seed}: the log never flushed again");
    }
    stage("the log's own tasks");
    disk.take_image_now();
    // The log's own tasks (flushers, zeros ahead) end before the next
    // seed's disk is installed. (Slept, not yielded: a task that always
    // yields keeps the executor from reaping io_uring completions, and a
    // seal's truncate and sync would never land.)
    while Rc::strong_count(&log) > 1 {
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
    SimDisk::remove();
    let (at, fates) = disk.taken().expect("an image");
    let mut this = Tally {
        seeds: 1,
        mid_flight: u64::from(fates.dropped + fates.applied + fates.torn > 0),
        fates,
        writes: disk.writes.get(),
        failures: disk.failures.get(),
        most_in_flight: disk.most_in_flight.get(),
        ..Tally::default()
    };
    let appended = appended.borrow().clone();
    this.appended = appended.len() as u64;
    drop(log);
    if std::env::var("WEIR_SIM_SEED").is_ok() {
        // One seed run alone keeps its image as taken, to look at.
        let kept = root.join("image-as-taken");
        let _ = std::fs::remove_dir_all(&kept);
        std::fs::create_dir_all(&kept).unwrap();
        for e in std::fs::read_dir(&image).unwrap().flatten() {
            std::fs::copy(e.path(), kept.join(e.file_name())).unwrap();
        }
        eprintln!(
            "seed {seed}: {at:?} {fates:?}; image kept in {}",
            kept.display()
        );
    }
    stage("recovery");
    this.kept_past_watermark = check_image(seed, &image, cfg, at, &appended).await;
    tally.add(&this);
}

/// Recovers the image and checks it; returns how many batches it kept
/// past the high watermark of the moment it was taken.
async fn check_image(
    seed: u64,
    image: &Path,
    cfg: LogConfig,
    at: AtCrash,
    appended: &BTreeMap<i64, Bytes>,
) -> u64 {
    stage("recovery: open");
    let log = Rc::new(
        PartitionLog::open(image, cfg, 0)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}")),
    );
    CURRENT.with(|c| *c.borrow_mut() = Rc::downgrade(&log));
    stage("recovery: reads");
    let end = log.log_end();
    assert!(
        at.high_watermark <= end && end <= at.log_end,
        "seed {seed}: recovered to {end}, outside {}..={} (high watermark..log end at the crash)",
        at.high_watermark,
        at.log_end
    );
    assert_eq!(log.high_watermark(), end, "seed {seed}");
    assert_eq!(log.log_start(), 0, "seed {seed}");
    // Exactly the batches appended, densely, byte for byte.
    let mut next = 0;
    let mut past = 0;
    let mut last_of_producer: HashMap<i64, Bytes> = HashMap::new();
    while next < end {
        let before = next;
        let r = log
            .read(next, 1 << 20)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: reading {next}: {e}"));
        let bytes = r.batches.to_bytes();
        let mut it = BatchIter::new(&bytes);
        for (pos, h) in it.by_ref() {
            if h.last_offset() < next {
                continue;
            }
            assert_eq!(
                h.base_offset, next,
                "seed {seed}: a gap before {}",
                h.base_offset
            );
            let got = bytes.slice(pos..pos + h.total_len());
            let want = appended.get(&next).unwrap_or_else(|| {
                panic!("seed {seed}: offset {next} holds a batch never appended")
            });
            assert!(
                got == *want,
                "seed {seed}: the batch at {next} differs from the one appended"
            );
            if h.producer_id >= 0 {
                last_of_producer.insert(h.producer_id, got);
            }
            if next >= at.high_watermark {
                past += 1;
            }
            next = h.last_offset() + 1;
        }
        assert_eq!(
            it.position(),
            bytes.len(),
            "seed {seed}: a read held more than batches"
        );
        assert!(
            next > before,
            "seed {seed}: a read at {before} below the log end {end} found nothing"
        );
    }
    assert_eq!(next, end, "seed {seed}: the log ends inside a batch");
    // The producers' state came back with the log: each one's last batch
    // sent again is answered with its offsets, and nothing is appended.
    stage("recovery: resends");
    for (pid, b) in &last_of_producer {
        let h = BatchHeader::parse(b).unwrap();
        let again = split_produced(b).unwrap();
        let (a, stored) = log.append(&again, 5).await.unwrap();
        assert!(
            stored.is_empty() && a.base_offset == h.base_offset,
            "seed {seed}: producer {pid}'s last batch at {} was not known as a resend",
            h.base_offset
        );
    }
    // And the log goes on.
    stage("recovery: append and flush");
    let (a, _) = log.append(&batch(3, 7, None), 5).await.unwrap();
    assert_eq!(a.base_offset, end, "seed {seed}");
    assert_eq!(log.flush().await.unwrap(), end + 3, "seed {seed}");
    drop(log);
    stage("recovery: reopen");
    let log = PartitionLog::open(image, cfg, 0).await.unwrap();
    assert_eq!(
        log.log_end(),
        end + 3,
        "seed {seed}: lost the append after recovery"
    );
    past
}

fn data_root(name: &str) -> PathBuf {
    // Not /tmp: tmpfs has no O_DIRECT.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../target/test-data/sim-{name}-{}",
        std::process::id()
    ))
}

/// Runs `seeds` one after another, each on a fresh executor (as a
/// restarted node has), from one thread.
fn run_seeds(name: String, seeds: Vec<u64>) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let root = data_root(&name);
        let tally = std::sync::Arc::new(std::sync::Mutex::new(Tally::default()));
        for seed in seeds {
            let t = tally.clone();
            let r = root.clone();
            crate::testing::run_local(move || async move {
                std::fs::create_dir_all(&r).unwrap();
                crate::segment::prepare_direct_io(&r).await.unwrap();
                let mut tally = std::mem::take(&mut *t.lock().unwrap());
                // A timer that keeps waking the executor, as a node's
                // shard has (its 100 ms heartbeat). Without one, about one
                // seed in 4,000 never ended: a glommio I/O (a seal's
                // truncate or sync, a roll's snapshot, an open) did not
                // complete while nothing else could wake the executor.
                glommio::spawn_local(async {
                    loop {
                        glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                    }
                })
                .detach();
                // The disk has no clock: a seed takes milliseconds, and one
                // that does not end has something waiting forever.
                let run = Box::pin(run_seed(seed, &r, &mut tally));
                let limit = Box::pin(glommio::timer::sleep(std::time::Duration::from_secs(20)));
                if let futures::future::Either::Right(_) = futures::future::select(run, limit).await
                {
                    panic!(
                        "seed {seed} did not end: it waits forever in {} ({})",
                        STAGE.with(|c| c.get()),
                        describe_current()
                    );
                }
                *t.lock().unwrap() = tally;
            });
        }
        let _ = std::fs::remove_dir_all(&root);
        let all = std::mem::take(&mut *tally.lock().unwrap());
        all
    })
}

#[test]
fn every_crash_image_recovers_a_prefix_holding_every_acknowledged_batch() {
    let seeds: Vec<u64> = match std::env::var("WEIR_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_SIM_SEED is a number")],
        Err(_) => {
            let n = std::env::var("WEIR_SIM_SEEDS")
                .map(|s| s.parse().expect("WEIR_SIM_SEEDS is a number"))
                .unwrap_or(2000u64);
            (1..=n).collect()
        }
    };
    let halves = [
        seeds.iter().copied().step_by(2).collect::<Vec<_>>(),
        seeds.iter().copied().skip(1).step_by(2).collect(),
    ];
    let threads: Vec<_> = halves
        .into_iter()
        .enumerate()
        .map(|(i, s)| run_seeds(format!("t{i}"), s))
        .collect();
    let mut all = Tally::default();
    for t in threads {
        let t = t.join().expect("a seed failed (its number is above)");
        all.add(&t);
    }
    println!(
        "{} seeds: {} writes ({} failed), up to {} in flight; {} images taken mid-flight: \
         {} writes dropped, {} applied, {} torn, {} files cut back; {} batches appended, \
         {} kept past the high watermark",
        all.seeds,
        all.writes,
        all.failures,
        all.most_in_flight,
        all.mid_flight,
        all.fates.dropped,
        all.fates.applied,
        all.fates.torn,
        all.fates.shortened,
        all.appended,
        all.kept_past_watermark
    );
    assert_eq!(all.seeds, seeds.len() as u64);
    if seeds.len() >= 200 {
        // The simulation did what it is for.
        assert!(
            all.mid_flight * 4 > all.seeds,
            "few images were taken mid-flight"
        );
        assert!(all.fates.dropped > 0 && all.fates.torn > 0 && all.fates.shortened > 0);
        assert!(all.failures > 0 && all.most_in_flight >= 2);
    }
}
