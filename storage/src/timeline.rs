//! The node's timeline (`weir serve --timeline FILE`): every piece of a
//! shard's work that took at least `MIN`, one line each with its
//! wall-clock start, so a benchmark's slow records (`weir-bench e2e
//! --timeline`, whose file carries the same clock) can be laid beside what
//! the node was doing then (`bench/tails.py`).
//!
//! A line is `shard kind start_unix_ns duration_ns detail`. Kinds:
//! `flush_write` and `flush_wait` (a partition flush's device write, and
//! its wait for an earlier write), `preallocate`, `zeros` (zeros written
//! ahead), `roll`, `seal`, `compaction`, `journal_write`, `produce` (a
//! produce request from its read to its answer), and `late` (the shard's
//! 1 ms probe timer fired late; the detail says how long the thread ran
//! and waited for a CPU meanwhile).
//!
//! Off (nothing installed), `note` is one thread-local read. On, events
//! go through a channel to a plain thread that writes the file, so no
//! shard blocks on it.

use std::cell::RefCell;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Work shorter than this is not written down.
pub const MIN: Duration = Duration::from_micros(500);

struct Event {
    shard: usize,
    kind: &'static str,
    start_unix_ns: u128,
    duration: Duration,
    detail: String,
}

/// Where a node's shards send their events (one per node, cloned into
/// each shard).
#[derive(Clone)]
pub struct Sink(Sender<Event>);

impl Sink {
    /// Creates (or empties) `path` and starts the thread that writes it.
    pub fn open(path: &Path) -> Result<Sink, String> {
        let file = std::fs::File::create(path)
            .map_err(|e| format!("the timeline file {}: {e}", path.display()))?;
        let (tx, rx) = channel::<Event>();
        std::thread::Builder::new()
            .name("weir-timeline".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(file);
                let _ = writeln!(out, "# shard kind start_unix_ns duration_ns detail");
                // Written out whenever the channel is drained, so a file
                // read during a run is at most one batch behind.
                while let Ok(first) = rx.recv() {
                    for e in std::iter::once(first).chain(rx.try_iter()) {
                        let _ = writeln!(
                            out,
                            "{} {} {} {} {}",
                            e.shard,
                            e.kind,
                            e.start_unix_ns,
                            e.duration.as_nanos(),
                            e.detail
                        );
                    }
                    let _ = out.flush();
                }
            })
            .map_err(|e| format!("starting the timeline's writer: {e}"))?;
        Ok(Sink(tx))
    }
}

thread_local! {
    static INSTALLED: RefCell<Option<(usize, Sink)>> = const { RefCell::new(None) };
}

/// Makes shard `shard`'s work on this thread go to `sink`.
pub fn install(shard: usize, sink: Sink) {
    INSTALLED.with(|s| *s.borrow_mut() = Some((shard, sink)));
}

/// Whether this thread writes a timeline.
pub fn enabled() -> bool {
    INSTALLED.with(|s| s.borrow().is_some())
}

/// Writes down work of `kind` that began at `started` and lasted
/// `duration`, if that is at least `MIN` and a timeline is installed;
/// `detail` is made only then.
pub fn note(
    kind: &'static str,
    started: Instant,
    duration: Duration,
    detail: impl FnOnce() -> String,
) {
    if duration < MIN {
        return;
    }
    INSTALLED.with(|s| {
        if let Some((shard, Sink(tx))) = &*s.borrow() {
            let ago = started.elapsed();
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let _ = tx.send(Event {
                shard: *shard,
                kind,
                start_unix_ns: now.saturating_sub(ago).as_nanos(),
                duration,
                detail: detail(),
            });
        }
    });
}

/// Notes `kind` from `started` to now (see `note`).
pub fn note_since(kind: &'static str, started: Instant, detail: impl FnOnce() -> String) {
    note(kind, started, started.elapsed(), detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_long_work_and_leaves_out_short() {
        let path = std::env::temp_dir().join(format!("weir-timeline-{}", std::process::id()));
        let sink = Sink::open(&path).unwrap();
        std::thread::spawn(move || {
            let t = Instant::now();
            note("short", t, Duration::from_micros(10), || "no".into());
            install(3, sink);
            note("short", t, Duration::from_micros(10), || "no".into());
            note("roll", t, Duration::from_millis(2), || "segment 7".into());
        })
        .join()
        .unwrap();
        // The writer thread ends once the shard's sender is dropped; its
        // file is complete when it holds the one long event.
        let deadline = Instant::now() + Duration::from_secs(10);
        let lines = loop {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.lines().count() >= 2 || Instant::now() > deadline {
                break text;
            }
            std::thread::yield_now();
        };
        let events: Vec<_> = lines.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(events.len(), 1, "{lines}");
        let fields: Vec<_> = events[0].splitn(5, ' ').collect();
        assert_eq!(fields[0], "3");
        assert_eq!(fields[1], "roll");
        assert_eq!(fields[3], "2000000");
        assert_eq!(fields[4], "segment 7");
        let _ = std::fs::remove_file(&path);
    }
}
