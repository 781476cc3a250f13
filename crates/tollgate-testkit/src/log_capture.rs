//! [`LogCapture`]: what a test's code logs, as text, to count lines in.
//!
//! The throttled logs (one line a second, `tollgate::LogThrottle`) are tested by counting the
//! lines a burst writes; this collects them from a `tracing` subscriber set for the test's
//! thread ([`LogCapture::during`]).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// The log lines written while [`LogCapture::during`] ran, in `tracing`'s plain text format.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// An empty capture.
    pub fn new() -> LogCapture {
        LogCapture::default()
    }

    /// Runs `f` with a subscriber writing to this capture as the thread's default (what `f`
    /// logs on this thread: a current-thread runtime's tasks included, not other threads').
    pub fn during<T>(&self, f: impl FnOnce() -> T) -> T {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f)
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
