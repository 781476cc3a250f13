//! [`Report`]: the totals of a run, and the two lines printed for it.

use std::io::Write;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Totals of a run.
#[derive(Debug)]
pub struct Report {
    /// Checks admitted (HTTP 200, gRPC `OK`).
    pub allowed: u64,
    /// Checks refused (HTTP 429, gRPC `OVER_LIMIT`).
    pub denied: u64,
    /// Anything else (503, 4xx, gRPC errors and `UNKNOWN`, connection errors).
    pub other: u64,
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
        writeln!(
            out,
            "{} {what} in {:.1}s over {over}: {:.0} decisions/s ({} allowed, {} denied, {} other)",
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
