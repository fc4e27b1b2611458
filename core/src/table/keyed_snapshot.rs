//! A keyed table partition's rows on disk: the state `keyed` builds from
//! the log, in rkyv's archived form, mapped, checked and used in place at
//! start-up (no row is parsed until a scan reads it), so a restart reads
//! only the log's tail past the newest snapshot, whatever the log's length.
//!
//! Snapshots form a chain: a *full* one holds every key's latest write as
//! of its offset; a *delta* holds the writes from the offset of the one
//! before it to its own (a removed key as a mask). Deltas keep the cost of
//! a snapshot proportional to what changed; when they add up to half the
//! full one, the chain is merged into a new full snapshot and the old files
//! go. Each file is `keyed-rows-{offset}.rkyv` in the partition's
//! directory, written aside and renamed into place, so a crash leaves whole
//! files only; at start-up the chain is the newest full snapshot and the
//! deltas that follow it without a gap; other files are removed, and a file
//! that fails its checks ends the chain there (the log is read from the
//! last good one).
//!
//! A file's layout:
//!
//! - a 32-byte header: magic, format version, the trailer's CRC-32C,
//!   position and length;
//! - pages of `PAGE` entries (the last may hold fewer), each its own rkyv
//!   archive of the writes in offset order with its own CRC-32C, each
//!   written between yields so a large table's snapshot never holds its
//!   shard for long;
//! - the index archive: every entry's key hash (`key_hash`, stable across
//!   builds) in ascending order beside the entry's number, so a lookup is a
//!   binary search whatever the number of pages;
//! - the trailer archive: the offsets the file covers, the table's schema
//!   (rows made under another schema are not used), where each page and
//!   the index are, and the deletions kept (several partitions: see
//!   `keyed`).
//!
//! A row is kept as the JSON text of its column values: written once when
//! the snapshot is taken, parsed only by a scan that reads it.

use std::ops::Range;
use std::path::{Path, PathBuf};

use rkyv::rancor;
use rkyv::with::{InlineAsBox, Map};
use serde_json::Value;

const PREFIX: &str = "keyed-rows-";
const SUFFIX: &str = ".rkyv";
const MAGIC: &[u8; 8] = b"WEIRKROW";
const VERSION: u32 = 2;
const HEADER: usize = 32;
/// Entries per page: one page is serialized without a yield (a few ms).
pub const PAGE: usize = 16 * 1024;
/// Archives start at this alignment in the file (and so in the mapping).
const ALIGN: usize = 16;

/// Deletions kept for a table with several partitions: (offset, key).
pub type Tombstones = Vec<(i64, Vec<u8>)>;

#[derive(rkyv::Archive, rkyv::Serialize)]
struct Page<'a> {
    /// In offset order (masks first).
    entries: Vec<EntryOut<'a>>,
}

/// Every entry's `key_hash`, ascending, and beside each the entry's
/// number in the file (its page is the number / `PAGE`).
#[derive(rkyv::Archive, rkyv::Serialize)]
struct Index {
    hashes: Vec<u64>,
    entries: Vec<u32>,
}

#[derive(rkyv::Archive, rkyv::Serialize)]
struct EntryOut<'a> {
    #[rkyv(with = InlineAsBox)]
    key: &'a [u8],
    offset: i64,
    timestamp: i64,
    /// The row's columns as a JSON array; `None`: a deletion kept.
    #[rkyv(with = Map<InlineAsBox>)]
    row: Option<&'a [u8]>,
    /// The key was removed (a delta's mask over the files before it).
    gone: bool,
}

#[derive(rkyv::Archive, rkyv::Serialize)]
struct Trailer {
    /// `None`: a full snapshot; else where the file before it ends.
    from: Option<i64>,
    upto: i64,
    schema: String,
    /// (position, length, CRC-32C) of each page.
    pages: Vec<(u64, u64, u32)>,
    /// (position, length, CRC-32C) of the index.
    index: (u64, u64, u32),
    tombstones: Vec<(i64, Vec<u8>)>,
}

type ArchivedRow = ArchivedEntryOut<'static>;

