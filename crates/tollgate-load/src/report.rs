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
}

impl Report {
    /// Decisions (admitted + refused) per second.
    pub fn decisions_per_sec(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let decisions = (self.allowed + self.denied) as f64;
        decisions / self.elapsed.as_secs_f64()
    }

    /// Whether the run measured the service: an error when it made no decision at all, or
    /// when more than [`MAX_FAILED_PERCENT`] % of its calls failed (`other`).
    ///
    /// # Errors
    /// [`LoadError::NoDecisions`] or [`LoadError::TooManyFailures`], saying it in one line.
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
}
