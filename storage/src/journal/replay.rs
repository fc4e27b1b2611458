//! Replay at the node's start, before any log opens: each shard's journal
//! writes read while whole and in sequence, the data records not forgotten
//! later written back into their segment files, the files synced, and the
//! journal files emptied (their first block zeroed) for the shards to take.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{crc, journal_dir, BLOCK, DATA, FORGET, MAGIC, WRITE_HEAD};

/// What a replay did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Journal files that held writes.
    pub files: usize,
    /// Data records written back, and their bytes.
    pub records: usize,
    pub bytes: u64,
    /// Data records dropped: forgotten later, or their file is gone.
    pub skipped: usize,
    /// Above every sequence number the journal files held: where the
    /// shards' journals start counting.
    pub next_seq: u64,
}

/// One record as read: its kind, path (relative to the data directory)
/// and, for data, position and bytes.
struct Record<'a> {
    kind: u8,
    path: &'a [u8],
    pos: u64,
    data: &'a [u8],
}

/// Replays every journal file under `data_dir` (see the module's comment).
/// Fails only when a segment file cannot be written or synced: then
/// nothing is emptied, and the next start tries again.
pub fn replay(data_dir: &Path) -> Result<Replayed, String> {
    let dir = journal_dir(data_dir);
    let mut report = Replayed {
        next_seq: wall_clock_ns(),
        ..Replayed::default()
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(report);
    };
    // Each shard's files, in sequence order.
    let mut by_shard: HashMap<String, Vec<(u64, PathBuf, Vec<u8>)>> = HashMap::new();
    let mut all = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".wj") else {
            continue;
        };
        let Some((shard, _)) = stem.rsplit_once('-') else {
            continue;
        };
        all.push(path.clone());
        let bytes = read_all(&path)?;
        let Some(seq) = first_seq(&bytes) else {
            continue;
        };
        report.next_seq = report.next_seq.max(seq + 1);
        by_shard
            .entry(shard.to_string())
            .or_default()
            .push((seq, path, bytes));
    }
    for files in by_shard.values_mut() {
        files.sort_by_key(|(seq, _, _)| *seq);
        let records: Vec<Record> = files
            .iter()
            .flat_map(|(seq, _, bytes)| writes(bytes, *seq))
            .collect();
        report.files += files.len();
        apply(data_dir, &records, &mut report)?;
    }
    // Emptied only now: every record is in its segment file, synced.
    for path in all {
        empty(&path)?;
    }
    Ok(report)
}

fn read_all(path: &Path) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("reading the journal {}: {e}", path.display()))?;
    Ok(bytes)
}

/// The sequence number of a file's first write, if it is whole.
fn first_seq(bytes: &[u8]) -> Option<u64> {
    write_at(bytes, 0, None).map(|(seq, _, _)| seq)
}

/// The write at `at`, if whole (and of sequence `seq` when given): its
/// sequence number, records, and where the next write starts.
fn write_at(bytes: &[u8], at: usize, seq: Option<u64>) -> Option<(u64, &[u8], usize)> {
    let head = bytes.get(at..at + WRITE_HEAD)?;
    if &head[..4] != MAGIC {
        return None;
    }
    let s = u64::from_le_bytes(head[4..12].try_into().ok()?);
    let len = u32::from_le_bytes(head[12..16].try_into().ok()?) as usize;
    let sum = u32::from_le_bytes(head[16..20].try_into().ok()?);
    if seq.is_some_and(|want| want != s) {
        return None;
    }
    let records = bytes.get(at + WRITE_HEAD..at + WRITE_HEAD + len)?;
    if crc(s, records) != sum {
        return None;
    }
    let next = (at + WRITE_HEAD + len).div_ceil(BLOCK) * BLOCK;
    Some((s, records, next))
}

#[cfg(test)]
pub(super) fn write_at_for_tests(bytes: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    write_at(bytes, at, None)
}

/// The records of a file's whole writes of sequence `seq`, in order.
fn writes(bytes: &[u8], seq: u64) -> Vec<Record<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((_, records, next)) = write_at(bytes, at, Some(seq)) {
        match parse(records) {
            Some(mut rs) => out.append(&mut rs),
            // A whole write (its CRC passed) that does not parse was not
            // written by this journal: stop as at a torn one.
            None => break,
        }
        at = next;
    }
    out
}

fn parse(mut b: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        let body = b.get(4..4 + len)?;
        b = &b[4 + len..];
        let kind = *body.first()?;
        let plen = u16::from_le_bytes(body.get(1..3)?.try_into().ok()?) as usize;
        let path = body.get(3..3 + plen)?;
        let rest = &body[3 + plen..];
        let (pos, data) = match kind {
            DATA => (
                u64::from_le_bytes(rest.get(..8)?.try_into().ok()?),
                &rest[8..],
            ),
            FORGET => (0, &rest[..0]),
            _ => return None,
        };
        out.push(Record {
            kind,
            path,
            pos,
            data,
        });
    }
    Some(out)
}

/// Writes a shard's data records back, but those a later forget covers,
/// and syncs every file written.
fn apply(data_dir: &Path, records: &[Record], report: &mut Replayed) -> Result<(), String> {
    // The last forget of each path (a file, or a directory).
    let mut forgotten: HashMap<&[u8], usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        if r.kind == FORGET {
            forgotten.insert(r.path, i);
        }
    }
    let mut open: HashMap<&[u8], Option<File>> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        if r.kind != DATA {
            continue;
        }
        if covered(r.path, i, &forgotten) {
            report.skipped += 1;
            continue;
        }
        let file = open.entry(r.path).or_insert_with(|| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(data_dir.join(std::ffi::OsStr::from_bytes(r.path)))
                .ok()
        });
        let Some(file) = file else {
            // Its segment (or whole log) was deleted since.
            report.skipped += 1;
            continue;
        };
        file.write_all_at(r.data, r.pos).map_err(|e| {
            format!(
                "replaying the journal into {}: {e}",
                String::from_utf8_lossy(r.path)
            )
        })?;
        report.records += 1;
        report.bytes += r.data.len() as u64;
    }
    for (path, file) in open {
        if let Some(f) = file {
            f.sync_data().map_err(|e| {
                format!(
                    "syncing {} after replaying the journal: {e}",
                    String::from_utf8_lossy(path)
                )
            })?;
        }
    }
    Ok(())
}

/// Whether a forget after record `i` names `path` or a directory above it.
fn covered(path: &[u8], i: usize, forgotten: &HashMap<&[u8], usize>) -> bool {
    let mut p = Path::new(std::ffi::OsStr::from_bytes(path));
    loop {
        if forgotten
            .get(p.as_os_str().as_bytes())
            .is_some_and(|&f| f > i)
        {
            return true;
        }
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => return false,
        }
    }
}

/// Zeroes a journal file's first block (its first write no longer passes,
/// so nothing in it is read again) and syncs it.
fn empty(path: &Path) -> Result<(), String> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| format!("emptying the journal {}: {e}", path.display()))?;
    f.write_all_at(&[0u8; BLOCK], 0)
        .and_then(|_| f.sync_data())
        .map_err(|e| format!("emptying the journal {}: {e}", path.display()))
}

fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
