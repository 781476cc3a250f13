//! Where "now" comes from.
//!
//! Algorithms never read a clock: they take `now` as an argument. Only the [`Limiter`]
//! facade and the memory store's sweeper ask a [`Clock`], so tests swap in a [`FakeClock`] and
//! move time by hand instead of sleeping. With Redis the default is the server's own `TIME`, so
//! no clock is asked at all (see [`Limiter`]).
//!
//! Beside it in `clock/`: [`Timestamp`](crate::Timestamp), an instant in µs since the epoch.
//!
//! [`Limiter`]: crate::Limiter

pub(crate) mod timestamp;

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Timestamp;
use crate::clock::timestamp::duration_micros;

/// A source of wall-clock time.
pub trait Clock: Debug + Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp::from_micros(duration_micros(since_epoch))
    }
}

/// The wall clock as this process first read it, advanced by the monotonic clock since: it
/// never steps. The memory store's default, and the clock of the `local` failure policy.
///
/// State a store keeps is stamped with the time it was written. With [`SystemClock`], an NTP
/// step back of a few minutes after a step forward left every key written in between stamped
/// in the future: refused for the length of the step, and kept by the memory store's sweeper
/// as long (an audit: a year's step, then back, refused for a year). A process's own store
/// needs no agreement with other hosts, only a time that moves forward evenly. (Redis-backed
/// decisions use Redis's `TIME`, which this process cannot correct.)
///
/// ```
/// use tollgate::{Clock, SteadyClock, SystemClock};
///
/// let (steady, wall) = (SteadyClock.now(), SystemClock.now());
/// assert!(steady.as_micros().abs_diff(wall.as_micros()) < 60_000_000);
/// assert!(SteadyClock.now() >= steady);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SteadyClock;

impl Clock for SteadyClock {
    fn now(&self) -> Timestamp {
        static ANCHOR: std::sync::LazyLock<(std::time::Instant, Timestamp)> =
            std::sync::LazyLock::new(|| (std::time::Instant::now(), SystemClock.now()));
        let (at, wall) = *ANCHOR;
        Timestamp::from_micros(
            wall.as_micros()
                .saturating_add(duration_micros(at.elapsed())),
        )
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, FakeClock, Timestamp};
///
/// let clock = FakeClock::new(Timestamp::from_millis(1_000));
/// let other = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(other.now(), Timestamp::from_millis(1_005));
/// ```
#[derive(Clone, Debug, Default)]
pub struct FakeClock {
    micros: Arc<AtomicU64>,
}

impl FakeClock {
    /// A fake clock showing `start`.
    pub fn new(start: Timestamp) -> Self {
        FakeClock {
            micros: Arc::new(AtomicU64::new(start.as_micros())),
        }
    }

    /// Moves the clock forward by `by`, saturating at the largest timestamp (never wrapping
    /// round to an instant near the epoch).
    pub fn advance(&self, by: Duration) {
        let by = duration_micros(by);
        // `fetch_add` wraps: 1 ms advanced by `Duration::MAX` read 999 µs.
        let _ = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
                Some(m.saturating_add(by))
            });
    }

    /// Sets the clock to `to` (which may be earlier: clocks do jump back).
    pub fn set(&self, to: Timestamp) {
        self.micros.store(to.as_micros(), Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The system clock reads a plausible present (after 2020).
    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > Timestamp::from_millis(1_577_836_800_000));
    }

    /// A fake clock moves only when advanced or set.
    #[test]
    fn fake_clock_moves_by_hand() {
        let c = FakeClock::new(Timestamp::from_micros(10));
        assert_eq!(c.now(), Timestamp::from_micros(10));
        c.advance(Duration::from_micros(7));
        assert_eq!(c.now(), Timestamp::from_micros(17));
        c.set(Timestamp::from_micros(3));
        assert_eq!(c.now(), Timestamp::from_micros(3));
    }

    /// Advanced past the largest timestamp, a fake clock stays there: it read 999 µs once
    /// 1 ms was advanced by `Duration::MAX`.
    #[test]
    fn fake_clock_never_wraps() {
        let c = FakeClock::new(Timestamp::from_millis(1));
        c.advance(Duration::MAX);
        assert_eq!(c.now(), Timestamp::from_micros(u64::MAX));
        c.set(Timestamp::from_micros(u64::MAX - 5));
        c.advance(Duration::from_micros(10));
        assert_eq!(c.now(), Timestamp::from_micros(u64::MAX));
    }
}
