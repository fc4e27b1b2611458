//! The leader epoch cache of a partition (Kafka's `LeaderEpochFileCache`,
//! KIP-101/279): which leader epoch began at which offset, kept durably in
//! `leader-epoch-checkpoint` beside the segments.
//!
//! A follower uses it to find where its log diverged from a new leader's
//! (OffsetForLeaderEpoch answers `end_offset_for`), and truncates there
//! instead of to its high watermark, which could lose acknowledged data.
//!
//! The pure logic (`EpochCache`) is tested alone; the log keeps one in
//! memory and writes the file (with `durable::replace`) whenever an
//! `assign` or a truncation by `truncate_to` changes it. A move of the log
//! start (retention, DeleteRecords) changes it in memory only, as Kafka's
//! `truncateFromStartAsyncFlush` leaves the file to be written later: on
//! open the cache is cut to the log's bounds again, so a stale file is
//! harmless.

use std::path::{Path, PathBuf};

use crate::StorageError;

/// Kafka's `UNDEFINED_EPOCH` (OffsetsForLeaderEpochResponse).
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// The file the cache is kept in (Kafka's name).
pub fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join("leader-epoch-checkpoint")
}

/// Entries `(epoch, start_offset)`, strictly increasing in both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<(i32, i64)>,
}

impl EpochCache {
    /// A cache of `entries` as they are (the caller keeps them increasing).
    pub fn from_entries(entries: Vec<(i32, i64)>) -> EpochCache {
        EpochCache { entries }
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// The latest epoch with an entry (the one being written to).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Kafka's `assign(epoch, startOffset)`: returns whether the cache
    /// changed (the caller then persists it). Nothing changes when the
    /// latest entry is of the same epoch and starts at or before
    /// `start_offset` (Kafka's `isUpdateNeeded`). Otherwise the entries
    /// that would break monotonicity (from the end: epoch >= `epoch` or
    /// start >= `start_offset`) go first (`maybeTruncateNonMonotonicEntries`),
    /// so a larger epoch at a smaller start offset removes the later
    /// entries it conflicts with, and so does a smaller epoch (Kafka does
    /// not ignore it either). Negative values are refused, as Kafka's
    /// `IllegalArgumentException`.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool, String> {
        if epoch < 0 || start_offset < 0 {
            return Err(format!(
                "invalid leader epoch entry (epoch {epoch}, start offset {start_offset})"
            ));
        }
        let needed = self
            .entries
            .last()
            .is_none_or(|&(e, s)| e != epoch || start_offset < s);
        if !needed {
            return Ok(false);
        }
        while self
            .entries
            .last()
            .is_some_and(|&(e, s)| e >= epoch || s >= start_offset)
        {
            let (e, s) = self.entries.pop().expect("an entry");
            if s != start_offset {
                log::warn!(
                    "leader epoch entry ({epoch}, {start_offset}) removes the conflicting \
                     entry ({e}, {s})"
                );
            }
        }
        self.entries.push((epoch, start_offset));
        Ok(true)
    }

