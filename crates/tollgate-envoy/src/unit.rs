//! A quota as Envoy's `RateLimit { requests_per_unit, unit }`.
//!
//! Envoy's units are calendar words (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR); a tollgate
//! period is any duration. A period of exactly one second, minute, hour, day or week maps to
//! that unit with `requests_per_unit = limit`. Any other period is written as the same rate in
//! the smallest of those units that is at least as long as the period and in which the rate is
//! a whole number (`10 per 30 s` → `20 per MINUTE`, `7 per 90 s` → `280 per HOUR`); when no
//! unit gives a whole number, the smallest such unit in which rounding to the nearest request
//! is off by at most 1 % (`1 per 11 s` → `327 per HOUR`), else YEAR (365 days), rounded and at
//! least 1. MONTH is never used: its length varies. Envoy only shows this value (in
//! `X-RateLimit-Limit`); the limit's real window is in the `RateLimit-Policy` header.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate::Quota;

/// A rate in one of Envoy's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateUnit {
    /// Envoy's unit.
    pub unit: Unit,
    /// Requests per that unit (saturating at `u32::MAX`).
    pub requests_per_unit: u32,
}

const UNITS: [(Unit, u64); 6] = [
    (Unit::Second, 1),
    (Unit::Minute, 60),
    (Unit::Hour, 3_600),
    (Unit::Day, 86_400),
    (Unit::Week, 7 * 86_400),
    (Unit::Year, 365 * 86_400),
];

/// The quota's rate in Envoy's units, as described in the module docs.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
/// use tollgate_envoy::rate_unit;
///
/// let r = rate_unit(&Quota::per_minute(100)?);
/// assert_eq!((r.unit, r.requests_per_unit), (Unit::Minute, 100));
/// let r = rate_unit(&Quota::new(10, Duration::from_secs(30))?);
/// assert_eq!((r.unit, r.requests_per_unit), (Unit::Minute, 20));
/// # Ok::<(), tollgate::LimitError>(())
/// ```
pub fn rate_unit(quota: &Quota) -> RateUnit {
    let period_us = quota.period().as_micros();
    let limit = u128::from(quota.limit());
    let candidates = UNITS
        .iter()
        .map(|&(unit, secs)| (unit, u128::from(secs) * 1_000_000))
        .filter(|&(_, unit_us)| unit_us >= period_us);
    let exact = candidates
        .clone()
        .find(|&(_, unit_us)| (limit * unit_us) % period_us == 0);
    // Nearest whole request (exact when the rate is whole), never 0.
    let rounded = |unit_us: u128| ((limit * unit_us + period_us / 2) / period_us).max(1);
    let close = |&(_, unit_us): &(Unit, u128)| {
        let want = limit * unit_us;
        rounded(unit_us).saturating_mul(period_us).abs_diff(want) * 100 <= want
    };
    let (unit, unit_us) = exact
        .or_else(|| candidates.clone().find(close))
        .unwrap_or((Unit::Year, 365 * 86_400 * 1_000_000));
    let per_unit = rounded(unit_us);
    RateUnit {
        unit,
        requests_per_unit: u32::try_from(per_unit).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn of(limit: u64, period: Duration) -> (Unit, u32) {
        let r = rate_unit(&Quota::new(limit, period).expect("valid quota"));
        (r.unit, r.requests_per_unit)
    }

    /// Exact calendar periods map to their unit with the quota's limit.
    #[test]
    fn exact_periods_map_to_their_unit() {
        assert_eq!(of(5, Duration::from_secs(1)), (Unit::Second, 5));
        assert_eq!(of(5, Duration::from_secs(60)), (Unit::Minute, 5));
        assert_eq!(of(5, Duration::from_secs(3_600)), (Unit::Hour, 5));
        assert_eq!(of(5, Duration::from_secs(86_400)), (Unit::Day, 5));
        assert_eq!(of(5, Duration::from_secs(7 * 86_400)), (Unit::Week, 5));
    }

    /// Other periods keep the rate, exactly where a unit allows it, else rounded.
    #[test]
    fn other_periods_keep_the_rate() {
        assert_eq!(of(10, Duration::from_millis(500)), (Unit::Second, 20));
        assert_eq!(of(10, Duration::from_secs(30)), (Unit::Minute, 20));
        assert_eq!(of(7, Duration::from_secs(90)), (Unit::Hour, 280));
        assert_eq!(of(1, Duration::from_secs(7 * 60)), (Unit::Week, 1_440));
        assert_eq!(of(1, Duration::from_secs(11)), (Unit::Hour, 327));
        assert_eq!(
            of(1_000, Duration::from_secs(30 * 86_400)),
            (Unit::Year, 12_167)
        );
        assert_eq!(of(1, Duration::from_millis(3)), (Unit::Minute, 20_000));
    }
}
