//! The part both modes share: start the workers, draw the progress bar, add up the tallies
//! and print the report.
//!
//! The workers bound their own calls ([`Clock`]) and return their tallies by
//! [`Clock::stop`]; one that has not returned [`BACKSTOP`] later (it should have) is
//! abandoned rather than waited for, so the report is printed whatever the service does.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::clock::Clock;
use crate::tally::{Tally, new_histogram};
use crate::{BenchOptions, LoadError, Report};

/// How long after [`Clock::stop`] a worker that has not returned is waited for.
const BACKSTOP: Duration = Duration::from_secs(1);

/// Starts `options.concurrency` tasks of `worker` (given its index and the run's clock, each
/// call bounded by `timeout`), draws the progress bar, adds up the tallies and prints the
/// report (`what` the calls are, `over` what carries them).
pub(crate) async fn load<W, F>(
    options: &BenchOptions,
    timeout: Duration,
    what: &str,
    over: &str,
    worker: W,
) -> Result<Report, LoadError>
where
    W: Fn(u64, Clock) -> F,
    F: Future<Output = Result<Tally, LoadError>> + Send + 'static,
{
    let clock = Clock::start(options.duration, timeout);
    let bar = std::io::stdout()
        .is_terminal()
        .then(|| progress(options.duration));
    let started = Instant::now();
    let tasks: Vec<_> = (0..options.concurrency as u64)
        .map(|n| tokio::spawn(worker(n, clock)))
        .collect();
    if let Some(bar) = &bar {
        while clock.running() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            bar.set_position(started.elapsed().as_millis().try_into().unwrap_or(u64::MAX));
        }
    }
    let mut report = Report {
        allowed: 0,
        denied: 0,
        other: 0,
        timed_out: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram()?,
        duration: options.duration,
        last_decision: None,
        last_failure: None,
    };
    let since_start = |at: Option<Instant>| at.map(|at| at.saturating_duration_since(started));
    let backstop = tokio::time::Instant::from_std(clock.stop() + BACKSTOP);
    for mut task in tasks {
        let tally = match tokio::time::timeout_at(backstop, &mut task).await {
            Ok(joined) => joined??,
            // Its tally is lost; its call in flight is counted as timed out.
            Err(_) => {
                task.abort();
                report.other += 1;
                report.timed_out += 1;
                report.last_failure = report.last_failure.max(since_start(Some(Instant::now())));
                continue;
            }
        };
        report.allowed += tally.allowed;
        report.denied += tally.denied;
        report.other += tally.other;
        report.timed_out += tally.timed_out;
        report.latency.add(&tally.latency)?;
        report.last_decision = report.last_decision.max(since_start(tally.last_decision));
        report.last_failure = report.last_failure.max(since_start(tally.last_failure));
    }
    report.elapsed = started.elapsed();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    report.print(what, over).map_err(LoadError::Output)?;
    Ok(report)
}

fn progress(duration: Duration) -> ProgressBar {
    let bar = ProgressBar::new(duration.as_millis().try_into().unwrap_or(u64::MAX));
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {elapsed}/{duration}") {
        bar.set_style(style);
    }
    bar
}

/// The key index a worker starts from, so workers do not walk the keys in lock step.
pub(crate) fn first_key(worker: u64) -> u64 {
    worker.wrapping_mul(7_919)
}
