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
