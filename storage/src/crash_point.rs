//! Crash points: `WEIR_CRASH_AT=<name>` in a node's environment makes it
//! abort, as a kill -9 would stop it (no flush, no clean-up, nothing
//! answered), the first time it reaches the point of that name. A test uses
//! one to stop the node between two steps that no signal sent from outside
//! could reliably fall between, then restarts it without the variable and
//! checks what recovery makes of it. Unset, a point costs one comparison.
//!
//! The points:
//! - `txn-prepared`: a transaction's Prepare state is durable and EndTxn
//!   not yet answered; none of its markers is written.
//! - `txn-marked`: every marker of the transaction is durable and its
//!   offsets settled; its Complete state is not written.
//! - `compaction-cleaned`: a cleaned segment and its indexes are durable
//!   beside the log, not yet committed.
//! - `compaction-committed`: the cleaned segment is committed (renamed to
//!   its swap name); the segments it replaces are all still there.
//! - `compaction-replaced`: the replaced segments are removed; the cleaned
//!   segment does not have its name yet.
//!
//! `WEIR_PANIC_AT=<name>:<topic>` makes the node *panic* (as a bug would)
//! where it reaches the point of that name for that topic, on whichever
//! shard that is; a test checks that the panic ends the whole process.
//! The panic points:
//! - `fetch`: the owner shard is about to read a partition of the topic
//!   for a fetch.
//!
//! The storage crate's own unit tests set a point per thread
//! (`stop_here_in_tests`) and `reached` answers true there instead, so the
//! caller returns as if the process had stopped.

use std::sync::OnceLock;

#[cfg(test)]
thread_local! {
    static TEST_AT: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// In this crate's tests: makes `reached(name)` answer true on this thread.
#[cfg(test)]
pub fn stop_here_in_tests(name: Option<&'static str>) {
    TEST_AT.with(|t| t.set(name));
}

/// Aborts the process if `WEIR_CRASH_AT` names this point. (True only in
/// this crate's tests, at the point `stop_here_in_tests` set.)
pub fn reached(name: &str) -> bool {
    #[cfg(test)]
    if TEST_AT.with(|t| t.get()) == Some(name) {
        return true;
    }
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("WEIR_CRASH_AT").ok());
    if at.as_deref() == Some(name) {
        log::error!("crash point {name} reached (WEIR_CRASH_AT): aborting");
        std::process::abort();
    }
    false
}

/// Panics if `WEIR_PANIC_AT` is `{name}:{topic}`. Unset, a point costs
/// one comparison.
pub fn panic_point(name: &str, topic: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let Some(at) = AT.get_or_init(|| std::env::var("WEIR_PANIC_AT").ok()) else {
        return;
    };
    if at.split_once(':') == Some((name, topic)) {
        panic!("panic point {name}:{topic} reached (WEIR_PANIC_AT)");
    }
}
