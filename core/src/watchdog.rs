//! The shard watchdog: a plain thread (not an executor) that notices a shard
//! asleep in io_uring long past its own timer — a lost wake-up — and
//! interrupts that sleep with a signal, so the executor polls its rings
//! again, and says so in the log with what the rings held.
//!
//! Why it exists: a restarted node was seen (under CPU contention, right
//! after a SIGKILL) with both executors asleep in `io_cqring_wait` for over
//! a minute, one of them with a 1 ms timer overdue; interrupting the
//! syscall (a debugger attaching) made both go on at once. glommio sleeps
//! in its main ring and learns of its latency ring's completions (timers,
//! accepts, socket reads, other threads' wake-ups) only through a poll of
//! that ring's file descriptor; a wake-up lost on that path leaves the
//! executor asleep until its main ring completes something. An interrupted
//! `io_uring_enter` returns EINTR, which glommio treats as a wake-up.
//!
//! Each shard beats every `BEAT`: a heartbeat task from before it opens
//! anything, then its own tick loop once it serves; a shard whose beats stop for `OVERDUE` while its thread
//! sleeps in `io_cqring_wait` cannot be busy (it would be running) nor
//! waiting on the disk (it would be in D state elsewhere): its timer fired
//! and the wake-up did not reach it.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a shard's heartbeat task beats.
pub const BEAT: Duration = Duration::from_millis(100);
/// A shard asleep in io_uring this long without a beat is woken.
const OVERDUE: Duration = Duration::from_secs(1);
/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// One shard's heart: its thread and its beats.
#[derive(Default)]
struct Heart {
    tid: AtomicI32,
    beats: AtomicU64,
    woken: AtomicU64,
}

/// Every shard's heartbeat, shared by the shards (which beat) and the
/// watchdog (which listens). Plain atomics: no lock on any path.
pub struct Hearts {
    hearts: Vec<Heart>,
}

impl Hearts {
    pub fn new(shards: usize) -> Arc<Self> {
        Arc::new(Hearts {
            hearts: (0..shards).map(|_| Heart::default()).collect(),
        })
    }

    /// Called on shard `id`'s own thread before it does anything else.
    pub fn register(&self, id: usize) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.hearts[id].tid.store(tid, Ordering::Relaxed);
    }

    /// One beat of shard `id` (its heartbeat task, every `BEAT`).
    pub fn beat(&self, id: usize) {
        self.hearts[id].beats.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times the watchdog has woken shard `id`.
    pub fn woken(&self, id: usize) -> u64 {
        self.hearts[id].woken.load(Ordering::Relaxed)
    }

    /// What shard `id`'s thread is doing, as the kernel says (state and
    /// wait channel), for start-up progress lines.
    pub fn thread_state(&self, id: usize) -> String {
        let tid = self.hearts[id].tid.load(Ordering::Relaxed);
        if tid == 0 {
            return "not started".into();
        }
        let (state, wchan) = thread_state(tid);
        format!("thread {tid} in state {state} at {wchan}")
    }
}

/// The signal that interrupts a shard's sleep. Its handler does nothing:
/// the point is the EINTR. Installed without SA_RESTART.
fn kick_signal() -> libc::c_int {
    libc::SIGRTMIN() + 2
}

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs the kick signal's handler (once, before the shards start).
pub fn install() -> Result<(), String> {
    // SAFETY: a zeroed sigaction with a handler that does nothing, installed
    // before any thread that could receive the signal exists.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_kick as *const () as usize;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(kick_signal(), &sa, std::ptr::null_mut()) != 0 {
            return Err(format!(
                "cannot install the watchdog's signal handler: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Starts the watchdog thread; it stops when `stopping` is set.
pub fn spawn(
    hearts: Arc<Hearts>,
    stopping: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("weir-watchdog".into())
        .spawn(move || watch(&hearts, &stopping))
        .map_err(|e| format!("cannot start the watchdog thread: {e}"))
}

fn watch(hearts: &Hearts, stopping: &AtomicBool) {
    let now = Instant::now();
    let mut last: Vec<(u64, Instant)> = hearts.hearts.iter().map(|_| (0, now)).collect();
    while !stopping.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK_EVERY);
        let now = Instant::now();
        for (id, heart) in hearts.hearts.iter().enumerate() {
            let (beats, tid) = (
                heart.beats.load(Ordering::Relaxed),
                heart.tid.load(Ordering::Relaxed),
            );
            if beats != last[id].0 || tid == 0 {
                last[id] = (beats, now);
                continue;
            }
            let quiet = now - last[id].1;
            if quiet < OVERDUE {
                continue;
            }
            // Look again only after another OVERDUE, whatever is found.
            last[id].1 = now;
            if thread_sleeps_in_io_uring(tid) {
                log::warn!(
                    "shard {id} slept {} ms in io_uring without its {} ms heartbeat firing (a lost wake-up); interrupting its sleep. Rings: {}",
                    quiet.as_millis(),
                    BEAT.as_millis(),
                    rings()
                );
                heart.woken.fetch_add(1, Ordering::Relaxed);
                // SAFETY: tgkill to a thread of this process with a signal
                // whose handler does nothing.
                unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        libc::getpid(),
                        tid as libc::c_long,
                        kick_signal() as libc::c_long,
                    );
                }
            }
        }
    }
}

