//! Directories removed without holding a shard: renamed into the data
//! directory's `trash/` (one rename) and removed there by a plain thread.
//!
//! Why: removing a deleted topic is an unlink and an extent free per
//! segment (and, on a file system mounted with `discard`, device discards
//! that delay the syncs issued meanwhile). Done on the catalog shard's
//! thread, it held every partition of that shard for as long as it took.
//! A crash before the thread is done leaves the rest in `trash/`, which
//! the next start empties.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where directories wait to be removed.
pub fn trash_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("trash")
}

/// Moves `dir` into the trash and has it removed in the background; a
/// `dir` that does not exist is already gone. Where it cannot be moved
/// (the trash on another file system), it is removed here and now.
pub fn remove_later(data_dir: &Path, dir: &Path) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let trash = trash_dir(data_dir);
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    // Named after the directory and its parent (a partition's directory
    // is only its number), and unique across restarts.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let to = trash.join(format!(
        "{}~{}.{nanos}.{}",
        name(dir.parent()),
        name(Some(dir)),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let moved = std::fs::create_dir_all(&trash).and_then(|()| std::fs::rename(dir, &to));
    match moved {
        Ok(()) => {
            empty_soon(data_dir);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() => Ok(()),
        Err(e) => {
            log::warn!(
                "moving {} into {}: {e}; removing it in place",
                dir.display(),
                trash.display()
            );
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        }
    }
}

/// Empties `data_dir`'s trash on a thread of its own: one thread at a
/// time, which takes every trash asked for meanwhile (a process may serve
/// more than one data directory: the storage tests do) before it ends.
pub fn empty_soon(data_dir: &Path) {
    // (a thread runs, the trashes it is yet to empty)
    static STATE: Mutex<(bool, Vec<PathBuf>)> = Mutex::new((false, Vec::new()));
    let take = || {
        let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let next = st.1.pop();
        st.0 = next.is_some();
        next
    };
    {
        let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let trash = trash_dir(data_dir);
        if !st.1.contains(&trash) {
            st.1.push(trash);
        }
        if st.0 {
            return;
        }
        st.0 = true;
    }
    let spawned = std::thread::Builder::new()
        .name("weir-trash".into())
        .spawn(move || {
            while let Some(trash) = take() {
                empty(&trash);
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the thread that empties the trash: {e}; emptying it here");
        while let Some(trash) = take() {
            empty(&trash);
        }
    }
}

/// Removes everything in `trash`.
fn empty(trash: &Path) {
    let Ok(entries) = std::fs::read_dir(trash) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        if let Err(e) = removed {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("removing {}: {e}", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_directory_is_gone_at_once_and_emptied_later() {
        let data = std::env::temp_dir().join(format!("weir-trash-{}", std::process::id()));
        let topic = data.join("topics").join("t~1");
        std::fs::create_dir_all(topic.join("0")).unwrap();
        std::fs::write(topic.join("0").join("0.log"), vec![7u8; 1 << 20]).unwrap();
        remove_later(&data, &topic).unwrap();
        assert!(
            !topic.exists(),
            "the topic's directory left its place at once"
        );
        // Removing what is gone already is not an error.
        remove_later(&data, &topic).unwrap();
        // The thread empties the trash; bounded wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::read_dir(trash_dir(&data))
            .unwrap()
            .next()
            .is_some()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the trash was not emptied"
            );
            std::thread::yield_now();
        }
        std::fs::remove_dir_all(&data).unwrap();
    }
}
