//! Swapping a cleaned segment in for the group it replaces: the commit (a
//! rename to `{base}.{end}.swap`) and the log's segments changed with no
//! await between; and at open, a swap a crash cut short finished, cleaned
//! files never committed removed.

use std::path::Path;

use super::SegInfo;
use crate::log::PartitionLog;
use crate::segment::{cleaned_path, complete_swap, swap_path, Segment};
use crate::StorageError;

impl PartitionLog {
    /// Swaps a cleaned segment in for `group`, if every segment of it is
    /// still there as it was read (retention or DeleteRecords may have
    /// removed some meanwhile; a closed log swaps nothing). No await
    /// inside: nothing else touches the log between the commit and the
    /// segments' change in memory.
    pub(super) fn install(&self, group: &[&SegInfo], seg: Segment) -> Result<bool, StorageError> {
        let (base, end) = (seg.base(), seg.next_offset());
        let intact = !self.closed.get() && {
            let st = self.state.borrow();
            group.iter().all(|g| {
                st.segments
                    .get(&g.base)
                    .is_some_and(|s| s.sealed() && s.next_offset() == g.end)
            })
        };
        if !intact {
            remove_cleaned(&self.dir, base);
            return Ok(false);
        }
        if crate::crash_point::reached("compaction-cleaned") {
            return Err(StorageError::Io("stopped at a crash point".into()));
        }
        let cleaned = cleaned_path(&crate::segment::log_path(&self.dir, base));
        std::fs::rename(&cleaned, swap_path(&self.dir, base, end))
            .map_err(|e| StorageError::Io(format!("renaming {}: {e}", cleaned.display())))?;
        crate::durable::sync_dir(&self.dir)?;
        if crate::crash_point::reached("compaction-committed") {
            return Err(StorageError::Io("stopped at a crash point".into()));
        }
        let retired = complete_swap(&self.dir, base, end)?;
        // Unlinking a large file frees its extents in the syscall: on the
        // blocking pool, not the shard.
        let unlink = glommio::executor().spawn_blocking(move || {
            for p in retired {
                if let Err(e) = std::fs::remove_file(&p) {
                    log::warn!("removing {}: {e}", p.display());
                }
            }
        });
        glommio::spawn_local(unlink).detach();
        let mut st = self.state.borrow_mut();
        for g in group {
            st.segments.remove(&g.base);
        }
        st.segments.insert(base, seg);
        // A read ahead holds positions in a file that is gone.
        *self.readahead.borrow_mut() = None;
        Ok(true)
    }
}

/// Finishes what a pass cut short left in `dir`: a committed swap is
/// completed, cleaned files never committed are removed.
pub(in crate::log) fn finish_interrupted(dir: &Path) -> Result<(), StorageError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError::Io(format!("listing {}: {e}", dir.display())))?;
    let (mut swaps, mut cleaned) = (Vec::new(), Vec::new());
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".swap") {
            if let Some((base, end)) = stem.split_once('.') {
                if let (Ok(base), Ok(end)) = (base.parse::<i64>(), end.parse::<i64>()) {
                    swaps.push((base, end));
                }
            }
        } else if name.ends_with(".cleaned") {
            cleaned.push(entry.path());
        }
    }
    for (base, end) in swaps {
        log::warn!(
            "{}: finishing the swap of cleaned segment {base} (up to offset {end})",
            dir.display()
        );
        complete_swap(dir, base, end)?;
    }
    // Retired segment files (see `complete_swap`), and their leftovers.
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError::Io(format!("listing {}: {e}", dir.display())))?;
    cleaned.extend(
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "deleted")),
    );
    let mut removed = false;
    for path in cleaned {
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StorageError::Io(format!(
                    "removing {}: {e}",
                    path.display()
                )))
            }
        }
    }
    if removed {
        log::info!(
            "{}: removed the files a cut-short cleaning pass left",
            dir.display()
        );
        crate::durable::sync_dir(dir)?;
    }
    Ok(())
}

/// Removes the cleaned files of a segment never swapped in.
pub(super) fn remove_cleaned(dir: &Path, base: i64) {
    let log = crate::segment::log_path(dir, base);
    for p in [
        cleaned_path(&log),
        cleaned_path(&log.with_extension("index")),
        cleaned_path(&log.with_extension("timeindex")),
    ] {
        let _ = std::fs::remove_file(p);
    }
}
