//! How much a limit admits: `limit` units per `period`, with a `burst` for the smooth
//! algorithms.
//!
//! A [`Quota`] is validated once, when it is built, and is then correct by construction: zero
//! limits, sub-millisecond periods and values whose arithmetic would overflow (or lose precision
//! in Lua, where numbers are doubles) cannot be written down.

use std::time::Duration;

use crate::LimitError;
use crate::clock::timestamp::duration_micros;

/// The largest `limit` or `burst`.
pub(crate) const MAX_UNITS: u64 = 1_000_000_000;
/// The shortest period.
pub(crate) const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest period: a little over a year, so that monthly and yearly quotas fit.
pub(crate) const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

/// `limit` units per `period`, and `burst` units at once for token bucket and GCRA.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// let q = Quota::per_minute(100)?.with_burst(10)?;
/// assert_eq!(q.limit(), 100);
/// assert_eq!(q.period(), Duration::from_secs(60));
/// // One unit replenishes every 60 s / 100 = 600 ms.
/// assert_eq!(q.emission_interval(), Duration::from_millis(600));
/// assert!(Quota::per_second(0).is_err());
/// # Ok::<(), tollgate::LimitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period_us: u64,
    burst: u64,
}

impl Quota {
    /// `limit` units per `period`; `burst` defaults to `limit`.
    ///
    /// # Errors
    /// [`LimitError`] naming `limit` (zero, above 10⁹, or more than one unit per microsecond
    /// of the period) or `period` (below 1 ms or above 366 days).
    pub fn new(limit: u64, period: Duration) -> Result<Quota, LimitError> {
        if limit == 0 {
            return Err(LimitError::Zero { field: "limit" });
        }
        if limit > MAX_UNITS {
            return Err(LimitError::TooLarge {
                field: "limit",
                max: MAX_UNITS.to_string(),
            });
        }
        if period < MIN_PERIOD {
            return Err(LimitError::TooSmall {
                field: "period",
                min: "1ms".into(),
            });
        }
        if period > MAX_PERIOD {
            return Err(LimitError::TooLarge {
                field: "period",
                max: "366 days".into(),
            });
        }
        // Rounded up to the µs: truncating made a period of 1.999999 ms count as 1.999 ms,
        // a shorter window admitting more than asked. (`period` is at most `MAX_PERIOD`, whole
        // seconds, so the rounding never passes it.)
        let period_us = u64::try_from(period.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX);
        if limit > period_us {
            // Time is counted in whole microseconds: more than one unit per µs would round
            // the emission interval to 1 µs and silently admit fewer than asked.
            return Err(LimitError::TooLarge {
                field: "limit",
                max: format!("{period_us} for this period (one unit per microsecond)"),
            });
        }
        Ok(Quota {
            limit,
            period_us,
            burst: limit,
        })
    }

    /// `limit` units per second.
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_second(limit: u64) -> Result<Quota, LimitError> {
        Quota::new(limit, Duration::from_secs(1))
    }

    /// `limit` units per minute.
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_minute(limit: u64) -> Result<Quota, LimitError> {
        Quota::new(limit, Duration::from_secs(60))
    }

    /// `limit` units per hour.
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_hour(limit: u64) -> Result<Quota, LimitError> {
        Quota::new(limit, Duration::from_secs(3600))
    }

    /// The same rate with a different burst: how many units token bucket and GCRA admit at
    /// once from a full state. The window algorithms ignore it.
    ///
    /// # Errors
    /// [`LimitError`] naming `burst` when it is zero, above 10⁹, or so large that
    /// `burst × emission interval` exceeds ten years.
    pub fn with_burst(self, burst: u64) -> Result<Quota, LimitError> {
        if burst == 0 {
            return Err(LimitError::Zero { field: "burst" });
        }
        if burst > MAX_UNITS {
            return Err(LimitError::TooLarge {
                field: "burst",
                max: MAX_UNITS.to_string(),
            });
        }
        let q = Quota { burst, ..self };
        let ten_years_us = 10 * duration_micros(MAX_PERIOD);
        if q.emission_interval_micros().saturating_mul(burst) > ten_years_us {
            return Err(LimitError::TooLarge {
                field: "burst",
                max: "ten years' worth of replenishment".into(),
            });
        }
        Ok(q)
    }

    /// Units admitted per period.
    #[inline]
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        Duration::from_micros(self.period_us)
    }

    /// The period in microseconds.
    #[inline]
    pub const fn period_micros(&self) -> u64 {
        self.period_us
    }

    /// Units admitted at once from a full token bucket / GCRA state.
    #[inline]
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// How long one unit takes to replenish: `period / limit`, rounded **up** to the
    /// microsecond so that rounding can only ever admit less, never more.
    pub const fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.emission_interval_micros())
    }

    /// [`Quota::emission_interval`] in microseconds.
    #[inline]
    pub const fn emission_interval_micros(&self) -> u64 {
        self.period_us.div_ceil(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each invalid value is refused and the error names its field.
    #[test]
    fn invalid_values_name_their_field() {
        let cases = [
            (Quota::new(0, Duration::from_secs(1)), "limit"),
            (Quota::new(MAX_UNITS + 1, Duration::from_secs(1)), "limit"),
            (Quota::new(1_000_001, Duration::from_secs(1)), "limit"),
            (Quota::new(MAX_UNITS, Duration::from_secs(1)), "limit"),
            (Quota::new(1, Duration::ZERO), "period"),
            (Quota::new(1, Duration::from_micros(999)), "period"),
            (Quota::new(1, MAX_PERIOD + Duration::from_secs(1)), "period"),
            (Quota::per_second(1).and_then(|q| q.with_burst(0)), "burst"),
            (
                Quota::per_second(1).and_then(|q| q.with_burst(MAX_UNITS + 1)),
                "burst",
            ),
            (
                Quota::new(1, MAX_PERIOD).and_then(|q| q.with_burst(11)),
                "burst",
            ),
        ];
        for (result, field) in cases {
            let err = result.expect_err(field);
            assert_eq!(err.field(), field, "{err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }

    /// The emission interval rounds up so that rounding never admits more than the quota.
    #[test]
    fn emission_interval_rounds_up() {
        let q = Quota::new(3, Duration::from_secs(1)).expect("valid");
        assert_eq!(q.emission_interval_micros(), 333_334);
        assert!(q.emission_interval_micros() * 3 >= q.period_micros());
    }

    /// A period with a fraction of a µs rounds up to the next µs: truncated, 1.999999 ms
    /// counted as 1.999 ms, a shorter window admitting more than asked.
    #[test]
    fn a_sub_microsecond_period_rounds_up() {
        let q = Quota::new(1, Duration::from_nanos(1_999_999)).expect("valid");
        assert_eq!(q.period_micros(), 2_000);
        let q = Quota::new(1, Duration::from_nanos(1_999_000)).expect("valid");
        assert_eq!(q.period_micros(), 1_999);
    }
}
