//! The metadata quorum's Raft log and vote, in plain files of the data
//! directory's `raft/`:
//!
//! - `log`: records `[u32 length][u32 CRC-32C][JSON]`, each an entry or
//!   the id purged up to. Appends are written and fdatasynced before
//!   openraft is told they are durable; a truncation or purge rewrites the
//!   file aside and renames it into place (metadata logs are small: a
//!   snapshot purges them every `SNAPSHOT_EVERY` entries). At open, a
//!   record cut short or failing its CRC ends the log there (a torn
//!   append, never acknowledged) and the file is cut to it.
//! - `vote`: the vote, written durably (aside, synced, renamed) before
//!   openraft goes on.
//! - `committed`: the last committed id (advisory: lets a restart apply
//!   up to it at once), written without a sync.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Write;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    ErrorSubject, ErrorVerb, LogId, LogState, RaftLogId, RaftLogReader, StorageError, Vote,
};
use serde::{Deserialize, Serialize};

use super::types::Meta;

type Entry = openraft::Entry<Meta>;

#[derive(Serialize, Deserialize)]
enum Record {
    Entry(Entry),
    Purged(LogId<u64>),
}

struct Inner {
    dir: PathBuf,
    file: std::fs::File,
    entries: BTreeMap<u64, Entry>,
    purged: Option<LogId<u64>>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
}

/// The log store (and its reader: both share the state).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_error(subject: ErrorSubject<u64>, verb: ErrorVerb, e: std::io::Error) -> StorageError<u64> {
    StorageError::from_io_error(subject, verb, e)
}

fn frame(rec: &Record) -> Vec<u8> {
    let json = serde_json::to_vec(rec).expect("log records serialise");
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&json).to_be_bytes());
    out.extend_from_slice(&json);
    out
}

/// Whether the record at `good` (where parsing stopped) is whole and
/// followed by more bytes: damage, not an append cut short (which only
/// ever leaves the last record incomplete or wrong).
fn damaged_before_end(bytes: &[u8], good: usize) -> bool {
    let Some(head) = bytes.get(good..good + 4) else {
        return false;
    };
    let len = u32::from_be_bytes(head.try_into().expect("4")) as usize;
    good + 8 + len < bytes.len()
}

/// The records of a log file, and how many bytes of it hold whole ones.
fn parse(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= 8 {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
        let crc = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().expect("4"));
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32c::crc32c(body) != crc {
            break;
        }
        match serde_json::from_slice::<Record>(body) {
            Ok(r) => out.push(r),
            Err(_) => break,
        }
        at += 8 + len;
    }
    (out, at)
}

impl LogStore {
    pub fn open(dir: &Path) -> Result<LogStore, String> {
        let path = dir.join("log");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let (records, good) = parse(&bytes);
        if damaged_before_end(&bytes, good) {
            return Err(format!(
                "{} is damaged at byte {good}: a whole record there fails its CRC-32C and records follow it (not a torn append); the node does not start rather than lose committed metadata: restore the file, or empty this node's raft/ directory for it to catch up from the others",
                path.display()
            ));
        }
        if good < bytes.len() {
            log::warn!(
                "{}: {} bytes after the last whole record cut off (an append the node stopped in, never acknowledged)",
                path.display(),
                bytes.len() - good
            );
        }
        let mut entries = BTreeMap::new();
        let mut purged = None;
        for r in records {
            match r {
                Record::Entry(e) => {
                    // A later record of an index replaces what was there
                    // and everything after it (a truncation).
                    entries.split_off(&e.log_id.index);
                    entries.insert(e.log_id.index, e);
                }
                Record::Purged(id) => {
                    entries = entries.split_off(&(id.index + 1));
                    purged = Some(id);
                }
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        file.set_len(good as u64)
            .map_err(|e| format!("cutting {}: {e}", path.display()))?;
        let read_json = |name: &str| -> Result<Option<Vec<u8>>, String> {
            match std::fs::read(dir.join(name)) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("reading {}: {e}", dir.join(name).display())),
            }
        };
        let vote = match read_json("vote")? {
            Some(b) => Some(
                serde_json::from_slice(&b)
                    .map_err(|e| format!("{} is damaged: {e}", dir.join("vote").display()))?,
            ),
            None => None,
        };
        let committed = read_json("committed")?.and_then(|b| serde_json::from_slice(&b).ok());
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_path_buf(),
                file,
                entries,
                purged,
                vote,
                committed,
            })),
        })
    }
}