    /// Kafka's `LeaderEpochFileCache.endOffsetFor(requestedEpoch,
    /// logEndOffset)`, case for case (apache/kafka,
    /// storage/src/main/java/org/apache/kafka/storage/internals/epoch/
    /// LeaderEpochFileCache.java):
    /// - `UNDEFINED_EPOCH` requested: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    /// - the latest epoch requested: (it, `log_end`);
    /// - no epoch above the requested one (an empty cache, or one above
    ///   the latest): (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    /// - none at or below it (below the first): (requested, the first
    ///   entry's start), so the follower replicates from the leader's start;
    /// - else: (the largest epoch <= requested, the start of the next one).
    pub fn end_offset_for(&self, requested: i32, log_end: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end);
        }
        let Some(&(_, higher_start)) = self.entries.iter().find(|&&(e, _)| e > requested) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match self.entries.iter().rev().find(|&&(e, _)| e <= requested) {
            None => (requested, higher_start),
            Some(&(floor, _)) => (floor, higher_start),
        }
    }

    /// Kafka's `truncateFromStart(startOffset)`: the entries starting at or
    /// before `start_offset` go, and the last of them comes back starting
    /// at `start_offset` (its epoch still holds the new log start).
    /// Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let n = self
            .entries
            .iter()
            .take_while(|&&(_, s)| s <= start_offset)
            .count();
        if n == 0 {
            return false;
        }
        let (epoch, old) = self.entries[n - 1];
        self.entries.drain(..n - 1);
        self.entries[0] = (epoch, start_offset);
        n > 1 || old != start_offset
    }

    /// Kafka's `truncateFromEnd(endOffset)`: the entries starting at or
    /// after `end_offset` go. Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        if end_offset < 0 {
            return false;
        }
        let before = self.entries.len();
        while self.entries.last().is_some_and(|&(_, s)| s >= end_offset) {
            self.entries.pop();
        }
        before != self.entries.len()
    }

    /// The file's bytes: Kafka's checkpoint text (version 0, the count,
    /// one "epoch start" line each), then a line `crc32c <hex>` of
    /// everything before it, so a damaged file is found rather than read.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for (e, s) in &self.entries {
            text.push_str(&format!("{e} {s}\n"));
        }
        let crc = crc32c::crc32c(text.as_bytes());
        text.push_str(&format!("crc32c {crc:08x}\n"));
        text.into_bytes()
    }

    /// Parses `encode`'s bytes, checking all of it: the CRC, the version,
    /// the count, every line, and that entries increase in both fields.
    pub fn decode(b: &[u8]) -> Result<EpochCache, String> {
        let text = std::str::from_utf8(b).map_err(|_| "not text".to_string())?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or("too short")?;
        let (body, trailer) = text.split_at(body_end);
        let crc = trailer
            .strip_prefix("crc32c ")
            .and_then(|h| u32::from_str_radix(h.trim_end_matches('\n'), 16).ok())
            .ok_or("no crc32c line at the end")?;
        if crc32c::crc32c(body.as_bytes()) != crc {
            return Err("its CRC-32C does not match".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some("0") {
            return Err("unknown version".into());
        }
        let count: usize = lines
            .next()
            .and_then(|l| l.parse().ok())
            .ok_or("no entry count")?;
        let mut cache = EpochCache::default();
        for line in lines.by_ref() {
            let mut words = line.split(' ');
            let (Some(e), Some(s), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!("bad line {line:?}"));
            };
            let (Ok(e), Ok(s)) = (e.parse::<i32>(), s.parse::<i64>()) else {
                return Err(format!("bad line {line:?}"));
            };
            if e < 0
                || s < 0
                || cache
                    .entries
                    .last()
                    .is_some_and(|&(pe, ps)| e <= pe || s <= ps)
            {
                return Err(format!("entry {line:?} does not follow the one before"));
            }
            cache.entries.push((e, s));
        }
        if cache.entries.len() != count {
            return Err(format!(
                "{} entries where the count says {count}",
                cache.entries.len()
            ));
        }
        Ok(cache)
    }
}

/// The cache kept in `dir`, or `None` when there is no file; a damaged file
/// is an error naming it (guessing epochs could make a follower keep data
/// its leader never had).
pub fn load(dir: &Path) -> Result<Option<EpochCache>, StorageError> {
    let path = checkpoint_path(dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::Io(format!("reading {}: {e}", path.display()))),
    };
    EpochCache::decode(&bytes)
        .map(Some)
        .map_err(|why| StorageError::Corrupt(format!("{}: {why}", path.display())))
}

