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

use std::sync::OnceLock;

/// Aborts the process if `WEIR_CRASH_AT` names this point.
pub fn reached(name: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("WEIR_CRASH_AT").ok());
    if at.as_deref() == Some(name) {
        log::error!("crash point {name} reached (WEIR_CRASH_AT): aborting");
        std::process::abort();
    }
}
