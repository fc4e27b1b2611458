//! A simulated disk under the log's durable writes, for this crate's unit
//! tests (`log::sim_tests`). Driven by a seed, it decides when each write
//! completes (so flushes land out of order), fails some, and at one moment
//! takes a crash image of the log's directory as a power cut could leave
//! it: the writes completed are there (O_DSYNC: a completed write is
//! durable), and each write still in flight is dropped, applied whole, or
//! torn at any byte, independently of the others (in-flight writes never
//! share a byte, which is checked, so this covers every order they could
//! reach the platter in); a file the log wrote may also lose any length
//! past its last completed write (an allocation whose size was never made
//! durable).
//!
//! Every write of a segment's bytes goes through `log::write_whole`, which
//! asks `write` first: with a disk installed on the thread the write is
//! made here, through the page cache (the log's direct reads see it; a
//! test needs no device flush per write), and nothing reaches io_uring.
//! Small files (indexes, snapshots, the log start) are written and synced
//! as before and are in the image as they were at that moment.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// splitmix64: small, fast, and the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True once in `n` times.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// What the log looked like when the image was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtCrash {
    /// The high watermark: everything below it was (or could have been)
    /// acknowledged, so recovery must keep it.
    pub high_watermark: i64,
    /// The log end: recovery can find nothing past it.
    pub log_end: i64,
}

/// What became of the writes in flight when the image was taken.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fates {
    pub dropped: u64,
    pub applied: u64,
    pub torn: u64,
    /// Files cut back past their last completed write.
    pub shortened: u64,
}

impl Fates {
    pub fn add(&mut self, o: &Fates) {
        self.dropped += o.dropped;
        self.applied += o.applied;
        self.torn += o.torn;
        self.shortened += o.shortened;
    }
}

/// A write submitted and not yet completed.
struct InFlight {
    id: u64,
    path: PathBuf,
    pos: u64,
    len: usize,
    /// The file's bytes there before the write (shorter where the file
    /// ended: past that it reads as zeros).
    before: Vec<u8>,
}

pub struct SimDisk {
    rng: RefCell<Rng>,
    /// Submissions and completions so far.
    events: Cell<u64>,
    /// The event after which the image is taken.
    crash_at: u64,
    /// One write in this many fails (0: none).
    fail_one_in: u64,
    /// The log's directory and where its image goes.
    dir: PathBuf,
    image: PathBuf,
    in_flight: RefCell<Vec<InFlight>>,
    next_id: Cell<u64>,
    /// Per file, the end of the furthest completed write.
    completed_end: RefCell<HashMap<PathBuf, u64>>,
    /// Asked for the log's state when the image is taken.
    observe: RefCell<Option<Box<dyn Fn() -> AtCrash>>>,
    taken: Cell<Option<(AtCrash, Fates)>>,
    /// Writes made, failed, and the most in flight at once.
    pub writes: Cell<u64>,
    pub failures: Cell<u64>,
    pub most_in_flight: Cell<usize>,
}

thread_local! {
    static DISK: RefCell<Option<Rc<SimDisk>>> = const { RefCell::new(None) };
}

impl SimDisk {
    /// A disk for the log in `dir` whose crash image goes to `image`,
    /// taken after event `crash_at` (each write's submission and
    /// completion is one), installed on this thread until `remove`.
    pub fn install(
        seed: u64,
        dir: &Path,
        image: &Path,
        crash_at: u64,
        fail_one_in: u64,
    ) -> Rc<SimDisk> {
        let disk = Rc::new(SimDisk {
            rng: RefCell::new(Rng::new(seed ^ 0x5EED_D15C)),
            events: Cell::new(0),
            crash_at,
            fail_one_in,
            dir: dir.to_path_buf(),
            image: image.to_path_buf(),
            in_flight: RefCell::default(),
            next_id: Cell::new(0),
            completed_end: RefCell::default(),
            observe: RefCell::new(None),
            taken: Cell::new(None),
            writes: Cell::new(0),
            failures: Cell::new(0),
            most_in_flight: Cell::new(0),
        });
        DISK.with(|d| *d.borrow_mut() = Some(disk.clone()));
        disk
    }

