//! Opening a log: a cut-short cleaning pass finished, its segments listed
//! and opened in order (the last one recovered by its scan, a torn one
//! before it ending the log there), the producer state restored, and the
//! log start read back.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;

use glommio::sync::Semaphore;

use super::flights::Flights;
use super::{compact, flusher, read_log_start, LogConfig, LogState, PartitionLog};
use crate::producer_state::ProducerStates;
use crate::segment::{log_path, snapshot_path, Segment};
use crate::StorageError;

impl PartitionLog {
    /// Opens (or creates) the log in `dir`, recovering its tail.
    pub async fn open(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::Io(format!("creating {}: {e}", dir.display())))?;
        // A cleaning pass cut short: finish its swap, or drop its files.
        compact::finish_interrupted(dir)?;
        let bases = segment_bases(dir)?;
        remove_orphans(dir, bases.last().copied())?;
        let (mut segments, producers) = open_segments(dir, &bases, now_ms).await?;
        if segments.is_empty() {
            segments.insert(0, Segment::create(dir, 0, now_ms).await?);
        }
        seal_scanned(dir, &mut segments).await?;
        // DeleteRecords may have moved the start inside the first segment.
        let first = *segments.keys().next().expect("a segment");
        let next = segments
            .values()
            .next_back()
            .expect("a segment")
            .next_offset();
        let log_start = read_log_start(dir).map_or(first, |saved| saved.clamp(first, next));
        let next_offset = segments
            .values()
            .next_back()
            .expect("a segment")
            .next_offset();
        let epochs = open_epochs(dir, log_start, next_offset)?;
        let stamp = epochs.latest_epoch().unwrap_or(crate::batch::LEADER_EPOCH);
        Ok(PartitionLog {
            dir: dir.to_path_buf(),
            config: Cell::new(config),
            state: RefCell::new(LogState {
                segments,
                log_start,
                next_offset,
                durable_offset: next_offset,
                replicated_hw: None,
                follows_durable: false,
                failed: None,
                write_out_failed: false,
            }),
            append_lock: Semaphore::new(1),
            flights: RefCell::new(Flights::default()),
            zero_lock: Semaphore::new(1),
            zeroing: Cell::new(None),
            last_flush_bytes: Cell::new(0),
            producers: RefCell::new(producers),
            readahead: RefCell::new(None),
            flushers: flusher::Flushers::new(next_offset),
            cleaner: Cell::new(compact::CleanerState::load(dir)),
            compacting: Cell::new(false),
            closed: Cell::new(false),
            corrupt: RefCell::default(),
            epochs: RefCell::new(epochs),
            stamp_epoch: Cell::new(stamp),
            following: Cell::new(None),
            journal: crate::journal::current(),
            sealing: Cell::new(false),
            self_weak: RefCell::new(std::rc::Weak::new()),
            write_out_lock: Semaphore::new(1),
            writing_out: Cell::new(false),
        })
    }
}

/// The base offsets of the segment files in `dir`, in order.
fn segment_bases(dir: &Path) -> Result<Vec<i64>, StorageError> {
    let mut bases = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError::Io(format!("listing {}: {e}", dir.display())))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// The leader epoch cache of the log in `dir` with offsets
/// `[log_start, log_end)`: the checkpoint file's, cut to those bounds
/// (Kafka's load does the same: the file may be stale after a move of the
/// log start, or a crash inside `truncate_to`); without a file, every
/// batch was written before epochs were kept, by `append`'s epoch 0.
fn open_epochs(
    dir: &Path,
    log_start: i64,
    log_end: i64,
) -> Result<super::epochs::EpochCache, StorageError> {
    let mut cache = match super::epochs::load(dir)? {
        Some(cache) => cache,
        None if log_end > log_start => {
            super::epochs::EpochCache::from_entries(vec![(crate::batch::LEADER_EPOCH, log_start)])
        }
        None => super::epochs::EpochCache::default(),
    };
    cache.truncate_from_start(log_start);
    cache.truncate_from_end(log_end);
    Ok(cache)
}

