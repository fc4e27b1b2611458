//! weir-storage: the on-disk log of a partition.
//!
//! - [`varint`]: Kafka's zigzag varints (record fields).
//! - [`chunks`]: bytes in shared pieces (a stored batch: patched header, body).
//! - [`batch`]: Kafka v2 record batch headers, validation, offset assignment.
//! - [`records`]: reading records inside a batch, building batches.
//!
//! Those four build one way: `records` on `batch`, `batch` on `chunks` and
//! `varint`, which use no other module of the crate.
//! - [`compression`]: Kafka's codecs, decompressed with a size bound.
//! - [`index`]: the sparse offset and time indexes of a segment.
//! - [`dma_copy`]: the flush's copy into a DMA buffer, past the cache.
//! - [`durable`]: small files replaced durably (temporary file, fsync, rename).
//! - [`segment`]: one segment file, written with O_DIRECT on io_uring.
//! - [`log`]: a partition's segments, appends, group commit, reads, retention.
//! - [`producer_state`]: idempotent producers' sequence numbers per partition.
//! - [`crash_point`]: named points where a test makes the node abort.
//! - [`trash`]: directories removed on a thread of their own.
//! - [`timeline`]: the node's slow work, written down with its wall-clock
//!   time (`--timeline`), to lay beside a benchmark's slow records.
//! - `sim_disk` (tests only): a seeded disk under the log's writes that
//!   reorders, fails and tears them, and takes crash images.
//!
//! Invariant: only the shard that owns a partition touches its files; every
//! type here is `!Send` and lives on that shard.

pub mod batch;
pub mod chunks;
pub mod compression;
pub mod crash_point;
pub mod dma_copy;
pub mod durable;
pub mod index;
pub mod journal;
pub mod log;
pub mod producer_state;
pub mod records;
pub mod segment;
#[cfg(test)]
pub(crate) mod sim_disk;
#[doc(hidden)]
pub mod testing;
pub mod timeline;
pub mod trash;
pub mod varint;

pub use chunks::Chunks;
pub use log::{Appended, Cleaned, Compaction, FlushTimes, LogConfig, PartitionLog, ReadResult};

/// The size and free space of the file system holding `dir` (bytes):
/// (total, usable by an unprivileged writer).
pub fn disk_space(dir: &std::path::Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs the call fills in.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((st.f_blocks as u64 * unit, st.f_bavail as u64 * unit))
}

/// What can go wrong in storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// A read or write failed (disk full, I/O error): the message says where.
    Io(String),
    /// The offset is outside `[log_start, high_watermark]`.
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        high_watermark: i64,
    },
    /// Stored data that does not parse.
    Corrupt(String),
    /// An idempotent producer's batch out of sequence or from an old epoch.
    Sequence(producer_state::SequenceError),
    /// A write by a role the log no longer has (`PartitionLog::stop_leading`):
    /// a leader's append once it follows another leader, or a follower's
    /// copy or truncation made for a leader epoch it no longer follows in.
    /// Either would put batches of one epoch's leader where another's go.
    NotLeader(String),
}

impl StorageError {
    pub fn io(context: String, e: impl std::fmt::Display) -> StorageError {
        StorageError::Io(format!("{context}: {e}"))
    }
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::Io(s) => write!(f, "storage I/O error: {s}"),
            StorageError::OffsetOutOfRange {
                offset,
                log_start,
                high_watermark,
            } => write!(
                f,
                "offset {offset} is outside the log [{log_start}, {high_watermark}]"
            ),
            StorageError::Corrupt(s) => write!(f, "corrupt log: {s}"),
            StorageError::Sequence(e) => write!(f, "{e}"),
            StorageError::NotLeader(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for StorageError {}
