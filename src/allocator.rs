//! The process allocator (mimalloc) and when it gives freed memory back.
//!
//! mimalloc (v3, as the `mimalloc` crate builds it) returns ("purges")
//! freed pages to the OS about a second after they are freed. Under
//! produce load every request buffer lives in the tail cache until evicted
//! and is then freed, and the node kept page-faulting fresh memory in:
//! 20–70 thousand faults per 2 GB produced here, 15–30% of the node's CPU
//! (the kernel clears every page, and on a VM the host backs it again);
//! with purging off, none. By default the node
//! keeps freed memory for reuse: its resident size stays at its high-water
//! mark, which the tail cache, the request limits and the SQL scan limit
//! bound. `--release-freed-memory-ms` restores purging after a delay.
//!
//! `WEIR_ALLOCATOR=system` in the environment makes the process use the C
//! library's malloc instead, decided at its first allocation: glibc checks
//! its heap as it frees (a double free aborts at once, naming itself),
//! where mimalloc carries on with the corruption. The crash loop runs so
//! (`tests/integration/test_crash_loop.py`); so can an operator chasing a
//! fault, or valgrind.

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::raw::{c_int, c_long};
use std::sync::atomic::{AtomicU8, Ordering};

use mimalloc::MiMalloc;

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// mimalloc, or the system's allocator when `WEIR_ALLOCATOR=system`.
struct Allocator;

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;
static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether the system's allocator serves this process.
fn system() -> bool {
    match CHOICE.load(Ordering::Relaxed) {
        MIMALLOC => false,
        SYSTEM => true,
        _ => decide(),
    }
}

/// Reads `WEIR_ALLOCATOR` once, at the first allocation (before `main`,
/// on the main thread: every later allocation, and so every free, sees
/// the same choice).
#[cold]
fn decide() -> bool {
    // SAFETY: getenv reads the environment the C library set up before
    // any Rust code ran, and allocates nothing; the name is NUL-terminated.
    let value = unsafe { libc::getenv(c"WEIR_ALLOCATOR".as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    let system = !value.is_null() && unsafe { std::ffi::CStr::from_ptr(value) } == c"system";
    CHOICE.store(if system { SYSTEM } else { MIMALLOC }, Ordering::Relaxed);
    system
}

// SAFETY: each call goes whole to one allocator, the same one for the
// process's life, so a block is always freed by the allocator that made it.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if system() {
                System.alloc(layout)
            } else {
                MiMalloc.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe {
            if system() {
                System.alloc_zeroed(layout)
            } else {
                MiMalloc.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above; `ptr` came from the same allocator.
        unsafe {
            if system() {
                System.dealloc(ptr, layout)
            } else {
                MiMalloc.dealloc(ptr, layout)
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        unsafe {
            if system() {
                System.realloc(ptr, layout, new_size)
            } else {
                MiMalloc.realloc(ptr, layout, new_size)
            }
        }
    }
}

// mimalloc's option calls; the library is linked in by the `mimalloc`
// crate, whose sys crate does not name the purge option.
extern "C" {
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (and v2's).
const PURGE_DELAY: c_int = 15;
/// Its default in v3: how the option is recognised before it is changed.
const DEFAULT_PURGE_DELAY_MS: c_long = 1000;

/// Whether the kernel may back this process's memory with transparent
/// huge pages; returns what was done, for the log.
///
/// Off by default, as Redis does (`disable-thp`): with THP "always", the
/// first touch of each 2 MiB of fresh memory has the kernel clear the whole
/// page while the touching thread waits. A shard filling its tail cache on
/// a fresh node stopped 30–80 ms at a time, 97% of those stops'
/// samples in `clear_page_erms` (this project's VM, where the host backs
/// each page on first touch too), and a fresh node's first e2e run at
/// 20,000 records/s had a p99 of 42–84 ms against 2–3 ms once warm. With
/// 4 KiB pages the same clearing comes a page at a time.
pub fn huge_pages(allowed: bool) -> String {
    if allowed {
        return "transparent huge pages: as the system sets them".into();
    }
    // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and
    // affects only this process (and children it forks).
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) } {
        0 => "transparent huge pages: off for this process".into(),
        _ => format!(
            "transparent huge pages: could not turn them off ({})",
            std::io::Error::last_os_error()
        ),
    }
}

/// Sets how long freed memory waits before it is returned to the OS
/// (`None`: never). An explicit `MIMALLOC_PURGE_DELAY` in the environment
/// wins. Returns what was done, for the log.
pub fn release_freed_memory_after(delay_ms: Option<u64>) -> String {
    if system() {
        return "the system's allocator serves this process (WEIR_ALLOCATOR=system); it returns freed memory as it decides".into();
    }
    if let Ok(v) = std::env::var("MIMALLOC_PURGE_DELAY") {
        return format!("freed memory: MIMALLOC_PURGE_DELAY={v} from the environment");
    }
    // SAFETY: mimalloc's option calls take any option number and are
    // thread-safe; no threads of ours run yet.
    let current = unsafe { mi_option_get(PURGE_DELAY) };
    if current != DEFAULT_PURGE_DELAY_MS {
        // Not the option we know (another mimalloc version): leave it.
        return format!("freed memory: allocator option {PURGE_DELAY} is {current}, left as it is");
    }
    let value = delay_ms.map_or(-1, |ms| ms.min(c_long::MAX as u64) as c_long);
    unsafe { mi_option_set(PURGE_DELAY, value) };
    match delay_ms {
        None => "freed memory is kept for reuse".to_string(),
        Some(ms) => format!("freed memory goes back to the OS after {ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_option_is_the_one_set() {
        // With the variable set, mimalloc took its value at start-up and
        // the node leaves the option as it is, saying so.
        if let Ok(v) = std::env::var("MIMALLOC_PURGE_DELAY") {
            let before = unsafe { mi_option_get(PURGE_DELAY) };
            assert_eq!(
                release_freed_memory_after(None),
                format!("freed memory: MIMALLOC_PURGE_DELAY={v} from the environment")
            );
            assert_eq!(unsafe { mi_option_get(PURGE_DELAY) }, before);
            return;
        }
        // Otherwise the linked mimalloc has the v3 default at the index we
        // use, and a value set there reads back.
        assert_eq!(
            unsafe { mi_option_get(PURGE_DELAY) },
            DEFAULT_PURGE_DELAY_MS
        );
        assert_eq!(
            release_freed_memory_after(None),
            "freed memory is kept for reuse"
        );
        assert_eq!(unsafe { mi_option_get(PURGE_DELAY) }, -1);
    }
}
