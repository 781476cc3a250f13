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
//! stderr: once as the log's). The log line and the previous hook's report are written for
//! one panic a second per place at most, with the count held back (a panic on the main
//! thread always); every panic is counted and kept. Panics that are caught count too (a
//! request's handler, answered 500; a status read's render): each is a bug.

use std::panic::{self, PanicHookInfo};
use std::sync::{Mutex, Once};

use tollgate::LogThrottle;

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
            panic_record::record(thread, location.clone());
            // One report a second per place (the count held back in the next): a request
            // that panics every time wrote a line or two each, its message perhaps quoting
            // the request. Another place's panic is reported at once, and so is the main
            // thread's (it ends the process).
            let admitted = if thread == "main" {
                Some(0)
            } else {
                admit(&location)
            };
            if let Some(skipped) = admitted {
                tracing::error!(
                    thread,
                    location,
                    message = message(info),
                    skipped,
                    "panicked: a bug (counted in tollgate_panics_total)"
                );
                previous(info);
            }
        }));
    });
}

/// The places panics were reported from, each with its throttle: one report a second per
/// place, for the first [`PLACES`] places; the rest share [`OTHER_PLACES`].
static LINES: Mutex<Vec<(String, LogThrottle)>> = Mutex::new(Vec::new());
static OTHER_PLACES: LogThrottle = LogThrottle::new();
const PLACES: usize = 64;

/// `Some(reports held back)` when a panic at `location` may be reported now.
fn admit(location: &str) -> Option<u64> {
    let mut places = LINES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, throttle)) = places.iter().find(|(at, _)| at == location) {
        return throttle.admit();
    }
    if places.len() < PLACES {
        let throttle = LogThrottle::new();
        let admitted = throttle.admit();
        places.push((location.to_owned(), throttle));
        return admitted;
    }
    OTHER_PLACES.admit()
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

    /// A panic repeated in a loop (a request that panics every time) is reported in the log
    /// once a second at most; each is counted; a panic at another place meanwhile is
    /// reported at once.
    #[test]
    fn panics_in_a_loop_log_a_line_a_second() {
        report_panics();
        let before = panics_counted();
        let capture = tollgate_testkit::LogCapture::new();
        let started = std::time::Instant::now();
        capture.during(|| {
            for _ in 0..50 {
                assert!(std::panic::catch_unwind(|| panic!("again")).is_err());
            }
            assert!(std::panic::catch_unwind(|| panic!("elsewhere")).is_err());
        });
        let took = started.elapsed();
        let text = capture.text();
        let lines = text.matches(" again skipped=").count();
        // One a second (this place is this test's alone): two when the loop crosses one.
        let most = usize::try_from(took.as_secs()).expect("small") + 1;
        assert!(
            (1..=most).contains(&lines),
            "{lines} lines for 50 panics in {took:?}:\n{text}"
        );
        assert_eq!(text.matches(" elsewhere skipped=").count(), 1, "{text}");
        assert!(panics_counted() >= before + 51, "each is counted");
    }
}
