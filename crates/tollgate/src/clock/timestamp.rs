//! A point in time as whole microseconds since the Unix epoch.
//!
//! Rate-limit state is shared between processes and machines (and with Redis, whose `TIME`
//! answers in seconds and microseconds), so time is wall-clock time, not [`std::time::Instant`],
//! which means nothing outside one process. Integer microseconds keep every computation exact
//! and identical in Rust and in the Lua scripts (Lua numbers are doubles, exact up to 2^53 µs,
//! 2255-06-05; `rules.rs` says how much earlier an instant must be for what the scripts add
//! to it to stay below that).

use std::time::Duration;

/// Microseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The epoch itself.
    pub const ZERO: Timestamp = Timestamp(0);

    /// A timestamp `micros` microseconds after the epoch.
    #[inline]
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros)
    }

    /// A timestamp `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000))
    }

    /// Microseconds since the epoch.
    #[inline]
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// This timestamp moved `by` later, saturating at the largest timestamp.
    pub fn saturating_add(self, by: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_micros(by)))
    }

    /// This timestamp moved `by` earlier, saturating at the epoch.
    pub fn saturating_sub(self, by: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_micros(by)))
    }
}

/// A duration in whole microseconds, saturating at `u64::MAX`.
pub(crate) fn duration_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arithmetic saturates instead of wrapping.
    #[test]
    fn saturates() {
        assert_eq!(
            Timestamp::ZERO.saturating_sub(Duration::from_secs(1)),
            Timestamp::ZERO
        );
        assert_eq!(
            Timestamp::from_millis(2).saturating_add(Duration::from_micros(5)),
            Timestamp::from_micros(2_005)
        );
    }
}
