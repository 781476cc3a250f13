//! At most one log line per second for an event that can happen on every request.
//!
//! A dead store or a full memory store under load would otherwise write one line per request.
//! The lines skipped are counted and reported with the next one, so nothing goes unseen; the
//! exact counts are in the metrics. It reads the system clock, not an injected one: it paces
//! what a person reads, not a decision.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Clock, SystemClock};

/// The shortest interval between two lines (µs).
const INTERVAL_US: u64 = 1_000_000;

/// Lets one line through per second; counts the rest. Public for the service's crates, whose
/// listeners log events of the same kind.
#[derive(Debug, Default)]
pub struct LogThrottle {
    /// When the last line was let through (µs since the epoch).
    last: AtomicU64,
    /// Lines held back since.
    skipped: AtomicU64,
}

impl LogThrottle {
    /// A throttle that has let no line through yet (for a `static`).
    #[must_use]
    pub const fn new() -> LogThrottle {
        LogThrottle {
            last: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be written now; `None` (and
    /// the line counted) otherwise.
    pub fn admit(&self) -> Option<u64> {
        let now = SystemClock.now().as_micros();
        let last = self.last.load(Ordering::Relaxed);
        if now.saturating_sub(last) < INTERVAL_US
            || self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.skipped.swap(0, Ordering::Relaxed))
    }
}