/// Writes the cache to `dir` durably: the old file or the new one stays
/// whole whatever happens.
pub fn save(dir: &Path, cache: &EpochCache) -> Result<(), StorageError> {
    let path = checkpoint_path(dir);
    crate::durable::replace(&path, &cache.encode())
        .map_err(|e| StorageError::Io(format!("writing {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> EpochCache {
        EpochCache::from_entries(entries.to_vec())
    }

    /// Kafka's LeaderEpochFileCacheTest cases for endOffsetFor.
    #[test]
    fn end_offset_for_follows_kafka() {
        let empty = EpochCache::default();
        assert_eq!(empty.end_offset_for(0, 10), (-1, -1));
        assert_eq!(empty.end_offset_for(-1, 10), (-1, -1));
        let c = cache(&[(2, 6), (4, 10), (7, 20)]);
        let cases = [
            // undefined epoch
            (-1, (-1, -1)),
            // the latest epoch: the log end
            (7, (7, 100)),
            // above the latest: undefined
            (8, (-1, -1)),
            // an epoch with an entry: the next one's start
            (2, (2, 10)),
            (4, (4, 20)),
            // between entries: the one below, the next one's start
            (3, (2, 10)),
            (5, (4, 20)),
            (6, (4, 20)),
            // below the first: the requested one, the first's start
            (1, (1, 6)),
            (0, (0, 6)),
        ];
        for (requested, want) in cases {
            assert_eq!(c.end_offset_for(requested, 100), want, "epoch {requested}");
        }
    }

    #[test]
    fn assign_follows_kafka() {
        let mut c = EpochCache::default();
        assert!(c.assign(2, 6).unwrap());
        // Same epoch, later offset: nothing.
        assert!(!c.assign(2, 10).unwrap());
        assert!(c.assign(3, 10).unwrap());
        assert!(c.assign(5, 20).unwrap());
        assert_eq!(c.entries(), &[(2, 6), (3, 10), (5, 20)]);
        // A larger epoch at a smaller start removes the conflicting ones.
        assert!(c.assign(6, 15).unwrap());
        assert_eq!(c.entries(), &[(2, 6), (3, 10), (6, 15)]);
        // Same epoch, earlier start: moved back.
        assert!(c.assign(6, 12).unwrap());
        assert_eq!(c.entries(), &[(2, 6), (3, 10), (6, 12)]);
        // A smaller epoch (Kafka does not ignore it): the entries of it
        // and later epochs go, and it starts anew.
        assert!(c.assign(3, 14).unwrap());
        assert_eq!(c.entries(), &[(2, 6), (3, 14)]);
        // Epoch equal to the latest, later or at the same start: nothing.
        assert!(!c.assign(3, 20).unwrap());
        assert!(!c.assign(3, 14).unwrap());
        // Invalid entries are refused.
        assert!(c.assign(-1, 5).is_err());
        assert!(c.assign(4, -1).is_err());
        assert_eq!(c.latest_epoch(), Some(3));
    }

    #[test]
    fn truncations_follow_kafka() {
        let base = cache(&[(2, 6), (3, 8), (4, 11)]);
        // From the start: exclusive, the epoch holding it moves up.
        let mut c = base.clone();
        assert!(c.truncate_from_start(9));
        assert_eq!(c.entries(), &[(3, 9), (4, 11)]);
        let mut c = base.clone();
        assert!(c.truncate_from_start(8));
        assert_eq!(c.entries(), &[(3, 8), (4, 11)]);
        let mut c = base.clone();
        assert!(!c.truncate_from_start(5));
        assert_eq!(c, base);
        let mut c = base.clone();
        assert!(c.truncate_from_start(100));
        assert_eq!(c.entries(), &[(4, 100)]);
        // From the end: entries starting at or after it go.
        let mut c = base.clone();
        assert!(c.truncate_from_end(8));
        assert_eq!(c.entries(), &[(2, 6)]);
        let mut c = base.clone();
        assert!(c.truncate_from_end(9));
        assert_eq!(c.entries(), &[(2, 6), (3, 8)]);
        let mut c = base.clone();
        assert!(!c.truncate_from_end(12));
        assert!(!c.truncate_from_end(-1));
        assert!(c.truncate_from_end(0));
        assert!(c.entries().is_empty());
    }

    #[test]
    fn file_round_trip_and_damage() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../target/test-data/epochs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load(&dir).unwrap(), None);
        for c in [
            EpochCache::default(),
            cache(&[(0, 0), (3, 50), (7, 1 << 40)]),
        ] {
            save(&dir, &c).unwrap();
            assert_eq!(load(&dir).unwrap(), Some(c));
        }
        // Any change of a byte is found, and the error names the file.
        let good = std::fs::read(checkpoint_path(&dir)).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x04;
            std::fs::write(checkpoint_path(&dir), &bad).unwrap();
            match load(&dir) {
                Err(StorageError::Corrupt(why)) => {
                    assert!(why.contains("leader-epoch-checkpoint"), "{why}")
                }
                other => panic!("byte {at}: {other:?}"),
            }
        }
        std::fs::write(checkpoint_path(&dir), &good[..good.len() / 2]).unwrap();
        assert!(matches!(load(&dir), Err(StorageError::Corrupt(_))));
        // A checked parse refuses entries out of order even with a good CRC.
        let body = "0\n2\n3 50\n2 60\n";
        let text = format!("{body}crc32c {:08x}\n", crc32c::crc32c(body.as_bytes()));
        assert!(EpochCache::decode(text.as_bytes()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
