//! A segment the cleaner writes aside (`cleaned_path`), and its swap into
//! the log: committed by a rename to `swap_path`, then completed (at once,
//! or by the next start after a crash) by `complete_swap`.

use std::path::{Path, PathBuf};

use glommio::io::DmaFile;

use super::paths::{
    clean_path, cleaned_path, deleted_path, index_path, log_path, remove_segment_files, swap_path,
    time_index_path,
};
use super::Segment;
use crate::batch::BatchHeader;
use crate::durable::{sync_dir, write_small_file};
use crate::StorageError;

impl Segment {
    /// A segment the cleaner writes into `file` (at `cleaned_path`): its
    /// batches are noted with `push_cleaned` as they are written.
    pub fn cleaned(dir: &Path, base: i64, file: DmaFile, now_ms: i64) -> Segment {
        Segment::empty(dir, base, file, now_ms)
    }

    /// The cleaner wrote a batch at the segment's end.
    pub fn push_cleaned(&mut self, h: &BatchHeader) {
        assert!(h.base_offset >= self.next_offset, "offsets must grow");
        self.note_batch(h, self.size);
        self.size += h.total_len() as u64;
    }

    /// The cleaner wrote every batch, durably: the segment covers offsets
    /// up to `end` (the next segment's base: the last batches may have
    /// gone) and is sealed. Its index files are written beside the
    /// cleaned file (`cleaned_path`), under the names the swap gives them.
    pub async fn finish_cleaned(&mut self, end: i64) -> Result<(), StorageError> {
        assert!(end >= self.next_offset);
        self.next_offset = end;
        self.durable_size = self.size;
        self.prepared_size = self.size;
        self.written_size = self.size;
        self.allocated = self.size;
        self.zeroed = self.size;
        self.mark_sealed();
        let (idx, tidx) = self.index_files();
        write_small_file(&cleaned_path(&index_path(&self.dir, self.base)), idx).await?;
        write_small_file(&cleaned_path(&time_index_path(&self.dir, self.base)), tidx).await
    }
}

/// Completes a swap whose cleaned segment is named by `swap_path(dir, base,
/// end)`: the segments it replaces go, its index files take their names,
/// then the cleaned file takes the segment's name. Every step may be
/// repeated, so a start-up after a crash anywhere in it finishes it. The
/// replaced segment files are renamed `deleted_path` (a rename changes no
/// extent, so it is quick) and returned: the caller removes them where a
/// slow unlink of a large file holds nothing up (start-up removes any it
/// finds).
pub fn complete_swap(dir: &Path, base: i64, end: i64) -> Result<Vec<PathBuf>, StorageError> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        StorageError::Io(format!("{what} {}: {e}", p.display()))
    };
    let mut retired = Vec::new();
    let mut retire = |b: i64| -> Result<(), StorageError> {
        let (from, to) = (log_path(dir, b), deleted_path(dir, b));
        match std::fs::rename(&from, &to) {
            Ok(()) => retired.push(to),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("renaming", &from, e)),
        }
        remove_segment_files(dir, b);
        Ok(())
    };
    let entries = std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let replaced = name
            .to_string_lossy()
            .strip_suffix(".log")
            .and_then(|stem| stem.parse::<i64>().ok())
            .filter(|b| *b > base && *b < end);
        if let Some(b) = replaced {
            retire(b)?;
        }
    }
    if crate::crash_point::reached("compaction-replaced") {
        return Err(StorageError::Io("stopped at a crash point".into()));
    }
    for path in [index_path(dir, base), time_index_path(dir, base)] {
        let cleaned = cleaned_path(&path);
        match std::fs::rename(&cleaned, &path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("renaming", &cleaned, e)),
        }
    }
    let swap = swap_path(dir, base, end);
    if swap.exists() {
        // The old file at `base` is retired like the others (the rename
        // below would otherwise free its extents in line).
        let (from, to) = (log_path(dir, base), deleted_path(dir, base));
        match std::fs::rename(&from, &to) {
            Ok(()) => retired.push(to),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("renaming", &from, e)),
        }
    }
    std::fs::rename(&swap, log_path(dir, base)).map_err(|e| io("renaming", &swap, e))?;
    // A stale clean-stop state or snapshot of the old file must not be
    // taken for the new one's.
    let _ = std::fs::remove_file(clean_path(dir, base));
    sync_dir(dir)?;
    Ok(retired)
}