impl Inner {
    /// Writes the whole log anew (aside, synced, renamed into place).
    fn rewrite(&mut self) -> std::io::Result<()> {
        let mut body = Vec::new();
        if let Some(p) = self.purged {
            body.extend(frame(&Record::Purged(p)));
        }
        for e in self.entries.values() {
            body.extend(frame(&Record::Entry(e.clone())));
        }
        let path = self.dir.join("log");
        weir_storage::durable::replace(&path, &body)?;
        self.file = std::fs::OpenOptions::new().append(true).open(&path)?;
        Ok(())
    }
}

impl RaftLogReader<Meta> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        let s = self.inner.lock().expect("not poisoned");
        Ok(s.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<Meta> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<Meta>, StorageError<u64>> {
        let s = self.inner.lock().expect("not poisoned");
        let last = s
            .entries
            .values()
            .next_back()
            .map(|e| *e.get_log_id())
            .or(s.purged);
        Ok(LogState {
            last_purged_log_id: s.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut s = self.inner.lock().expect("not poisoned");
        let body = serde_json::to_vec(vote).expect("votes serialise");
        weir_storage::durable::replace(&s.dir.join("vote"), &body)
            .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        s.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.inner.lock().expect("not poisoned").vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        let mut s = self.inner.lock().expect("not poisoned");
        s.committed = committed;
        let body = serde_json::to_vec(&committed).expect("log ids serialise");
        // Advisory: a lost write only means a restart learns it from the
        // leader.
        let _ = std::fs::write(s.dir.join("committed"), body);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.inner.lock().expect("not poisoned").committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<Meta>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut s = self.inner.lock().expect("not poisoned");
        let mut body = Vec::new();
        let mut added = Vec::new();
        for e in entries {
            body.extend(frame(&Record::Entry(e.clone())));
            added.push(e);
        }
        let written = s.file.write_all(&body).and_then(|()| s.file.sync_data());
        if let Err(e) = written {
            let why = format!("appending to the metadata log: {e}");
            callback.log_io_completed(Err(std::io::Error::other(why)));
            return Err(io_error(ErrorSubject::Logs, ErrorVerb::Write, e));
        }
        for e in added {
            s.entries.insert(e.log_id.index, e);
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut s = self.inner.lock().expect("not poisoned");
        s.entries.split_off(&log_id.index);
        s.rewrite()
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut s = self.inner.lock().expect("not poisoned");
        s.entries = s.entries.split_off(&(log_id.index + 1));
        s.purged = Some(log_id);
        s.rewrite()
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_tail_ends_the_log_at_the_last_whole_record() {
        let rec = |i| {
            frame(&Record::Purged(LogId::new(
                openraft::CommittedLeaderId::new(1, 1),
                i,
            )))
        };
        let mut bytes = rec(1);
        bytes.extend(rec(2));
        let whole = bytes.len();
        bytes.extend(&rec(3)[..5]);
        let (records, good) = parse(&bytes);
        assert_eq!(records.len(), 2);
        assert_eq!(good, whole);
        assert!(!damaged_before_end(&bytes, good));
        // A flipped bit fails the CRC: the log ends before it. As the last
        // record it is taken for a torn append; with records after it,
        // for damage.
        let mut bad = rec(1);
        let n = bad.len();
        bad[n - 2] ^= 1;
        assert_eq!(parse(&bad).1, 0);
        assert!(!damaged_before_end(&bad, 0));
        bad.extend(rec(2));
        assert_eq!(parse(&bad).1, 0);
        assert!(damaged_before_end(&bad, 0));
    }
}
