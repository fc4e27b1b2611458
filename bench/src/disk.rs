//! `disk`: the device's own latency for what a produce with acks=all waits
//! for: a direct write of `--size` bytes and an fdatasync, `--rate` times a
//! second, one at a time. It is the floor under weir's ack and end-to-end
//! latency on this machine, as the null broker is the ceiling of its
//! throughput. `--mode zeroed` writes into blocks written before (weir's
//! zeroing ahead), `preallocated` into fallocated space (ext4 marks it
//! unwritten, so each fdatasync also writes the extent tree), `append`
//! extends the file. `--dsync` opens the file O_DSYNC and issues no
//! fdatasync (each write is durable on return): one operation instead of
//! two, as weir does for segments since 25e36be (bench/HISTORY.md).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::report::{histogram, Report};

#[derive(clap::Args)]
pub struct DiskArgs {
    /// A directory on the disk to measure (a file is made and removed).
    #[arg(long)]
    pub dir: PathBuf,
    /// Bytes per write (rounded up to 4 KiB for direct I/O).
    #[arg(long, default_value_t = 20480)]
    pub size: usize,
    /// Writes per second (0: back to back).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, value_parser = ["zeroed", "preallocated", "append"], default_value = "zeroed")]
    pub mode: String,
    /// Write with O_DSYNC instead of a write and an fdatasync.
    #[arg(long)]
    pub dsync: bool,
    #[arg(long)]
    pub json: bool,
}

const ALIGN: usize = 4096;

/// A zero-filled buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("layout");
        // SAFETY: the layout has a non-zero size (len >= ALIGN).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Aligned { ptr, len }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) }
    }
}

pub fn run(a: DiskArgs) -> Result<(), String> {
    let size = a.size.max(1).div_ceil(ALIGN) * ALIGN;
    let path = a
        .dir
        .join(format!("weir-bench-disk-{}", std::process::id()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT | if a.dsync { libc::O_DSYNC } else { 0 })
        .open(&path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    let result = measure(&a, &file, size);
    let _ = std::fs::remove_file(&path);
    result
}

fn measure(a: &DiskArgs, file: &std::fs::File, size: usize) -> Result<(), String> {
    let io = |e: std::io::Error| format!("disk: {e}");
    let writes = if a.rate == 0 {
        1 << 20
    } else {
        a.rate * a.seconds
    };
    let span = (writes as usize * size).min(4 << 30) as u64;
    match a.mode.as_str() {
        "zeroed" => {
            let zeros = Aligned::new(8 << 20);
            let mut at = 0;
            while at < span {
                file.write_all_at(zeros.bytes(), at).map_err(io)?;
                at += zeros.len as u64;
            }
            file.sync_all().map_err(io)?;
        }
        "preallocated" => {
            // SAFETY: fallocate on an open descriptor with valid ranges.
            let r = unsafe {
                libc::fallocate(
                    std::os::fd::AsRawFd::as_raw_fd(file),
                    0,
                    0,
                    span as libc::off_t,
                )
            };
            if r != 0 {
                return Err(io(std::io::Error::last_os_error()));
            }
            file.sync_all().map_err(io)?;
        }
        _ => {}
    }
    let buf = Aligned::new(size);
    let mut latency = histogram();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.seconds);
    let mut pos = 0u64;
    let mut done = 0u64;
    while Instant::now() < deadline && pos + size as u64 <= span.max(size as u64) {
        // Paced: the n-th write starts at n / rate seconds.
        if let Some(ns) = (done * 1_000_000_000).checked_div(a.rate) {
            let due = start + Duration::from_nanos(ns);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let t0 = Instant::now();
        file.write_all_at(buf.bytes(), pos).map_err(io)?;
        if !a.dsync {
            file.sync_data().map_err(io)?;
        }
        latency.record(t0.elapsed().as_micros().max(1) as u64).ok();
        pos += size as u64;
        done += 1;
    }
    Report {
        workload: "disk",
        messages: done,
        bytes: done * size as u64,
        elapsed: start.elapsed(),
        latency,
        extra: vec![],
        node: None,
    }
    .print(a.json);
    Ok(())
}
