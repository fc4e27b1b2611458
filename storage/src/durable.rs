//! Small files written durably: replaced whole (the catalog, producer id
//! blocks, a partition's log start) or written once (a sealed segment's
//! indexes, producer-state snapshots), and directories synced.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use glommio::io::OpenOptions;

use crate::StorageError;

/// Replaces `path` with `body` so that a crash at any moment leaves either
/// the old file or the new one, whole: a temporary file beside it is
/// written and fsynced, renamed over it, and the directory fsynced. The
/// file is readable by the node's user only (the catalog holds password
/// hashes).
pub fn replace(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!("{name}.tmp"));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A temporary file left by a crash may have other permissions.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Writes a small file through io_uring (buffered) and syncs it.
pub async fn write_small_file(path: &Path, data: Vec<u8>) -> Result<(), StorageError> {
    let ctx = || format!("writing {}", path.display());
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .buffered_open(path)
        .await
        .map_err(|e| StorageError::io(ctx(), e))?;
    let len = data.len();
    let n = f
        .write_at(data, 0)
        .await
        .map_err(|e| StorageError::io(ctx(), e))?;
    if n != len {
        return Err(StorageError::Io(format!(
            "{}: short write ({n} of {len} bytes)",
            ctx()
        )));
    }
    f.fdatasync()
        .await
        .map_err(|e| StorageError::io(ctx(), e))?;
    f.close().await.map_err(|e| StorageError::io(ctx(), e))?;
    Ok(())
}

/// Makes a directory's entries durable through io_uring (an fsync of the
/// directory in the ring, the vendored glommio's `BufferedFile::fsync`):
/// the shard's thread goes on serving meanwhile. The append path's syncs
/// (a segment roll) use this one; a sync that is rare and off that path
/// may use the blocking `sync_dir`.
pub async fn sync_dir_in_ring(dir: &Path) -> Result<(), StorageError> {
    let ctx = || format!("syncing directory {}", dir.display());
    let d = OpenOptions::new()
        .read(true)
        .buffered_open(dir)
        .await
        .map_err(|e| StorageError::io(ctx(), e))?;
    let synced = d.fsync().await.map_err(|e| StorageError::io(ctx(), e));
    let closed = d.close().await.map_err(|e| StorageError::io(ctx(), e));
    synced.and(closed)
}

/// Makes a directory's entries durable (after creating or removing a file).
pub fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::Io(format!("syncing directory {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_whole_and_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("weir-durable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("thing.json");
        super::replace(&path, b"one").unwrap();
        super::replace(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("thing.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    #[test]
    fn a_directory_syncs_in_the_ring_and_a_missing_one_is_named() {
        let dir = std::env::temp_dir().join(format!("weir-dirsync-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("new-file"), b"x").unwrap();
        let d = dir.clone();
        crate::testing::run_local(move || async move {
            super::sync_dir_in_ring(&d).await.unwrap();
            let missing = d.join("no-such-directory");
            let err = super::sync_dir_in_ring(&missing).await.unwrap_err();
            assert!(err.to_string().contains("no-such-directory"), "{err}");
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
