//! A panic anywhere in the node ends the process.
//!
//! A shard is one thread running every task of its partitions, groups and
//! connections; a panic unwinds that thread and the others serve on
//! without it, so its partitions and groups wait forever while the process
//! looks alive to its supervisor. Rather than serve part of the node, the
//! process aborts: the supervisor (systemd's `Restart=`, Kubernetes)
//! starts it again and start-up recovery runs, as after a kill -9.

/// Installs the hook: the panic is logged with its thread and a backtrace
/// (or reported as Rust reports it, before logging is set up), and the
/// process aborts (SIGABRT, exit status 134 from a shell) instead of
/// unwinding.
pub fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let backtrace = std::backtrace::Backtrace::force_capture();
        if log::log_enabled!(log::Level::Error) {
            log::error!(
                "thread '{}' panicked: {info}; aborting the process so that it is restarted and recovers\n{backtrace}",
                std::thread::current().name().unwrap_or("unnamed"),
            );
        } else {
            report(info);
            eprintln!("{backtrace}\naborting the process so that it is restarted and recovers");
        }
        std::process::abort();
    }));
}