/// A key's latest write as a snapshot holds it.
pub struct Held<'a> {
    pub key: &'a [u8],
    pub offset: i64,
    pub timestamp: i64,
    /// The row's JSON text; `None`: deleted.
    pub row: Option<&'a [u8]>,
    /// Removed: masks the key in the files before.
    pub gone: bool,
}

impl<'a> From<&'a ArchivedRow> for Held<'a> {
    fn from(e: &'a ArchivedRow) -> Self {
        Held {
            key: &e.key,
            offset: e.offset.to_native(),
            timestamp: e.timestamp.to_native(),
            row: e.row.as_ref().map(|r| &r[..]),
            gone: e.gone,
        }
    }
}

/// Parses a row a snapshot holds.
pub fn parse_row(text: &[u8]) -> Result<Vec<Value>, String> {
    serde_json::from_slice(text).map_err(|e| format!("a snapshotted row does not parse: {e}"))
}

/// One snapshot file, mapped and checked.
pub struct Snapshot {
    map: memmap2::Mmap,
    /// `None`: full; else the offset the file before it ends at.
    pub from: Option<i64>,
    /// Every record below this offset is in the chain up to this file.
    pub upto: i64,
    pages: Vec<Range<usize>>,
    index: Range<usize>,
    entries: usize,
}

/// A key's hash in a snapshot's index: two CRC-32Cs (hardware-fast, and
/// the same in every build, unlike std's or foldhash's seeded hashes).
/// Keys whose hashes collide are told apart by comparing them, so a
/// collision costs a lookup time, never a wrong answer.
fn key_hash(key: &[u8]) -> u64 {
    (u64::from(crc32c::crc32c(key)) << 32) | u64::from(crc32c::crc32c_append(0x9e37_79b9, key))
}

/// The snapshots of one partition that can be used, oldest first.
#[derive(Default)]
pub struct Chain {
    pub files: Vec<Snapshot>,
    /// The deletions kept as of the newest file.
    pub tombstones: Tombstones,
    /// Files that could not be used, and why.
    pub refused: Vec<String>,
}

impl Snapshot {
    pub fn path(dir: &Path, upto: i64) -> PathBuf {
        dir.join(format!("{PREFIX}{upto:020}{SUFFIX}"))
    }

    /// The chain in `dir` made under `schema` (its JSON): the newest full
    /// snapshot and the deltas that follow it. Files outside the chain are
    /// removed; a file that fails its checks ends it (and is removed, with
    /// what follows it).
    pub fn open_chain(dir: &Path, schema: &str) -> Chain {
        let mut chain = Chain::default();
        let mut found: Vec<(i64, Option<i64>, PathBuf)> = Vec::new();
        for path in files(dir) {
            if path.extension().is_some_and(|x| x == "tmp") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let bounds = map_file(&path).and_then(|m| {
                trailer(&m)
                    .map(|(t, _)| (t.upto.to_native(), t.from.as_ref().map(|f| f.to_native())))
            });
            match bounds {
                Ok((upto, from)) => found.push((upto, from, path)),
                Err(why) => chain.refused.push(format!("{}: {why}", path.display())),
            }
        }
        let full = found
            .iter()
            .filter(|(_, from, _)| from.is_none())
            .max_by_key(|(upto, _, _)| *upto);
        let mut picked: Vec<&PathBuf> = Vec::new();
        if let Some((upto, _, path)) = full {
            picked.push(path);
            let mut at = *upto;
            while let Some((upto, _, path)) = found.iter().find(|(_, from, _)| *from == Some(at)) {
                picked.push(path);
                at = *upto;
            }
        }
        for path in picked {
            match Snapshot::open(path, schema) {
                Ok((snap, tombstones)) => {
                    chain.tombstones = tombstones;
                    chain.files.push(snap);
                }
                Err(why) => {
                    chain.refused.push(why);
                    break;
                }
            }
        }
        // What is not in the chain is of no use: older files a merge left,
        // deltas past a gap or a damaged file.
        let kept: Vec<i64> = chain.files.iter().map(|f| f.upto).collect();
        for (upto, _, path) in &found {
            if !kept.contains(upto) {
                let _ = std::fs::remove_file(path);
            }
        }
        chain
    }