    /// Uninstalls the disk from this thread.
    pub fn remove() {
        DISK.with(|d| *d.borrow_mut() = None);
    }

    /// Where the log's state is read when the image is taken.
    pub fn observe(&self, f: impl Fn() -> AtCrash + 'static) {
        *self.observe.borrow_mut() = Some(Box::new(f));
    }

    /// The image's moment and the in-flight writes' fates, once taken.
    pub fn taken(&self) -> Option<(AtCrash, Fates)> {
        self.taken.get()
    }

    /// Takes the image now if it was not taken yet (nothing in flight is
    /// then left when the workload ended before `crash_at`).
    pub fn take_image_now(&self) {
        if self.taken.get().is_none() {
            self.take_image();
        }
    }

    fn event(&self) {
        let n = self.events.get() + 1;
        self.events.set(n);
        if n == self.crash_at {
            self.take_image();
        }
    }

    fn take_image(&self) {
        let at = self
            .observe
            .borrow()
            .as_ref()
            .map(|f| f())
            .unwrap_or_default();
        let _ = std::fs::remove_dir_all(&self.image);
        std::fs::create_dir_all(&self.image).expect("creating the image directory");
        for entry in std::fs::read_dir(&self.dir).expect("listing the log") {
            let entry = entry.expect("listing the log");
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                std::fs::copy(entry.path(), self.image.join(entry.file_name()))
                    .expect("copying into the image");
                write_back(&std::fs::File::open(entry.path()).expect("a file of the log"));
            }
        }
        let mut fates = Fates::default();
        let mut rng = self.rng.borrow_mut();
        let in_flight = self.in_flight.borrow();
        for w in in_flight.iter() {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(self.image.join(w.path.file_name().expect("a file name")))
                .expect("opening an image file");
            // Put back what was there before on the byte ranges the write
            // did not reach.
            let put_back = |from: usize, to: usize| {
                let mut old = vec![0u8; to - from];
                if w.before.len() > from {
                    let known = w.before.len().min(to);
                    old[..known - from].copy_from_slice(&w.before[from..known]);
                }
                file.write_all_at(&old, w.pos + from as u64)
                    .expect("writing the image");
            };
            match rng.below(3) {
                0 => {
                    fates.dropped += 1;
                    put_back(0, w.len);
                }
                1 => fates.applied += 1,
                _ => {
                    fates.torn += 1;
                    if rng.one_in(2) {
                        // Torn at one byte: what is before it landed.
                        let cut = rng.below(w.len as u64) as usize;
                        put_back(cut, w.len);
                    } else {
                        // Sectors land in any order: each 512 bytes landed
                        // or not, and one is cut at any byte.
                        let mut from = 0;
                        while from < w.len {
                            let to = (from + 512).min(w.len);
                            match rng.below(3) {
                                0 => put_back(from, to),
                                1 => {}
                                _ => {
                                    let cut = from + rng.below((to - from) as u64) as usize;
                                    put_back(cut, to);
                                }
                            }
                            from = to;
                        }
                    }
                }
            }
        }
        // A file the disk wrote may lose what lies past its last completed
        // write (its size was never synced).
        let mut written: Vec<PathBuf> = self.completed_end.borrow().keys().cloned().collect();
        written.extend(in_flight.iter().map(|w| w.path.clone()));
        written.sort();
        written.dedup();
        for path in written {
            let done = self.completed_end.borrow().get(&path).copied().unwrap_or(0);
            let image = self.image.join(path.file_name().expect("a file name"));
            let Ok(meta) = std::fs::metadata(&image) else {
                continue; // removed since (a segment gone to retention)
            };
            if meta.len() > done && rng.one_in(4) {
                let len = done + rng.below(meta.len() - done);
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&image)
                    .and_then(|f| f.set_len(len))
                    .expect("shortening an image file");
                fates.shortened += 1;
            }
        }
        for entry in std::fs::read_dir(&self.image).expect("listing the image") {
            write_back(
                &std::fs::File::open(entry.expect("listing the image").path())
                    .expect("an image file"),
            );
        }
        self.taken.set(Some((at, fates)));
    }
}

