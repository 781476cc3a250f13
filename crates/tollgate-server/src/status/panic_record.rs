//! The panics the process's hook has seen (`server::report_panics`), for the status page: how
//! many, and the last one's time, thread and source place.
//!
//! Not its message: a message may quote whatever the code had at hand (a key, a request),
//! and the page is safe to expose inside a cluster; the log has the message. Written from
//! the panic hook, so it never waits: the count is an atomic, and the last panic is kept
//! only if its lock is free (two panics at once keep one of them, and count both).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicU64 = AtomicU64::new(0);
static LAST: Mutex<Option<LastPanic>> = Mutex::new(None);

/// What the page shows of the panics since the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanicsSeen {
    /// How many.
    pub count: u64,
    /// The last one (`None`: none).
    pub last: Option<LastPanic>,
}

/// One panic, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastPanic {
    /// When.
    pub at: SystemTime,
    /// The thread's name (`unnamed` without one).
    pub thread: String,
    /// The source place, `file:line:column` (`unknown` without one).
    pub location: String,
}

/// From now on panics are recorded (the hook is installed).
pub(crate) fn counting() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// Counts a panic of `thread` at `location` and keeps it as the last one.
pub(crate) fn record(thread: &str, location: String) {
    COUNT.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut last) = LAST.try_lock() {
        *last = Some(LastPanic {
            at: SystemTime::now(),
            thread: thread.to_owned(),
            location,
        });
    }
}

/// The panics seen since the start; `None` when no hook records them (a program that embeds
/// the server without `server::report_panics`): "none" would then be a claim, not a count.
pub fn seen() -> Option<PanicsSeen> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    let last = LAST.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Some(PanicsSeen {
        count: COUNT.load(Ordering::Relaxed),
        last,
    })
}
