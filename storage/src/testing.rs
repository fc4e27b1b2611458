//! Helpers for this workspace's tests (they are compiled in, being tiny,
//! so other crates' tests reach them).

/// Runs `f` on a fresh glommio executor of its own thread and waits for it.
pub fn run_local<F: std::future::Future<Output = ()> + 'static>(
    f: impl FnOnce() -> F + Send + 'static,
) {
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("join");
}

/// Flips one bit at `at` of the file at `path` (damage at rest), synced.
pub fn flip_bit(path: &std::path::Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}
