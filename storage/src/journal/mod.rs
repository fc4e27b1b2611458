//! The shard's journal: group commit across all of a shard's partitions.
//!
//! Without it each partition's flush is its own O_DSYNC write, so a shard
//! whose produce requests touch K partitions pays K device writes and K
//! device flushes (on a VM each a trip through the hypervisor). With it a
//! flush hands its new bytes, as a record naming the segment file and
//! position, to the shard's journal; the journal writes every record
//! handed to it meanwhile in one O_DSYNC write, and the flushes are durable
//! when that write lands. One device write and one sync per flush window,
//! whatever partitions the window touched. The log writes the bytes into
//! its segment later, in large pieces and without a sync
//! (`PartitionLog::write_out`), keeping them staged in memory until then.
//!
//! A shard keeps two journal files (`journal/<shard>-a.wj`, `-b.wj`),
//! written in turn from the start: when the one being written is full,
//! the other is taken, once its **checkpoint** ended: every log with
//! records in it wrote its journaled bytes out and synced its segments, so
//! nothing in the file is needed again.
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
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use futures::channel::oneshot;
use glommio::io::{DmaFile, OpenOptions};

use crate::log::PartitionLog;
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
    /// Logs (by directory) the pending records are of.
    pending_logs: HashMap<PathBuf, Weak<PartitionLog>>,
    /// Logs with records in the active slot: they write out and sync at
    /// its checkpoint.
    active_logs: HashMap<PathBuf, Weak<PartitionLog>>,
    writing: bool,
    /// The other slot was checkpointed: it may be taken.
    other_free: bool,
    free_waiters: Vec<oneshot::Sender<()>>,
}

/// A shard's journal. Lives on its shard's thread.
pub struct Journal {
    data_dir: PathBuf,
    /// Bytes each file holds (`FILE_BYTES`; less in tests).
    file_bytes: u64,
    slots: [Slot; 2],
    inner: RefCell<Inner>,
    /// Journal writes and their bytes (what the tests check of group
    /// commit; not yet in `/metrics`).
    writes: Cell<u64>,
    written_bytes: Cell<u64>,
}

/// Completes when a flush's records are durable in the journal.
pub struct Landed(oneshot::Receiver<Result<(), StorageError>>);

impl std::future::Future for Landed {
    type Output = Result<(), StorageError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(StorageError::Io(
                    "the journal stopped before the records were durable".into(),
                ))
            })
        })
    }
}

/// One segment's part of a flush, as the journal records it.
pub struct SegmentBytes<'a> {
    pub path: &'a Path,
    /// File position of the first byte.
    pub pos: u64,
    /// The bytes, in pieces (copied once, into the journal's buffer).
    pub pieces: &'a [bytes::Bytes],
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
        crate::durable::sync_dir_in_ring(&dir).await?;
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

    /// Hands a flush of the log in `dir` (`log`, which writes its bytes
    /// out and syncs when a checkpoint asks) to the journal: its segment
    /// bytes are copied now, and a write starts unless one is in flight
    /// (the next one takes them). Completes when they are durable.
    pub fn record_flush<'a>(
        self: &Rc<Self>,
        dir: &Path,
        log: Weak<PartitionLog>,
        parts: impl IntoIterator<Item = SegmentBytes<'a>>,
    ) -> Landed {
        let (tx, rx) = oneshot::channel();
        {
            let mut inner = self.inner.borrow_mut();
            for p in parts {
                let rel = self.relative(p.path);
                let mut pos = p.pos;
                for piece in p.pieces {
                    for chunk in piece.chunks(RECORD_DATA_BYTES) {
                        encode(&mut inner.pending, DATA, &rel, Some((pos, chunk)));
                        pos += chunk.len() as u64;
                    }
                }
            }
            inner.pending_logs.insert(dir.to_path_buf(), log);
            let end = inner.pending.len();
            inner.waiters.push(Waiter { end, tx });
        }
        self.write_soon();
        Landed(rx)
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
        let file = &self.slots[self.inner.borrow().active].file;
        let mut buf = file.alloc_dma_buffer(len as usize);
        let (slot, pos, waiters) = {
            let mut inner = self.inner.borrow_mut();
            let (seq, out) = (inner.seq, buf.as_bytes_mut());
            let records = &inner.pending[..take];
            out[..4].copy_from_slice(MAGIC);
            out[4..12].copy_from_slice(&seq.to_le_bytes());
            out[12..16].copy_from_slice(&(take as u32).to_le_bytes());
            out[16..20].copy_from_slice(&crc(seq, records).to_le_bytes());
            crate::dma_copy::copy(&mut out[WRITE_HEAD..WRITE_HEAD + take], records);
            out[WRITE_HEAD + take..].fill(0);
            crate::dma_copy::fence();
            inner.pending.drain(..take);
            let split = inner.waiters.partition_point(|w| w.end <= take);
            let waiters: Vec<_> = inner.waiters.drain(..split).collect();
            for w in inner.waiters.iter_mut() {
                w.end -= take;
            }
            let logs: Vec<_> = inner.pending_logs.drain().collect();
            inner.active_logs.extend(logs);
            (inner.active, inner.pos, waiters)
        };
        let started = std::time::Instant::now();
        let written = file.write_at(buf, pos).await;
        crate::timeline::note_since("journal_write", started, || format!("{len} bytes"));
        let result = match written {
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
        let logs = {
            let mut inner = self.inner.borrow_mut();
            inner.active = 1 - inner.active;
            inner.seq += 1;
            inner.pos = 0;
            inner.other_free = false;
            std::mem::take(&mut inner.active_logs)
        };
        let journal = self.clone();
        glommio::spawn_local(async move { journal.checkpoint(logs).await }).detach();
    }

    /// Has every log with records in a slot write its journaled bytes out
    /// and sync its segments; then the slot may be written again. A
    /// failing log is retried (the slot stays taken meanwhile, and writes
    /// wait when they need it). A log dropped since (its partition deleted
    /// or moved away) needs nothing.
    async fn checkpoint(self: Rc<Self>, logs: HashMap<PathBuf, Weak<PartitionLog>>) {
        for (dir, log) in logs {
            loop {
                let Some(log) = log.upgrade() else { break };
                match log.write_out_and_sync().await {
                    Ok(()) => break,
                    Err(e) => {
                        log::error!(
                            "journal checkpoint: {}: {e}; retrying in 1 s",
                            dir.display()
                        );
                        drop(log);
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