/// Whether thread `tid` of this process sleeps waiting for io_uring
/// completions.
fn thread_sleeps_in_io_uring(tid: i32) -> bool {
    let (state, wchan) = thread_state(tid);
    state == 'S' && wchan.contains("io_cqring_wait")
}

/// Thread `tid`'s scheduler state (R, S, D, ...) and wait channel.
fn thread_state(tid: i32) -> (char, String) {
    let base = format!("/proc/self/task/{tid}");
    let state = std::fs::read_to_string(format!("{base}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .unwrap_or('?');
    let wchan = std::fs::read_to_string(format!("{base}/wchan")).unwrap_or_default();
    (state, wchan)
}

/// Every io_uring instance of this process, in one line: completions
/// waiting to be reaped, submissions not taken, polls armed.
fn rings() -> String {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return "unreadable".into();
    };
    let mut out = Vec::new();
    for fd in fds.flatten() {
        let is_ring = std::fs::read_link(fd.path())
            .map(|t| t.to_string_lossy().contains("io_uring"))
            .unwrap_or(false);
        if !is_ring {
            continue;
        }
        let name = fd.file_name().to_string_lossy().into_owned();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{name}")).unwrap_or_default();
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
                .unwrap_or_default()
        };
        let polls = info
            .split("PollList:")
            .nth(1)
            .map(|rest| {
                rest.lines()
                    .skip(1)
                    .take_while(|l| l.starts_with(' ') || l.starts_with('\t'))
                    .count()
            })
            .unwrap_or(0);
        out.push(format!(
            "fd {name}: cq {}..{} sq {}..{} polls {polls}",
            field("CqHead:"),
            field("CqTail:"),
            field("SqHead:"),
            field("SqTail:")
        ));
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watchdog wakes a thread asleep in io_uring: a plain thread
    /// waits on a ring that will never complete anything (its own lost
    /// wake-up); without the kick it would sleep forever.
    #[test]
    fn a_thread_asleep_in_io_uring_is_woken() {
        install().unwrap();
        let hearts = Hearts::new(1);
        let stopping = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let h = hearts.clone();
        std::thread::spawn(move || {
            h.register(0);
            let mut ring = glommio_free_ring();
            // Waits for one completion; nothing was submitted.
            let r = ring.wait_one();
            tx.send(r).unwrap();
        });
        let dog = spawn(hearts.clone(), stopping.clone()).unwrap();
        let woke = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the sleeping thread was woken");
        assert_eq!(woke, -libc::EINTR, "woken by the signal");
        assert_eq!(hearts.woken(0), 1);
        stopping.store(true, Ordering::Relaxed);
        dog.join().unwrap();
    }

    /// A bare io_uring instance (io_uring_setup), enough to sleep in
    /// `io_cqring_wait`.
    struct Ring(libc::c_int);

    fn glommio_free_ring() -> Ring {
        let mut params = [0u8; 120]; // struct io_uring_params, zeroed
                                     // SAFETY: io_uring_setup with zeroed params of the kernel's size.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) };
        assert!(
            fd >= 0,
            "io_uring_setup: {}",
            std::io::Error::last_os_error()
        );
        Ring(fd as libc::c_int)
    }

    impl Ring {
        /// io_uring_enter(GETEVENTS, min_complete 1): the raw result.
        fn wait_one(&mut self) -> i32 {
            const IORING_ENTER_GETEVENTS: libc::c_long = 1;
            // SAFETY: entering a ring we own, with no submissions.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    self.0 as libc::c_long,
                    0,
                    1,
                    IORING_ENTER_GETEVENTS,
                    0,
                    0,
                )
            };
            if r < 0 {
                -std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            } else {
                r as i32
            }
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            // SAFETY: closing the ring's own descriptor once.
            unsafe { libc::close(self.0) };
        }
    }
}