/// Writes `file`'s dirty pages back (no device flush) and drops its pages
/// from the page cache: the log's files are read and written with
/// O_DIRECT, and a direct read over cached pages of the same file takes
/// other paths in the kernel (on a polled ring it fails with EOPNOTSUPP,
/// or waits on a worker) than the log ever meets. After a crash the cache
/// is empty too.
fn write_back(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a valid open descriptor; the calls touch no memory of ours.
    let r = unsafe { libc::sync_file_range(fd, 0, 0, flags) };
    assert_eq!(r, 0, "sync_file_range: {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    let r = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(
        r,
        0,
        "posix_fadvise: {}",
        std::io::Error::from_raw_os_error(r)
    );
}

/// Makes the write of `buf` at `pos` in `file` on the simulated disk, when
/// one is installed on this thread (`None` otherwise).
pub(crate) async fn write(
    file: &glommio::io::DmaFile,
    buf: &[u8],
    pos: u64,
) -> Option<Result<(), String>> {
    let disk = DISK.with(|d| d.borrow().clone())?;
    let path = file
        .path()
        .expect("a segment file has a path")
        .to_path_buf();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opening a segment file");
    // What is there before the write, up to the file's end (a seal's
    // truncate of another segment may run on glommio's blocking threads
    // meanwhile, so the end is where reading stops, not a size read first).
    let mut before = vec![0u8; buf.len()];
    let mut got = 0;
    while got < before.len() {
        match f.read_at(&mut before[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("reading {}: {e}", path.display()),
        }
    }
    before.truncate(got);
    {
        let in_flight = disk.in_flight.borrow();
        let end = pos + buf.len() as u64;
        for w in in_flight.iter().filter(|w| w.path == path) {
            assert!(
                end <= w.pos || w.pos + w.len as u64 <= pos,
                "two writes in flight share bytes of {}: {pos}..{end} and {}..{}",
                path.display(),
                w.pos,
                w.pos + w.len as u64
            );
        }
    }
    let (fails, yields) = {
        let mut rng = disk.rng.borrow_mut();
        let fails = disk.fail_one_in > 0 && rng.one_in(disk.fail_one_in);
        // Mostly soon, sometimes long after the writes submitted later.
        let yields = if rng.one_in(5) {
            5 + rng.below(40)
        } else {
            rng.below(4)
        };
        (fails, yields)
    };
    let id = disk.next_id.get();
    disk.next_id.set(id + 1);
    if fails {
        // A failed write may have reached the file in part.
        let reached = disk.rng.borrow_mut().below(buf.len() as u64 + 1) as usize;
        f.write_all_at(&buf[..reached], pos)
            .expect("writing a segment file");
        disk.failures.set(disk.failures.get() + 1);
    } else {
        f.write_all_at(buf, pos).expect("writing a segment file");
    }
    write_back(&f);
    disk.in_flight.borrow_mut().push(InFlight {
        id,
        path: path.clone(),
        pos,
        len: buf.len(),
        before,
    });
    let n = disk.in_flight.borrow().len();
    disk.most_in_flight.set(disk.most_in_flight.get().max(n));
    disk.event();
    for _ in 0..yields {
        YieldNow(false).await;
    }
    disk.in_flight.borrow_mut().retain(|w| w.id != id);
    disk.writes.set(disk.writes.get() + 1);
    if fails {
        disk.event();
        return Some(Err("simulated I/O error".into()));
    }
    {
        let mut ends = disk.completed_end.borrow_mut();
        let e = ends.entry(path).or_insert(0);
        *e = (*e).max(pos + buf.len() as u64);
    }
    disk.event();
    Some(Ok(()))
}

/// Lets every other ready task run once before this one goes on.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
