//! [`Report`]: the totals of a run, the two lines printed for it, and whether it measured
//! anything ([`Report::verdict`], which decides `tollgate bench`'s exit code).
//!
//! Why a verdict: a run against a service that answers 500 to every check, or garbage, or
//! dies halfway, still prints its report, and a script reading only the exit code must not
//! take it for a measurement.

use std::io::Write;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::LoadError;

/// The share of failed calls (`other`), in percent, above which [`Report::verdict`] fails a
/// run that did decide something.
pub const MAX_FAILED_PERCENT: u64 = 1;

/// The shortest stretch at the end of a run without a decision, while calls failed, that
/// fails it ([`Report::verdict`]); a run of over ten seconds allows 1 % of its duration.
/// A service that dies near the end of a run fails few calls (each failure without an answer
/// is followed by a pause, up to 200 ms), far under 1 %, and its report is still not a
/// measurement of the whole run.
pub const QUIET_END: Duration = Duration::from_millis(100);

/// Totals of a run.
#[derive(Debug)]
pub struct Report {
    /// Checks admitted (HTTP 200, gRPC `OK`).
    pub allowed: u64,
    /// Checks refused (HTTP 429, gRPC `OVER_LIMIT`).
    pub denied: u64,
    /// Anything else (503, 4xx, gRPC errors and `UNKNOWN`, connection errors, calls and
    /// connects that timed out).
    pub other: u64,
    /// Of `other`, calls and connects abandoned without an answer: past the timeout, or
    /// still in flight at the end of the grace after the run.
    pub timed_out: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Latency of every answered check.
    pub latency: Histogram<u64>,
    /// How long the run was to send calls (`--duration`).
    pub duration: Duration,
    /// When, from the start, the last decision came (none: no decision).
    pub last_decision: Option<Duration>,
    /// When, from the start, the last failure (`other`) came (none: no failure).
    pub last_failure: Option<Duration>,
}

impl Report {
    /// Decisions (admitted + refused) per second.
    pub fn decisions_per_sec(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let decisions = (self.allowed + self.denied) as f64;
        decisions / self.elapsed.as_secs_f64()
    }

    /// Whether the run measured the service: an error when it made no decision at all, when
    /// more than [`MAX_FAILED_PERCENT`] % of its calls failed (`other`), or when it ended
    /// failing: calls failed after its last decision, which came more than [`QUIET_END`]
    /// (or 1 % of the run) before its end.
    ///
    /// # Errors
    /// [`LoadError::NoDecisions`], [`LoadError::TooManyFailures`] or
    /// [`LoadError::StoppedDeciding`], saying it in one line.
    pub fn verdict(&self) -> Result<(), LoadError> {
        let calls = self.allowed + self.denied + self.other;
        if self.allowed + self.denied == 0 {
            return Err(LoadError::NoDecisions {
                calls,
                timed_out: self.timed_out,
            });
        }
        if u128::from(self.other) * 100 > u128::from(calls) * u128::from(MAX_FAILED_PERCENT) {
            return Err(LoadError::TooManyFailures {
                calls,
                other: self.other,
                timed_out: self.timed_out,
            });
        }
        let last = self.last_decision.unwrap_or_default();
        let failed_after = self.last_failure.is_some_and(|failure| failure > last);
        if failed_after && self.duration.saturating_sub(last) > QUIET_END.max(self.duration / 100) {
            return Err(LoadError::StoppedDeciding {
                at: last,
                duration: self.duration,
            });
        }
        Ok(())
    }

    /// A latency percentile, µs.
    pub fn percentile_us(&self, q: f64) -> u64 {
        self.latency.value_at_quantile(q)
    }

    /// Prints the two summary lines; `what` names the calls, e.g. `checks of "per_user"`, and
    /// `over` what carried them, e.g. `64 connections`.
    /// Writes the two lines to standard output.
    ///
    /// # Errors
    /// Standard output refused them (closed early by a reader such as `head`).
    pub(crate) fn print(&self, what: &str, over: &str) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        let timed_out = match self.timed_out {
            0 => String::new(),
            n => format!(", {n} of them timed out"),
        };
        writeln!(
            out,
            "{} {what} in {:.1}s over {over}: {:.0} decisions/s ({} allowed, {} denied, {} other{timed_out})",
            self.allowed + self.denied + self.other,
            self.elapsed.as_secs_f64(),
            self.decisions_per_sec(),
            self.allowed,
            self.denied,
            self.other,
        )?;
        writeln!(
            out,
            "latency µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            self.percentile_us(0.5),
            self.percentile_us(0.9),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
            self.latency.max(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(allowed: u64, denied: u64, other: u64, timed_out: u64) -> Report {
        Report {
            allowed,
            denied,
            other,
            timed_out,
            elapsed: Duration::from_secs(1),
            latency: crate::tally::new_histogram().expect("histogram"),
            duration: Duration::from_secs(1),
            last_decision: (allowed + denied > 0).then_some(Duration::from_secs(1)),
            last_failure: (other > 0).then_some(Duration::from_millis(500)),
        }
    }

    /// A run with no decision fails (every check answered 500, or garbage, or nothing at
    /// all), as does one with more than 1 % of failures; 1 % exactly, or a run of refusals
    /// only, passes. The message is one line naming the counts.
    #[test]
    fn a_run_that_measured_nothing_fails() {
        let none = report(0, 0, 30_827, 0).verdict().expect_err("no decisions");
        assert_eq!(
            none.to_string(),
            "no decisions: 0 allowed, 0 denied, 30827 other (0 of them timed out)"
        );
        assert!(matches!(
            report(0, 0, 0, 0).verdict(),
            Err(LoadError::NoDecisions { calls: 0, .. })
        ));
        let many = report(90, 8, 2, 1).verdict().expect_err("2 %");
        assert_eq!(
            many.to_string(),
            "2 of 100 calls failed (1 of them timed out): more than 1 %"
        );
        assert!(report(90, 9, 1, 0).verdict().is_ok(), "1 % exactly");
        assert!(
            report(0, 5, 0, 0).verdict().is_ok(),
            "refusals are decisions"
        );
    }

    /// A service that died 0.3 s before the end of a 5 s run failed few calls (under 1 %)
    /// but made no decision after: the run fails, saying when the decisions stopped. A
    /// failure in the last 100 ms, or failures followed by decisions, do not fail it.
    #[test]
    fn a_run_that_ended_failing_fails() {
        let mut died = report(154_057, 0, 40, 0);
        died.duration = Duration::from_secs(5);
        died.last_decision = Some(Duration::from_millis(4_700));
        died.last_failure = Some(Duration::from_millis(4_990));
        let error = died.verdict().expect_err("ended failing");
        assert_eq!(
            error.to_string(),
            "the service stopped deciding 4.7 s into the 5.0 s run: calls failed after that"
        );
        let mut blip = report(154_057, 0, 40, 0);
        blip.duration = Duration::from_secs(5);
        blip.last_decision = Some(Duration::from_millis(4_950));
        blip.last_failure = Some(Duration::from_millis(4_990));
        assert!(blip.verdict().is_ok(), "the last 100 ms");
        let mut recovered = report(154_057, 0, 40, 0);
        recovered.duration = Duration::from_secs(5);
        recovered.last_decision = Some(Duration::from_millis(5_000));
        recovered.last_failure = Some(Duration::from_millis(2_000));
        assert!(
            recovered.verdict().is_ok(),
            "failures followed by decisions"
        );
    }
}
