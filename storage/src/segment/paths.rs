//! The files of a segment and their names: the log file, its index files,
//! the producer-state snapshot, the clean-stop state, and the names the
//! cleaner's swap goes through (`.cleaned`, `.swap`, `.log.deleted`).

use std::path::{Path, PathBuf};

pub fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}
pub fn index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.index"))
}
pub(super) fn time_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.timeindex"))
}
/// The producer-state snapshot as of offset `base` (written when the segment
/// starting there was rolled to).
pub fn snapshot_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.snapshot"))
}

/// The active segment's state as a clean stop left it
/// (`PartitionLog::close`): the next start loads it instead of scanning the
/// segment, and removes it (durably) before anything is appended.
pub fn clean_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.clean"))
}

/// Removes the files of the segment at `base`, whichever exist.
pub fn remove_segment_files(dir: &Path, base: i64) {
    for p in [
        log_path(dir, base),
        index_path(dir, base),
        time_index_path(dir, base),
        snapshot_path(dir, base),
        clean_path(dir, base),
    ] {
        if let Err(e) = std::fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("removing {}: {e}", p.display());
            }
        }
    }
}

/// Removes the segment's index files and clean-stop state (not its log
/// file), whichever exist: the segment is about to change (`truncate_to`)
/// and they would no longer agree with it.
pub fn remove_index_files(dir: &Path, base: i64) {
    for p in [
        index_path(dir, base),
        time_index_path(dir, base),
        clean_path(dir, base),
    ] {
        if let Err(e) = std::fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("removing {}: {e}", p.display());
            }
        }
    }
}

/// Where the cleaner writes the new version of a segment file before it
/// is swapped in: `path` with `.cleaned` added.
pub fn cleaned_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".cleaned");
    PathBuf::from(p)
}

/// The cleaned segment at `base` that replaces every segment from `base`
/// up to (not including) `end`, once its name says so: the commit point of
/// a swap (see `log::compact`).
pub fn swap_path(dir: &Path, base: i64, end: i64) -> PathBuf {
    dir.join(format!("{base:020}.{end:020}.swap"))
}

/// A segment file retired by a swap, to be removed (see `complete_swap`).
pub fn deleted_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log.deleted"))
}
