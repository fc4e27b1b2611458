//! The shard's journal: group commit across all of a shard's partitions.
//!
//! Without it each partition's flush is its own O_DSYNC write, so a shard
//! whose produce requests touch K partitions pays K device writes and K
//! device flushes (on a VM each a trip through the hypervisor). With it a
//! flush writes its segment bytes with a plain direct write (no sync) and
//! hands the same bytes, as a record naming the segment file and position,
//! to the shard's journal; the journal writes every record handed to it
//! meanwhile in one O_DSYNC write, and the flushes are durable when that
//! write lands. One device write and one sync per flush window, whatever
//! partitions the window touched.
//!
//! A shard keeps two journal files (`journal/<shard>-a.wj`, `-b.wj`),
//! written in turn from the start: when the one being written is full,
//! the other is taken, once its **checkpoint** ended: every segment file
//! its records wrote was synced (after every segment write of a flush
//! journaled before the switch landed), so nothing in it is needed again.
//!
//! Each write is one block-aligned piece: a header (`WJ01`, the file's
//! sequence number, the records' length, their CRC-32C), the records, and
//! zeros to the next block. A file's sequence number is new each time it
//! is taken, so a write left from its previous round never passes for a
//! current one; a torn write fails its CRC. Replay (`replay`, at the
//! node's start, before any log opens) reads each file's writes while
//! they are whole and in sequence, and writes each data record's bytes
//! back into its segment file at its position (a file since deleted is
//! skipped), syncs the files, and empties the journal.
//!
//! A record is dropped from replay by a later **forget** of its file or
//! of a directory holding it, written once the file is durable by itself:
//! a sealed segment (synced; compaction may rewrite it later), and a log
//! about to be cut back or started over (`PartitionLog::quiesce`), whose
//! positions will hold other bytes.

mod replay;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use futures::channel::oneshot;
use glommio::io::{DmaFile, OpenOptions};

use crate::StorageError;

pub use replay::{replay, Replayed};

/// Bytes a journal file holds (a shard's two: 64 MiB of disk at most).
pub const FILE_BYTES: u64 = 32 << 20;
/// The most records one journal write carries (more wait for the next).
const WRITE_BYTES: usize = 4 << 20;
/// A flush's bytes for one segment are split into records of at most this.
const RECORD_DATA_BYTES: usize = 1 << 20;
/// Writes start on block boundaries, so none rewrites a landed one.
const BLOCK: usize = 4096;
const MAGIC: &[u8; 4] = b"WJ01";
/// magic, sequence number (u64), records' length (u32), their CRC-32C.
const WRITE_HEAD: usize = 4 + 8 + 4 + 4;

/// Record kinds.
const DATA: u8 = 1;
const FORGET: u8 = 2;

thread_local! {
    /// The journal of the shard running on this thread, if it keeps one.
    static CURRENT: RefCell<Option<Rc<Journal>>> = const { RefCell::new(None) };
}

/// The journal logs opened on this thread (shard) use; `None`: each
/// partition's flush syncs its own writes (O_DSYNC).
pub fn current() -> Option<Rc<Journal>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `journal` the one logs opened on this thread from now on use.
pub fn install(journal: Option<Rc<Journal>>) {
    CURRENT.with(|c| *c.borrow_mut() = journal);
}

/// Where a node's journal files are.
pub fn journal_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("journal")
}

struct Slot {
    file: Rc<DmaFile>,
    path: PathBuf,
}

/// A record's bytes waiting for a write, and who waits for them.
struct Waiter {
    /// Where the waiter's records end in `pending`.
    end: usize,
    tx: oneshot::Sender<Result<(), StorageError>>,
}

#[derive(Default)]
struct Inner {
    /// The slot being written, its sequence number and next write position.
    active: usize,
    seq: u64,
    pos: u64,
    /// Records not yet handed to a write.
    pending: Vec<u8>,
    waiters: Vec<Waiter>,
    /// Segment files the pending records write.
    pending_files: HashMap<PathBuf, Rc<DmaFile>>,
    /// Segment files the active slot's records wrote (synced at its
    /// checkpoint).
    active_files: HashMap<PathBuf, Rc<DmaFile>>,
    writing: bool,
    /// The other slot was checkpointed: it may be taken.
    other_free: bool,
    free_waiters: Vec<oneshot::Sender<()>>,
    /// Flushes journaled whose segment writes have not all landed.
    tickets: BTreeSet<u64>,
    next_ticket: u64,
    ticket_waiters: Vec<oneshot::Sender<()>>,
}