    /// One file, checked: its header, trailer and every page.
    fn open(path: &Path, schema: &str) -> Result<(Snapshot, Tombstones), String> {
        let bad = |why: &str| format!("{}: {why}", path.display());
        let map = map_file(path).map_err(|why| bad(&why))?;
        let (trailer, pages_end) = trailer(&map).map_err(|why| bad(&why))?;
        if trailer.schema.as_str() != schema {
            return Err(bad("made under another schema of the table"));
        }
        let checked =
            |(pos, len, crc): &(rkyv::rend::u64_le, rkyv::rend::u64_le, rkyv::rend::u32_le),
             what: &str| {
                let at = checked_range(pos.to_native(), len.to_native(), pages_end)
                    .ok_or_else(|| bad(&format!("{what} out of bounds")))?;
                if crc32c::crc32c(&map[at.clone()]) != crc.to_native() {
                    return Err(bad(&format!("{what} fails its checksum")));
                }
                Ok(at)
            };
        let mut pages = Vec::with_capacity(trailer.pages.len());
        let mut entries = 0;
        let last = trailer.pages.len().saturating_sub(1);
        for (i, p) in trailer.pages.iter().enumerate() {
            let what = format!("page {i}");
            let at = checked(&(p.0, p.1, p.2), &what)?;
            // Checked once here: `page` then reads it unchecked.
            let page = rkyv::access::<ArchivedPage<'static>, rancor::Error>(&map[at.clone()])
                .map_err(|e| bad(&format!("{what} does not decode: {e}")))?;
            if page.entries.len() != PAGE && i != last || page.entries.len() > PAGE {
                return Err(bad(&format!("{what} holds {} entries", page.entries.len())));
            }
            entries += page.entries.len();
            pages.push(at);
        }
        let i = &trailer.index;
        let index = checked(&(i.0, i.1, i.2), "the index")?;
        let idx = rkyv::access::<ArchivedIndex, rancor::Error>(&map[index.clone()])
            .map_err(|e| bad(&format!("the index does not decode: {e}")))?;
        if idx.hashes.len() != entries
            || idx.entries.len() != entries
            || idx
                .entries
                .iter()
                .any(|n| n.to_native() as usize >= entries)
        {
            return Err(bad("the index does not match the pages"));
        }
        let tombstones = trailer
            .tombstones
            .iter()
            .map(|t| (t.0.to_native(), t.1.to_vec()))
            .collect();
        let (from, upto) = (
            trailer.from.as_ref().map(|f| f.to_native()),
            trailer.upto.to_native(),
        );
        let snap = Snapshot {
            map,
            from,
            upto,
            pages,
            index,
            entries,
        };
        Ok((snap, tombstones))
    }

    /// Where the newest snapshot in `dir` ends, from the files' names
    /// (`None`: there is none).
    pub fn newest_in(dir: &Path) -> Option<i64> {
        files(dir)
            .filter(|p| p.extension().is_some_and(|x| x == "rkyv"))
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.to_string();
                name.strip_prefix(PREFIX)?
                    .strip_suffix(SUFFIX)?
                    .parse()
                    .ok()
            })
            .max()
    }

    fn page(&self, i: usize) -> &ArchivedPage<'static> {
        // SAFETY: `open` checked this range as an `ArchivedPage` (and its
        // checksum), and the mapping does not change.
        unsafe { rkyv::access_unchecked::<ArchivedPage<'static>>(&self.map[self.pages[i].clone()]) }
    }

    /// The write of `key` this file holds (a mask included).
    pub fn get(&self, key: &[u8]) -> Option<Held<'_>> {
        // SAFETY: `open` checked this range as an `ArchivedIndex` (and its
        // checksum, and that it names only entries the pages hold).
        let index =
            unsafe { rkyv::access_unchecked::<ArchivedIndex>(&self.map[self.index.clone()]) };
        let h = key_hash(key);
        let first = index.hashes.partition_point(|x| x.to_native() < h);
        index.hashes[first..]
            .iter()
            .zip(&index.entries[first..])
            .take_while(|(x, _)| x.to_native() == h)
            .map(|(_, n)| n.to_native() as usize)
            .map(|n| Held::from(&self.page(n / PAGE).entries[n % PAGE]))
            .find(|held| held.key == key)
    }

    /// Every write this file holds but its masks, in offset order.
    pub fn entries(&self) -> impl Iterator<Item = Held<'_>> + '_ {
        (0..self.pages.len())
            .flat_map(move |i| self.page(i).entries.iter().map(Held::from))
            .filter(|h| !h.gone)
    }

    /// How many writes and masks this file holds.
    pub fn entry_count(&self) -> usize {
        self.entries
    }
}

