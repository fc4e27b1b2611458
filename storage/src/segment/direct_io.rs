//! The direct-I/O probe each shard runs once before opening segments (see
//! `prepare_direct_io`).

use std::path::Path;

use super::ALIGN;
use crate::StorageError;

/// Prepares this thread's io_uring for direct I/O under `dir`, and checks
/// that it works. Call once per shard before opening any segment.
///
/// glommio decides per block device (and per thread) whether reads may use
/// the polled ring by probing the first file opened; on an empty file that
/// probe reads nothing and wrongly succeeds, after which every read fails with
/// EOPNOTSUPP (seen on virtio disks). Opening a file that holds a block first
/// makes the probe real.
pub async fn prepare_direct_io(dir: &Path) -> Result<(), StorageError> {
    // One probe file per caller: shards start together, and one shard
    // rewriting a shared probe while another reads it reads 0 bytes.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(".direct-io-probe-{n}"));
    std::fs::write(&probe, vec![0u8; ALIGN as usize]).map_err(|e| {
        StorageError::Io(format!(
            "data directory {} is not writable: {e}",
            dir.display()
        ))
    })?;
    let file = glommio::io::DmaFile::open(&probe)
        .await
        .map_err(|e| StorageError::io(format!("opening {} for direct I/O", probe.display()), e))?;
    let read = file
        .read_at(0, ALIGN as usize)
        .await
        .map_err(|e| StorageError::io(format!("direct I/O read of {}", probe.display()), e))?;
    if read.len() != ALIGN as usize {
        return Err(StorageError::Io(format!(
            "direct I/O read of {} returned {} bytes, not {ALIGN}",
            probe.display(),
            read.len()
        )));
    }
    let _ = file.close().await;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
