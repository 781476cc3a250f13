//! [`Clock`]: when a run stops sending, how long one call may take, and when the run stops
//! waiting.
//!
//! Why: a service that accepts a connection and never answers must not hold the run, and its
//! report, forever. Every call and every connect gets the timeout (`--timeout`); one that
//! takes longer is abandoned and counted as `other` (timed out). No call is waited for past
//! [`Clock::stop`], the end of the run plus a grace of the timeout but at most [`MAX_GRACE`]:
//! a call still in flight then is abandoned and counted the same way, and the report is
//! printed. A failure without an answer (a refused connection, a reset) is followed by a
//! short pause ([`Clock::back_off`]), so that a dead service is retried until the end of
//! the run rather than spun on.

use std::time::{Duration, Instant};

use tokio::time::error::Elapsed;

/// The longest a run waits for its calls in flight after its end.
pub(crate) const MAX_GRACE: Duration = Duration::from_secs(2);

/// The first pause after a failure without an answer; it doubles with each failure in a row,
/// up to [`MAX_BACK_OFF`].
const FIRST_BACK_OFF: Duration = Duration::from_millis(10);

/// The longest pause between two attempts on a service that does not answer.
const MAX_BACK_OFF: Duration = Duration::from_millis(200);

/// The times of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// No call is sent after it.
    deadline: Instant,
    /// No call is waited for after it.
    stop: Instant,
    /// How long one call (or connect) may take.
    timeout: Duration,
}

impl Clock {
    /// A run of `duration` from now whose calls may take `timeout` each.
    pub(crate) fn start(duration: Duration, timeout: Duration) -> Clock {
        let deadline = Instant::now() + duration;
        Clock {
            deadline,
            stop: deadline + timeout.min(MAX_GRACE),
            timeout,
        }
    }

    /// Whether another call may be sent.
    pub(crate) fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// When the run stops waiting for its calls.
    pub(crate) fn stop(&self) -> Instant {
        self.stop
    }

    /// `call`, abandoned after the timeout or at [`Clock::stop`], whichever comes first.
    ///
    /// # Errors
    /// [`Elapsed`] when it was abandoned.
    pub(crate) async fn call<F: Future>(&self, call: F) -> Result<F::Output, Elapsed> {
        let until = (Instant::now() + self.timeout).min(self.stop);
        tokio::time::timeout_at(until.into(), call).await
    }

    /// The pause after the `failures`-th failure without an answer in a row: 10 ms, doubled
    /// each time up to 200 ms, and never past the end of the run.
    pub(crate) async fn back_off(&self, failures: u32) {
        let pause = FIRST_BACK_OFF
            .saturating_mul(1 << failures.saturating_sub(1).min(16))
            .min(MAX_BACK_OFF);
        let until = (Instant::now() + pause).min(self.deadline);
        tokio::time::sleep_until(until.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that never ends is abandoned: at its timeout, or at the end of the grace when
    /// that comes first (a run of 0 s has only its grace left).
    #[tokio::test]
    async fn a_call_that_never_ends_is_abandoned() {
        let clock = Clock::start(Duration::ZERO, Duration::from_millis(50));
        let outer = Duration::from_secs(30);
        let waited = tokio::time::timeout(outer, clock.call(std::future::pending::<()>())).await;
        assert!(matches!(waited, Ok(Err(_))), "{waited:?}");
        assert!(!clock.running());
        let quick = clock.call(async { 7 }).await;
        assert_eq!(quick.ok(), Some(7));
    }

    /// The grace after the end is the timeout, at most [`MAX_GRACE`].
    #[test]
    fn the_grace_is_the_timeout_at_most_two_seconds() {
        let short = Clock::start(Duration::ZERO, Duration::from_millis(300));
        assert_eq!(short.stop - short.deadline, Duration::from_millis(300));
        let long = Clock::start(Duration::ZERO, Duration::from_secs(60));
        assert_eq!(long.stop - long.deadline, MAX_GRACE);
    }
}