/// The snapshot files in `dir` (and their temporary files).
fn files(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(PREFIX))
        })
}

/// Maps the file at `path`.
fn map_file(path: &Path) -> Result<memmap2::Mmap, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("opening: {e}"))?;
    // SAFETY: the file is ours, written whole before it was renamed into
    // place and never written again (a new snapshot is a new file), so the
    // mapping does not change under us.
    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("mapping: {e}"))
}

/// A file's trailer, checked, and where its pages must end.
fn trailer(map: &[u8]) -> Result<(&ArchivedTrailer, usize), String> {
    if map.len() < HEADER || &map[..8] != MAGIC {
        return Err("not a keyed-rows snapshot".into());
    }
    let word = |at: usize| u32::from_le_bytes(map[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_le_bytes(map[at..at + 8].try_into().expect("8 bytes"));
    if word(8) != VERSION {
        return Err(format!(
            "format version {} (this node writes {VERSION})",
            word(8)
        ));
    }
    let at = checked_range(long(16), long(24), map.len()).ok_or("trailer out of bounds")?;
    if crc32c::crc32c(&map[at.clone()]) != word(12) {
        return Err("the trailer fails its checksum".into());
    }
    let pages_end = at.start;
    let trailer = rkyv::access::<ArchivedTrailer, rancor::Error>(&map[at])
        .map_err(|e| format!("the trailer does not decode: {e}"))?;
    Ok((trailer, pages_end))
}

fn checked_range(pos: u64, len: u64, limit: usize) -> Option<Range<usize>> {
    let (pos, len) = (usize::try_from(pos).ok()?, usize::try_from(len).ok()?);
    let end = pos.checked_add(len)?;
    (pos >= HEADER && pos % ALIGN == 0 && end <= limit).then_some(pos..end)
}

/// A row to write: its JSON text already made (from a snapshot), its
/// values to encode, or none.
pub enum RowSource<'a> {
    Text(Option<&'a [u8]>),
    Values(Option<&'a Vec<Value>>),
}

/// One write for a snapshot file.
pub struct Write<'a> {
    pub key: &'a [u8],
    pub offset: i64,
    pub timestamp: i64,
    pub row: RowSource<'a>,
    pub gone: bool,
}

/// What a new file covers: `from` `None` for a full snapshot (then the
/// files before it are removed once it is in place), else the offset the
/// newest file ends at.
pub struct Span {
    pub from: Option<i64>,
    pub upto: i64,
    pub tombstones: Tombstones,
}

/// Writes `writes` (masks, then the rest in offset order) as the snapshot
/// file `span` describes, made under `schema`, durably, into `dir`; returns
/// it mapped.
pub async fn write<'a>(
    dir: &Path,
    schema: &str,
    span: Span,
    mut writes: impl Iterator<Item = Write<'a>>,
) -> Result<Snapshot, String> {
    let path = Snapshot::path(dir, span.upto);
    let tmp = path.with_extension("rkyv.tmp");
    let ctx = |e: std::io::Error| format!("writing {}: {e}", tmp.display());
    // A fresh inode every time: a write of an earlier, cancelled attempt
    // at the same name may still be in the kernel's hands (io_uring cannot
    // recall a buffered write already running), and it must land in that
    // unlinked file, never in this one once it is renamed and mapped.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(ctx(e)),
    }
    let file = glommio::io::OpenOptions::new()
        .write(true)
        .create_new(true)
        .buffered_open(&tmp)
        .await
        .map_err(|e| ctx(e.into()))?;
    let mut pos = HEADER as u64;
    let mut pages = Vec::new();
    let mut hashes: Vec<(u64, u32)> = Vec::new();
    loop {
        let chunk: Vec<Write> = writes.by_ref().take(PAGE).collect();
        if chunk.is_empty() {
            break;
        }
        let bytes = encode_page(&chunk, &mut hashes, &path)?;
        pages.push((pos, bytes.len() as u64, crc32c::crc32c(&bytes)));
        pos = write_aligned(&file, bytes, pos).await.map_err(ctx)?;
        glommio::yield_if_needed().await;
    }
    hashes.sort_unstable();
    let (hashes, entries) = hashes.into_iter().unzip();
    let bytes = rkyv::to_bytes::<rancor::Error>(&Index { hashes, entries })
        .map_err(|e| format!("encoding the index of {}: {e}", path.display()))?;
    let index = (pos, bytes.len() as u64, crc32c::crc32c(&bytes));
    pos = write_aligned(&file, bytes.to_vec(), pos)
        .await
        .map_err(ctx)?;
    let trailer = Trailer {
        from: span.from,
        upto: span.upto,
        schema: schema.to_string(),
        pages,
        index,
        tombstones: span.tombstones,
    };
    let bytes = rkyv::to_bytes::<rancor::Error>(&trailer)
        .map_err(|e| format!("encoding the trailer of {}: {e}", path.display()))?;
    let header = header(&bytes, pos);
    write_aligned(&file, bytes.to_vec(), pos)
        .await
        .map_err(ctx)?;
    write_aligned(&file, header, 0).await.map_err(ctx)?;
    file.fdatasync().await.map_err(|e| ctx(e.into()))?;
    file.close().await.map_err(|e| ctx(e.into()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("renaming {}: {e}", tmp.display()))?;
    if span.from.is_none() {
        // The new full snapshot holds what the older files did.
        for old in files(dir).filter(|p| *p != path) {
            let _ = std::fs::remove_file(old);
        }
    }
    weir_storage::durable::sync_dir_in_ring(dir)
        .await
        .map_err(|e| e.to_string())?;
    Snapshot::open(&path, schema).map(|(snap, _)| snap)
}

/// One page of writes encoded (rows given as values become their JSON text
/// here); each entry's key hash goes to `hashes` with its place among all
/// the file's entries (for the index).
fn encode_page(
    chunk: &[Write],
    hashes: &mut Vec<(u64, u32)>,
    path: &Path,
) -> Result<Vec<u8>, String> {
    let texts: Vec<Option<Vec<u8>>> = chunk
        .iter()
        .map(|w| match w.row {
            RowSource::Values(Some(v)) => Some(serde_json::to_vec(v).expect("JSON values encode")),
            _ => None,
        })
        .collect();
    let entries: Vec<EntryOut> = chunk
        .iter()
        .zip(&texts)
        .map(|(w, text)| EntryOut {
            key: w.key,
            offset: w.offset,
            timestamp: w.timestamp,
            row: match w.row {
                RowSource::Text(t) => t,
                RowSource::Values(_) => text.as_deref(),
            },
            gone: w.gone,
        })
        .collect();
    let first = hashes.len();
    hashes.extend(
        entries
            .iter()
            .enumerate()
            .map(|(i, e)| (key_hash(e.key), (first + i) as u32)),
    );
    let bytes = rkyv::to_bytes::<rancor::Error>(&Page { entries })
        .map_err(|e| format!("encoding a page of {}: {e}", path.display()))?;
    Ok(bytes.to_vec())
}

/// The file's header: the magic, the version, and the trailer's CRC-32C,
/// place and length (`trailer` is its bytes, written at `pos`).
fn header(trailer: &[u8], pos: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&crc32c::crc32c(trailer).to_le_bytes());
    header.extend_from_slice(&pos.to_le_bytes());
    header.extend_from_slice(&(trailer.len() as u64).to_le_bytes());
    header
}

/// Writes `bytes` at `pos`; returns where the next archive starts.
async fn write_aligned(
    file: &glommio::io::BufferedFile,
    bytes: Vec<u8>,
    pos: u64,
) -> std::io::Result<u64> {
    let len = bytes.len();
    let n = file.write_at(bytes, pos).await?;
    if n != len {
        return Err(std::io::Error::other(format!(
            "short write ({n} of {len} bytes)"
        )));
    }
    Ok((pos + len as u64).next_multiple_of(ALIGN as u64))
}