/// A shard's journal. Lives on its shard's thread.
pub struct Journal {
    data_dir: PathBuf,
    /// Bytes each file holds (`FILE_BYTES`; less in tests).
    file_bytes: u64,
    slots: [Slot; 2],
    inner: RefCell<Inner>,
    /// Journal writes and their bytes (for the node's counters).
    writes: Cell<u64>,
    written_bytes: Cell<u64>,
}

/// A flush's records in the journal. `durable` completes when the journal
/// write carrying them landed; dropping the ticket says the flush's own
/// segment writes have landed (or failed), so a checkpoint may sync them.
pub struct Ticket {
    journal: Rc<Journal>,
    number: u64,
    rx: Option<oneshot::Receiver<Result<(), StorageError>>>,
}

impl Ticket {
    /// Completes when the records are durable in the journal.
    pub async fn durable(&mut self) -> Result<(), StorageError> {
        match self.rx.take() {
            Some(rx) => rx.await.unwrap_or_else(|_| {
                Err(StorageError::Io(
                    "the journal stopped before the records were durable".into(),
                ))
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.journal.inner.borrow_mut();
        inner.tickets.remove(&self.number);
        for w in inner.ticket_waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

/// One segment's part of a flush, as the journal records it.
pub struct SegmentBytes<'a> {
    pub path: &'a Path,
    pub file: &'a Rc<DmaFile>,
    /// File position of `bytes[0]`.
    pub pos: u64,
    pub bytes: &'a [u8],
}

impl Journal {
    /// Opens (or makes) shard `shard`'s two journal files. Run after
    /// `replay`, which emptied them; `first_seq` is above every sequence
    /// number they ever held (`Replayed::next_seq`).
    pub async fn open(
        data_dir: &Path,
        shard: usize,
        first_seq: u64,
    ) -> Result<Rc<Journal>, StorageError> {
        Self::open_sized(data_dir, shard, first_seq, FILE_BYTES).await
    }

    pub(crate) async fn open_sized(
        data_dir: &Path,
        shard: usize,
        first_seq: u64,
        file_bytes: u64,
    ) -> Result<Rc<Journal>, StorageError> {
        let dir = journal_dir(data_dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| StorageError::Io(format!("creating {}: {e}", dir.display())))?;
        let mut slots = Vec::new();
        for name in ["a", "b"] {
            let path = dir.join(format!("{shard}-{name}.wj"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .custom_flags(libc::O_DSYNC)
                .dma_open(&path)
                .await
                .map_err(|e| StorageError::io(format!("opening {}", path.display()), e))?;
            // Not allocated ahead: a file grows as it is first written (its
            // first round's syncs write its size too), so a small disk is
            // not taken by journals it has no data for.
            slots.push(Slot {
                file: Rc::new(file),
                path,
            });
        }
        crate::durable::sync_dir(&dir)?;
        let [a, b]: [Slot; 2] = slots.try_into().ok().expect("two slots");
        Ok(Rc::new(Journal {
            data_dir: data_dir.to_path_buf(),
            file_bytes,
            slots: [a, b],
            inner: RefCell::new(Inner {
                seq: first_seq,
                other_free: true,
                ..Inner::default()
            }),
            writes: Cell::new(0),
            written_bytes: Cell::new(0),
        }))
    }

    /// Journal writes so far, and the bytes they wrote.
    pub fn counters(&self) -> (u64, u64) {
        (self.writes.get(), self.written_bytes.get())
    }

    /// Hands a flush's segment bytes to the journal (copied now) and
    /// starts a write unless one is in flight (the next one takes them).
    pub fn record_flush<'a>(
        self: &Rc<Self>,
        parts: impl IntoIterator<Item = SegmentBytes<'a>>,
    ) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let number = {
            let mut inner = self.inner.borrow_mut();
            for p in parts {
                let rel = self.relative(p.path);
                for (i, chunk) in p.bytes.chunks(RECORD_DATA_BYTES).enumerate() {
                    let pos = p.pos + (i * RECORD_DATA_BYTES) as u64;
                    encode(&mut inner.pending, DATA, &rel, Some((pos, chunk)));
                }
                inner
                    .pending_files
                    .entry(p.path.to_path_buf())
                    .or_insert_with(|| p.file.clone());
            }
            let end = inner.pending.len();
            inner.waiters.push(Waiter { end, tx });
            let number = inner.next_ticket;
            inner.next_ticket += 1;
            inner.tickets.insert(number);
            number
        };
        self.write_soon();
        Ticket {
            journal: self.clone(),
            number,
            rx: Some(rx),
        }
    }

    /// Writes a forget of `path` (a segment file, or a directory and all
    /// under it) and completes when it is durable: records written before
    /// it are not replayed into it. The caller made `path` durable first.
    pub async fn forget(self: &Rc<Self>, path: &Path) -> Result<(), StorageError> {
        let rx = {
            let mut inner = self.inner.borrow_mut();
            let rel = self.relative(path);
            encode(&mut inner.pending, FORGET, &rel, None);
            let (tx, rx) = oneshot::channel();
            let end = inner.pending.len();
            inner.waiters.push(Waiter { end, tx });
            rx
        };
        self.write_soon();
        rx.await
            .unwrap_or_else(|_| Err(StorageError::Io("the journal stopped".into())))
    }

    /// `path` as records name it: relative to the data directory.
    fn relative(&self, path: &Path) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let rel = path.strip_prefix(&self.data_dir).unwrap_or(path);
        rel.as_os_str().as_bytes().to_vec()
    }

    fn write_soon(self: &Rc<Self>) {
        {
            let mut inner = self.inner.borrow_mut();
            if inner.writing || inner.pending.is_empty() {
                return;
            }
            inner.writing = true;
        }
        let journal = self.clone();
        glommio::spawn_local(async move {
            loop {
                journal.write_once().await;
                let mut inner = journal.inner.borrow_mut();
                if inner.pending.is_empty() {
                    inner.writing = false;
                    break;
                }
            }
        })
        .detach();
    }

    /// One journal write: the pending records (up to `WRITE_BYTES`, whole
    /// records), in the active slot, or in the other one once it is free
    /// when they do not fit. Answers their waiters.
    async fn write_once(self: &Rc<Self>) {
        let take = {
            let inner = self.inner.borrow();
            whole_records(
                &inner.pending,
                WRITE_BYTES.min(self.file_bytes as usize / 4),
            )
        };
        let len = padded(WRITE_HEAD + take) as u64;
        if self.inner.borrow().pos + len > self.file_bytes {
            self.rotate().await;
        }
        let (slot, seq, pos, records, waiters) = {
            let mut inner = self.inner.borrow_mut();
            let records: Vec<u8> = inner.pending.drain(..take).collect();
            let split = inner.waiters.partition_point(|w| w.end <= take);
            let waiters: Vec<_> = inner.waiters.drain(..split).collect();
            for w in inner.waiters.iter_mut() {
                w.end -= take;
            }
            let files: Vec<_> = inner.pending_files.drain().collect();
            inner.active_files.extend(files);
            (inner.active, inner.seq, inner.pos, records, waiters)
        };
        let file = &self.slots[slot].file;
        let mut buf = file.alloc_dma_buffer(len as usize);
        let out = buf.as_bytes_mut();
        out[..4].copy_from_slice(MAGIC);
        out[4..12].copy_from_slice(&seq.to_le_bytes());
        out[12..16].copy_from_slice(&(records.len() as u32).to_le_bytes());
        out[16..20].copy_from_slice(&crc(seq, &records).to_le_bytes());
        out[WRITE_HEAD..WRITE_HEAD + records.len()].copy_from_slice(&records);
        out[WRITE_HEAD + records.len()..].fill(0);
        let result = match file.write_at(buf, pos).await {
            Ok(n) if n as u64 == len => Ok(()),
            Ok(n) => Err(format!("short write ({n} of {len} bytes)")),
            Err(e) => Err(e.to_string()),
        };
        let result = match result {
            Ok(()) => {
                self.inner.borrow_mut().pos = pos + len;
                self.writes.set(self.writes.get() + 1);
                self.written_bytes.set(self.written_bytes.get() + len);
                Ok(())
            }
            // The position stays: the next write goes there again. The
            // flushes that waited fail and write their bytes again.
            Err(why) => {
                let why = format!(
                    "writing the journal {} at {pos}: {why}",
                    self.slots[slot].path.display()
                );
                log::error!("{why}");
                Err(StorageError::Io(why))
            }
        };
        for w in waiters {
            let _ = w.tx.send(result.clone());
        }
    }

    /// Takes the other slot (waiting for its checkpoint) and starts the
    /// checkpoint of the one that was active.
    async fn rotate(self: &Rc<Self>) {
        loop {
            let rx = {
                let mut inner = self.inner.borrow_mut();
                if inner.other_free {
                    break;
                }
                let (tx, rx) = oneshot::channel();
                inner.free_waiters.push(tx);
                rx
            };
            let _ = rx.await;
        }
        let (files, before) = {
            let mut inner = self.inner.borrow_mut();
            inner.active = 1 - inner.active;
            inner.seq += 1;
            inner.pos = 0;
            inner.other_free = false;
            (std::mem::take(&mut inner.active_files), inner.next_ticket)
        };
        let journal = self.clone();
        glommio::spawn_local(async move { journal.checkpoint(files, before).await }).detach();
    }

    /// Syncs the segment files a slot's records wrote, once every flush
    /// journaled before ticket `before` has its segment writes landed;
    /// then the slot may be written again. A failing sync is retried (the
    /// slot stays taken meanwhile, and writes wait when they need it).
    async fn checkpoint(self: Rc<Self>, files: HashMap<PathBuf, Rc<DmaFile>>, before: u64) {
        loop {
            let rx = {
                let mut inner = self.inner.borrow_mut();
                if inner.tickets.first().is_none_or(|&t| t >= before) {
                    break;
                }
                let (tx, rx) = oneshot::channel();
                inner.ticket_waiters.push(tx);
                rx
            };
            let _ = rx.await;
        }
        for (path, file) in files {
            loop {
                match file.fdatasync().await {
                    Ok(()) => break,
                    Err(e) => {
                        log::error!(
                            "journal checkpoint: syncing {}: {e}; retrying in 1 s",
                            path.display()
                        );
                        glommio::timer::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        }
        let mut inner = self.inner.borrow_mut();
        inner.other_free = true;
        for w in inner.free_waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

/// Appends one record: length (u32, of what follows it), kind, path
/// (u16 length and bytes), and for data the position (u64) and bytes.
fn encode(out: &mut Vec<u8>, kind: u8, path: &[u8], data: Option<(u64, &[u8])>) {
    let body = 1 + 2 + path.len() + data.map_or(0, |(_, b)| 8 + b.len());
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&(path.len() as u16).to_le_bytes());
    out.extend_from_slice(path);
    if let Some((pos, bytes)) = data {
        out.extend_from_slice(&pos.to_le_bytes());
        out.extend_from_slice(bytes);
    }
}

/// How many bytes from the start of `records` make whole records of at
/// most `limit` bytes (at least one record).
fn whole_records(records: &[u8], limit: usize) -> usize {
    let mut at = 0;
    while at + 4 <= records.len() {
        let len = u32::from_le_bytes(records[at..at + 4].try_into().expect("4 bytes")) as usize;
        if at > 0 && at + 4 + len > limit {
            break;
        }
        at += 4 + len;
    }
    at
}

fn padded(len: usize) -> usize {
    len.div_ceil(BLOCK) * BLOCK
}

/// A write's CRC-32C: over its sequence number and its records.
fn crc(seq: u64, records: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&seq.to_le_bytes()), records)
}

#[cfg(test)]
mod tests;
