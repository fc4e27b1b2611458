//! Refusals in the log, bounded: a client that keeps sending what is
//! refused (retrying against a full disk, a bad record in a typed table)
//! would otherwise log a line per attempt. In each window a shard logs a
//! refusal once per distinct line, and at most `MAX_LINES` lines; how many
//! it left out is logged with the first refusal of a later window.

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(10);
const MAX_LINES: usize = 50;

/// One shard's lines in the current window.
#[derive(Default)]
struct Window {
    start: Option<Instant>,
    /// Hashes of the lines logged in this window.
    logged: HashSet<u64>,
    quiet: u64,
}

impl Window {
    /// A refusal whose line hashes to `line` at `now`: whether to log it,
    /// and the refusals left out of the window that just ended (with its
    /// start).
    fn admit(&mut self, now: Instant, line: u64) -> (bool, Option<(u64, Instant)>) {
        let mut ended = None;
        match self.start {
            Some(t) if now.duration_since(t) < WINDOW => {}
            t => {
                if let Some(t) = t.filter(|_| self.quiet > 0) {
                    ended = Some((self.quiet, t));
                }
                *self = Window {
                    start: Some(now),
                    ..Window::default()
                };
            }
        }
        if self.logged.len() < MAX_LINES && self.logged.insert(line) {
            (true, ended)
        } else {
            self.quiet += 1;
            (false, ended)
        }
    }
}

thread_local! {
    static WINDOW_NOW: RefCell<Window> = RefCell::new(Window::default());
}

/// Logs `line` (why something was refused) as a warning, unless this shard
/// logged the same line in the current window or has logged `MAX_LINES`.
pub fn log(line: std::fmt::Arguments<'_>) {
    let now = Instant::now();
    let text = line.to_string();
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    let (log_this, ended) = WINDOW_NOW.with(|w| w.borrow_mut().admit(now, h.finish()));
    if let Some((quiet, since)) = ended {
        log::warn!(
            "{quiet} more refusals in the {:.0?} from {:.0?} ago were not logged (repeats, or past {MAX_LINES} lines)",
            WINDOW,
            now.duration_since(since)
        );
    }
    if log_this {
        log::warn!("{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_each_line_once_per_window_and_counts_the_rest() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = Window::default();
        // Distinct lines are logged; a repeat is counted instead.
        assert_eq!(w.admit(at(0), 1), (true, None));
        assert_eq!(w.admit(at(1), 2), (true, None));
        for k in 0..20 {
            assert_eq!(w.admit(at(2 + k), 1), (false, None));
        }
        // No more than MAX_LINES distinct lines in a window.
        for line in 3..MAX_LINES as u64 + 1 {
            assert_eq!(w.admit(at(30), line), (true, None));
        }
        assert_eq!(w.admit(at(31), 1000), (false, None));
        // The next window logs again and reports the 21 left out.
        let later = t0 + WINDOW + Duration::from_millis(1);
        assert_eq!(w.admit(later, 1), (true, Some((21, t0))));
        // Nothing was left out of that window: no count with the next.
        assert_eq!(w.admit(later + WINDOW, 1), (true, None));
    }
}
