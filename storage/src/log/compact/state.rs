//! The cleaner's saved progress (`cleaner-offset`, beside the log): the
//! offset below which segments have been cleaned, and when the earliest
//! tombstone a pass kept may go.

use std::path::{Path, PathBuf};

use crate::StorageError;

/// How far cleaning has gone, kept beside the log (`cleaner-offset`) so a
/// restart does not take the whole log for dirty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(in crate::log) struct CleanerState {
    /// Segments ending at or before this offset have been cleaned.
    pub(super) first_dirty: i64,
    /// When the earliest tombstone a pass kept may go (ms), if any.
    pub(super) tombstones_due: Option<i64>,
}

fn cleaner_path(dir: &Path) -> PathBuf {
    dir.join("cleaner-offset")
}

impl CleanerState {
    /// The saved state, or none yet (a missing or unreadable file costs a
    /// pass over the whole log, nothing else).
    pub(in crate::log) fn load(dir: &Path) -> CleanerState {
        let text = std::fs::read_to_string(cleaner_path(dir)).unwrap_or_default();
        let mut words = text.split_whitespace().map(|w| w.parse::<i64>().ok());
        match (words.next().flatten(), words.next().flatten()) {
            (Some(first_dirty), Some(due)) => CleanerState {
                first_dirty,
                tombstones_due: (due >= 0).then_some(due),
            },
            _ => CleanerState::default(),
        }
    }

    /// After a truncation to `end` (`truncate_to`): nothing at or past it
    /// was cleaned. The new state when it changed.
    pub(in crate::log) fn truncated_to(self, end: i64) -> Option<CleanerState> {
        (self.first_dirty > end).then_some(CleanerState {
            first_dirty: end,
            ..self
        })
    }

    pub(in crate::log) fn save(&self, dir: &Path) -> Result<(), StorageError> {
        let text = format!(
            "{} {}\n",
            self.first_dirty,
            self.tombstones_due.unwrap_or(-1)
        );
        crate::durable::replace(&cleaner_path(dir), text.as_bytes())
            .map_err(|e| StorageError::Io(format!("saving the cleaner's offset: {e}")))
    }
}