/// Removes the files of segments past the last one (`last`): left by a
/// crash inside `truncate_to` (which removes a segment's log file first)
/// or between a producer snapshot and the roll it was for. A segment made
/// at such a base later must not find them (a stale clean-stop state or
/// index files would be taken for its own).
fn remove_orphans(dir: &Path, last: Option<i64>) -> Result<(), StorageError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| StorageError::Io(format!("listing {}: {e}", dir.display())))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some((stem, ext)) = name.split_once('.') else {
            continue;
        };
        let orphan = matches!(ext, "index" | "timeindex" | "snapshot" | "clean")
            && stem
                .parse::<i64>()
                .is_ok_and(|b| last.is_none_or(|l| b > l));
        if orphan {
            log::info!("{}: removing {name}, of no segment", dir.display());
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// The producer-state snapshot taken when the segment at `base` was
/// rolled to; empty when there is none or it does not decode.
pub(super) fn producer_snapshot(dir: &Path, base: i64) -> ProducerStates {
    std::fs::read(snapshot_path(dir, base))
        .ok()
        .and_then(|bytes| ProducerStates::decode(&bytes))
        .unwrap_or_default()
}

/// Opens the segments at `bases` in order, and the producer state as of
/// the last one. A segment before the last that ends short of the next
/// one's base ends the log: the later segments are removed.
async fn open_segments(
    dir: &Path,
    bases: &[i64],
    now_ms: i64,
) -> Result<(BTreeMap<i64, Segment>, ProducerStates), StorageError> {
    let mut segments = BTreeMap::new();
    // Producer state: the snapshot taken when the last segment was rolled
    // to, then that segment's batches (recovery scans it anyway).
    let mut producers = bases
        .last()
        .map(|&b| producer_snapshot(dir, b))
        .unwrap_or_default();
    let mut i = 0;
    while i < bases.len() {
        let base = bases[i];
        let next = bases.get(i + 1).copied();
        let states = if next.is_none() {
            Some(&mut producers)
        } else {
            None
        };
        let seg = Segment::open(dir, base, next.is_none(), next, now_ms, states).await?;
        if let Some(next) = next {
            if seg.next_offset() != next {
                // A torn segment before the last one: nothing after it was
                // ever acknowledged (a flush syncs segments in order before
                // the high watermark moves), so later segments go.
                log::warn!(
                    "{}: segment {base} ends at {} but {next} follows; dropping later segments",
                    dir.display(),
                    seg.next_offset()
                );
                remove_later_segments(dir, &bases[i + 1..]);
                // It is the last segment now, and the producer state
                // loaded above was of a segment dropped: opened again as
                // the last one, from the snapshot taken when it was
                // rolled to (state ahead of the log would answer a
                // producer's resend of a batch lost here as a
                // duplicate).
                drop(seg);
                producers = producer_snapshot(dir, base);
                let seg =
                    Segment::open(dir, base, true, None, now_ms, Some(&mut producers)).await?;
                segments.insert(base, seg);
                break;
            }
        }
        segments.insert(base, seg);
        i += 1;
    }
    Ok((segments, producers))
}

/// Removes the segments after a torn one: their log files, clean-stop
/// states and producer-state snapshots.
fn remove_later_segments(dir: &Path, later: &[i64]) {
    for &later in later {
        let _ = std::fs::remove_file(log_path(dir, later));
        let _ = std::fs::remove_file(crate::segment::clean_path(dir, later));
        let _ = std::fs::remove_file(snapshot_path(dir, later));
    }
}

/// A segment before the last that had to be scanned (its index files
/// missing or wrong) gets them written again.
async fn seal_scanned(
    dir: &Path,
    segments: &mut BTreeMap<i64, Segment>,
) -> Result<(), StorageError> {
    let last = *segments.keys().next_back().expect("a segment");
    for seg in segments
        .values_mut()
        .filter(|s| s.base() != last && !s.sealed())
    {
        log::info!(
            "{}: rebuilt the indexes of segment {}",
            dir.display(),
            seg.base()
        );
        seg.seal().await?;
    }
    Ok(())
}
