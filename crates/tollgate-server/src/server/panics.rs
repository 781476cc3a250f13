//! A panic is a bug, and an operator must hear of it: counted, logged, alerted.
//!
//! Without a hook, a panic prints one unstructured line to stderr and is otherwise silent:
//! a panicking request lost its connection and answered nothing, and a panicking
//! background task (the history sampler, the lease sweep, a reloader) stopped for good while
//! the service went on as if it ran. The hook counts every panic in
//! `tollgate_panics_total` (alert `TollgatePanicked`), logs it as an error event with its
//! thread, place and message, keeps its time, thread and place for the status page
//! ([`panic_record`]), then hands it to the hook that was there before (Rust's
//! default prints it, with a backtrace under `RUST_BACKTRACE`, so the line appears twice on
//! stderr: once as the log's). Panics that are caught count too (a request's handler,
//! answered 500; a status read's render): each is a bug.

use std::panic::{self, PanicHookInfo};
use std::sync::Once;

use crate::status::panic_record;

/// Installs the hook, once per process (later calls do nothing). `main` calls it for
/// `tollgate serve`; it is not part of [`super::Server::run`], so that a program embedding
/// the server keeps its own hook unless it asks.
pub fn report_panics() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // The recorder first, and the counter's handle taken now: the hook only adds to it,
        // with no registry lookup (and no lock) while a thread unwinds.
        let _ = crate::metrics::handle();
        let counter = crate::metrics::panics();
        panic_record::counting();
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            counter.increment(1);
            let thread = std::thread::current();
            let thread = thread.name().unwrap_or("unnamed");
            let location = info
                .location()
                .map_or_else(|| "unknown".into(), ToString::to_string);
            tracing::error!(
                thread,
                location,
                message = message(info),
                "panicked: a bug (counted in tollgate_panics_total)"
            );
            panic_record::record(thread, location);
            previous(info);
        }));
    });
}

/// The panic's message, when it has one.
fn message<'a>(info: &'a PanicHookInfo<'_>) -> &'a str {
    info.payload_as_str().unwrap_or("(not a string)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count as the Prometheus exposition shows it.
    fn panics_counted() -> u64 {
        let text = crate::metrics::handle().render();
        text.lines()
            .find_map(|line| line.strip_prefix("tollgate_panics_total "))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no tollgate_panics_total in:\n{text}"))
    }

    #[test]
    fn a_panic_is_counted_and_kept_for_the_page() {
        report_panics();
        let before = panics_counted();
        let outcome = std::thread::Builder::new()
            .name("tollgate-panic-test".into())
            .spawn(|| panic!("on purpose"))
            .expect("spawn")
            .join();
        assert!(outcome.is_err(), "the thread panicked");
        // Other tests of this binary may panic meanwhile (and be counted): at least ours.
        let after = panics_counted();
        assert!(after > before, "{before} panics before, {after} after");
        let seen = panic_record::seen().expect("recorded once the hook is installed");
        assert!(seen.count >= 1, "{seen:?}");
        let last = seen.last.expect("the last panic is kept");
        assert!(last.location.contains(".rs:"), "{last:?}");
        // A caught panic is counted too.
        let caught = std::panic::catch_unwind(|| panic!("caught on purpose"));
        assert!(caught.is_err());
        assert!(panics_counted() > after, "a caught panic was not counted");
    }
}
