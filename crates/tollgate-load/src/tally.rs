//! What one load task saw: answers by outcome and their latency.

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::LoadError;

/// What one task saw.
pub(crate) struct Tally {
    pub(crate) latency: Histogram<u64>,
    pub(crate) allowed: u64,
    pub(crate) denied: u64,
    pub(crate) other: u64,
    /// Of `other`, calls abandoned without an answer ([`crate::clock::Clock::call`]).
    pub(crate) timed_out: u64,
    /// When the last decision (admitted or refused) came.
    pub(crate) last_decision: Option<Instant>,
    /// When the last failure (`other`) came.
    pub(crate) last_failure: Option<Instant>,
}

/// How one call was answered.
pub(crate) enum Outcome {
    /// Admitted (HTTP 200, gRPC `OK`).
    Allowed,
    /// Refused (HTTP 429, gRPC `OVER_LIMIT`).
    Denied,
    /// Anything else that still came back as an answer.
    Other,
}

impl Tally {
    pub(crate) fn new() -> Result<Tally, LoadError> {
        Ok(Tally {
            latency: new_histogram()?,
            allowed: 0,
            denied: 0,
            other: 0,
            timed_out: 0,
            last_decision: None,
            last_failure: None,
        })
    }

    /// Counts an answer and its latency since `sent`.
    pub(crate) fn answered(&mut self, sent: Instant, outcome: Outcome) {
        let now = Instant::now();
        self.latency.saturating_record(
            now.saturating_duration_since(sent)
                .as_micros()
                .try_into()
                .unwrap_or(u64::MAX),
        );
        match outcome {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Denied => self.denied += 1,
            Outcome::Other => {
                self.other += 1;
                self.last_failure = Some(now);
                return;
            }
        }
        self.last_decision = Some(now);
    }

    /// Counts a call that failed without an answer (no latency recorded).
    pub(crate) fn failed(&mut self) {
        self.other += 1;
        self.last_failure = Some(Instant::now());
    }

    /// Counts a call (or connect) abandoned without an answer, at its timeout or at the end
    /// of the run's grace: a failure, as `other`, and among the timed out.
    pub(crate) fn timed_out(&mut self) {
        self.failed();
        self.timed_out += 1;
    }
}

/// A latency histogram: 1 µs to 60 s, 3 significant digits.
pub(crate) fn new_histogram() -> Result<Histogram<u64>, LoadError> {
    Ok(Histogram::new_with_bounds(1, 60_000_000, 3)?)
}
