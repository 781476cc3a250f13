//! A named limit: algorithm, quota, key shape and failure policy.
//!
//! Beside it in `limit/`, what a limit is made of: its [`Algorithm`](crate::Algorithm), its
//! [`Quota`](crate::Quota), the [`Namespace`](crate::Namespace) and [`Key`](crate::Key) a request's
//! key parts become, and [`LimitError`](crate::LimitError) for a limit that cannot be built.

pub(crate) mod algorithm;
pub(crate) mod key;
pub(crate) mod limit_error;
pub(crate) mod namespace;
pub(crate) mod quota;

use std::sync::Arc;

use crate::rules::AnyRule;
use crate::{Algorithm, Lease, LimitError, OnStoreError, Quota};

/// The longest limit name or key part name.
pub const MAX_NAME_LEN: usize = 64;
/// The most sub-buckets a sliding window may have.
pub(crate) const MAX_BUCKETS: u32 = 3_600;
/// The largest limit a sliding log may have: it keeps one entry per admitted unit (a ZSET
/// member on Redis), and one check of cost `limit` writes `limit` entries in one step (under
/// a memory-store shard's lock, or in one Redis script that blocks the server). Larger
/// limits belong to `sliding_window`, whose memory is bounded by its bucket count. (One
/// script of 10 000 `ZADD`s took 0.14 s and left a 1 MB key; of 100 000, 1 s and 9.7 MB.)
pub(crate) const MAX_LOG_UNITS: u64 = 10_000;

/// A named rule: `algorithm` applied to `quota`, keyed by named parts, with a failure policy.
///
/// ```
/// use tollgate::{Algorithm, Limit, OnStoreError, Quota};
///
/// let sms = Limit::new("sms", Algorithm::FixedWindow, Quota::per_minute(100)?)?
///     .keyed_by(["user"])?
///     .on_store_error(OnStoreError::Deny);
/// assert_eq!(sms.name(), "sms");
/// assert!(Limit::new("bad name", Algorithm::Gcra, Quota::per_second(1)?).is_err());
/// # Ok::<(), tollgate::LimitError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    name: Arc<str>,
    algorithm: Algorithm,
    quota: Quota,
    rule: AnyRule,
    key_parts: Option<Arc<[Box<str>]>>,
    on_store_error: OnStoreError,
    shadow: bool,
    lease: Option<Lease>,
    /// Whether the limiter's deny cache may answer and remember this limit's refusals
    /// ([`Limit::deny_cache`]).
    deny_cache: bool,
    /// What ends each of its keys ([`crate::Key::new`]), made once here rather than per key.
    key_tag: Arc<str>,
}

impl Limit {
    /// A limit named `name` (1–64 characters of `A-Z a-z 0-9 _ - .`). Its failure policy is
    /// [`OnStoreError::Deny`] until set, and it is keyed by every part the caller passes until
    /// [`Limit::keyed_by`] says which.
    ///
    /// # Errors
    /// [`LimitError`] naming `name`, `buckets` for a sliding window whose bucket count is 0
    /// or above 3,600, or `limit` for a sliding log above 10,000 units.
    pub fn new(
        name: impl Into<String>,
        algorithm: Algorithm,
        quota: Quota,
    ) -> Result<Limit, LimitError> {
        let name = name.into();
        validate_name("name", &name)?;
        if let Algorithm::SlidingWindow { buckets } = algorithm {
            if buckets == 0 {
                return Err(LimitError::Zero { field: "buckets" });
            }
            if buckets > MAX_BUCKETS {
                return Err(LimitError::TooLarge {
                    field: "buckets",
                    max: MAX_BUCKETS.to_string(),
                });
            }
            // Buckets are whole µs wide, ⌈period ÷ buckets⌉: the rounding widens the counted
            // span by `buckets × width − period`, under `buckets` µs. Past a bucket's width
            // the window's bound (early refusals by at most one bucket's units) no longer
            // holds: 3600 buckets of a 1 ms period are 1 µs wide and count 3.6 ms.
            let period = quota.period_micros();
            let b = u64::from(buckets);
            let width = period.div_ceil(b);
            if b * width - period >= width {
                return Err(LimitError::TooLarge {
                    field: "buckets",
                    max: format!(
                        "{} for a period of {period} µs (each bucket at least as wide as the \
                         rounding of the period into buckets)",
                        period.isqrt().max(1)
                    ),
                });
            }
        }
        if algorithm == Algorithm::SlidingLog && quota.limit() > MAX_LOG_UNITS {
            return Err(LimitError::TooLarge {
                field: "limit",
                max: format!(
                    "{MAX_LOG_UNITS} for sliding_log (one entry per unit; use sliding_window)"
                ),
            });
        }
        let rule = AnyRule::new(algorithm, &quota);
        Ok(Limit {
            name: name.into(),
            algorithm,
            quota,
            key_tag: key_tag(algorithm, &rule, &quota),
            rule,
            key_parts: None,
            on_store_error: OnStoreError::Deny,
            shadow: false,
            lease: None,
            deny_cache: true,
        })
    }

    /// What ends each of this limit's keys: its algorithm's tag
    /// ([`Algorithm::key_tag`]), followed by what its state's meaning depends on.
    #[inline]
    pub(crate) fn key_tag(&self) -> &str {
        &self.key_tag
    }

    /// Keys this limit by exactly these parts, in this order (none: one global key). A limit
    /// never keyed by any list is keyed by every part a check gives it, in name order (the
    /// order they are given in does not matter).
    ///
    /// # Errors
    /// [`LimitError`] naming `key` when a part name is not a valid name.
    pub fn keyed_by<I, S>(mut self, parts: I) -> Result<Limit, LimitError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let parts: Vec<Box<str>> = parts
            .into_iter()
            .map(|p| {
                let p = p.into();
                validate_name("key", &p).map(|()| p.into_boxed_str())
            })
            .collect::<Result<_, _>>()?;
        if let Some((_, twice)) = parts
            .iter()
            .enumerate()
            .find(|(i, p)| parts[..*i].contains(p))
        {
            return Err(LimitError::InvalidName {
                field: "key",
                value: twice.to_string(),
                reason: "is named twice",
            });
        }
        self.key_parts = Some(parts.into());
        Ok(self)
    }

    /// Sets the failure policy.
    pub fn on_store_error(mut self, policy: OnStoreError) -> Limit {
        self.on_store_error = policy;
        self
    }

    /// Shadow mode: the limit is decided and counted like any other, but never refuses. The
    /// [`crate::Limiter`] checks it after the enforced limits of a request, on its own (charged
    /// only when the enforced limits admit), reports its decision in the [`crate::Verdict`]
    /// and counts its would-be denials in `tollgate_shadow_denied_total{limit}`. For trying a
    /// limit on real traffic before enforcing it.
    pub fn shadow(mut self, shadow: bool) -> Limit {
        self.shadow = shadow;
        self
    }

    /// Keeps this limit out of the limiter's deny cache when `on` is false (it is in by
    /// default): its refusals are then neither answered from the cache nor remembered in
    /// it, and every check of it reaches the store. The cache remembers a refusal by key and
    /// cost, not by quota; a limit whose key other limits of other quotas share (an Envoy
    /// limit override counting on the counter of the same descriptor at another rate) must
    /// not be answered by a refusal remembered under another quota, nor leave one behind.
    ///
    /// ```
    /// use tollgate::{Algorithm, Limit, Quota};
    ///
    /// let shared = Limit::new("per_rate", Algorithm::FixedWindow, Quota::per_minute(5)?)?
    ///     .deny_cache(false);
    /// assert!(!shared.uses_deny_cache());
    /// # Ok::<(), tollgate::LimitError>(())
    /// ```
    pub fn deny_cache(mut self, on: bool) -> Limit {
        self.deny_cache = on;
        self
    }

    /// Whether the limiter's deny cache may answer and remember this limit's refusals
    /// ([`Limit::deny_cache`]).
    #[inline]
    pub fn uses_deny_cache(&self) -> bool {
        self.deny_cache
    }

    /// Lease mode: each instance takes units from the store `k` at a time and hands them out
    /// itself (see [`crate::lease`]). Approximate by at most instances × `k` units per
    /// window, for keys too hot for one store call per request.
    ///
    /// # Errors
    /// [`LimitError`] naming `mode` for an algorithm other than the fixed window (the others
    /// cannot give back or bound what a lease holds), `lease` for a `k` of 0 or above
    /// the limit, `lease_ttl` for a duration under 1 ms.
    pub fn lease(mut self, lease: Lease) -> Result<Limit, LimitError> {
        if self.algorithm != Algorithm::FixedWindow {
            return Err(LimitError::InvalidName {
                field: "mode",
                value: "lease".to_owned(),
                reason: "is supported by the fixed_window algorithm only: the others have no \
                         window a lease can end with and give units back to",
            });
        }
        match lease.fixed_units() {
            Some(0) => {
                return Err(LimitError::Zero { field: "lease" });
            }
            Some(k) if k > self.quota.limit() => {
                return Err(LimitError::TooLarge {
                    field: "lease",
                    max: format!("the limit ({})", self.quota.limit()),
                });
            }
            _ => {}
        }
        if lease.lease_ttl() < std::time::Duration::from_millis(1) {
            return Err(LimitError::TooSmall {
                field: "lease_ttl",
                min: "1ms".to_owned(),
            });
        }
        self.lease = Some(lease);
        Ok(self)
    }

    /// The lease settings when the limit is in lease mode.
    #[inline]
    pub fn lease_mode(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Whether the limit is in shadow mode.
    #[inline]
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The limit's name.
    #[inline]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limit's name, shared.
    #[inline]
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The algorithm.
    #[inline]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The quota.
    #[inline]
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The algorithm applied to the quota, as pure arithmetic ([`crate::rules`]): what a
    /// store runs, and what an offline simulation may run on states of its own (`tollgate
    /// replay --suggest` keeps one [`crate::rules::AnyState`] per key and window length).
    #[inline]
    pub fn rule(&self) -> &AnyRule {
        &self.rule
    }

    /// The key part names, if fixed.
    pub fn key_parts(&self) -> Option<&[Box<str>]> {
        self.key_parts.as_deref()
    }

    /// The failure policy.
    #[inline]
    pub fn policy(&self) -> OnStoreError {
        self.on_store_error
    }

    /// The largest cost that can ever pass: `burst` for token bucket and GCRA, `limit`
    /// otherwise.
    #[inline]
    pub fn capacity(&self) -> u64 {
        if self.algorithm.uses_burst() {
            self.quota.burst()
        } else {
            self.quota.limit()
        }
    }
}

/// The algorithm's tag, then, for the two whose state means nothing under another rate:
/// - a sliding window's bucket width in µs: its state is bucket numbers (read under a wider
///   width, old numbers are far in the future: counted for ever, and an expiry of centuries);
/// - GCRA's emission interval in µs: its state is an instant, the old rate's debt (kept under
///   a shorter period, 10 a day reloaded as 10 a second was refused, and kept, for a day).
fn key_tag(algorithm: Algorithm, rule: &AnyRule, quota: &Quota) -> Arc<str> {
    let mut tag = String::from(algorithm.key_tag());
    match rule {
        AnyRule::SlidingWindow(rule) => {
            tag.push_str(itoa::Buffer::new().format(rule.width_micros()))
        }
        AnyRule::Gcra(_) => {
            tag.push_str(itoa::Buffer::new().format(quota.emission_interval_micros()));
        }
        _ => {}
    }
    tag.into()
}

/// Checks a name (limit name, key part name): 1–64 characters of `A-Z a-z 0-9 _ - .`.
///
/// # Errors
/// [`LimitError::InvalidName`] naming `field`.
pub fn validate_name(field: &'static str, name: &str) -> Result<(), LimitError> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_NAME_LEN {
        "must be at most 64 characters"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        "may only contain A-Z, a-z, 0-9, '_', '-' and '.'"
    } else {
        return Ok(());
    };
    Err(LimitError::InvalidName {
        field,
        value: name.chars().take(80).collect(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota() -> Quota {
        Quota::per_second(10).expect("valid")
    }

    /// Buckets narrower than the rounding of the period into them are refused: 3600 buckets
    /// of 1 ms are 1 µs wide and counted 3.6 ms, so units stayed counted for more than two
    /// periods. Every bucket count up to the period's square root (in µs) passes, and so do
    /// the usual ones.
    #[test]
    fn buckets_are_wider_than_their_rounding() {
        let window = |buckets, period_us| {
            Limit::new(
                "w",
                Algorithm::SlidingWindow { buckets },
                Quota::new(10, std::time::Duration::from_micros(period_us)).expect("valid"),
            )
        };
        let err = window(3_600, 1_000).expect_err("1 µs buckets");
        assert_eq!(err.field(), "buckets");
        assert_eq!(
            err.to_string(),
            "buckets must be at most 31 for a period of 1000 µs (each bucket at least as wide \
             as the rounding of the period into buckets)"
        );
        for buckets in 1..=31 {
            window(buckets, 1_000).expect("up to the square root");
        }
        window(60, 60_000_000).expect("60 of a minute");
        window(7, 1_000_000).expect("7 of a second");
        window(3_600, 10_000_000).expect("3600 of 10 s");
    }

    /// Bad names and bucket counts are refused, naming the field.
    #[test]
    fn invalid_limits_name_their_field() {
        for name in ["", "a:b", "a{b}", "é", &"x".repeat(65)] {
            let err = Limit::new(name, Algorithm::Gcra, quota()).expect_err(name);
            assert_eq!(err.field(), "name");
        }
        let err = Limit::new("w", Algorithm::SlidingWindow { buckets: 0 }, quota())
            .expect_err("0 buckets");
        assert_eq!(err.field(), "buckets");
        let err = Limit::new("l", Algorithm::Gcra, quota())
            .and_then(|l| l.keyed_by(["user", "bad part"]))
            .expect_err("bad part");
        assert_eq!(err.field(), "key");
        let err = Limit::new("l", Algorithm::Gcra, quota())
            .and_then(|l| l.keyed_by(["user", "ip", "user"]))
            .expect_err("a part named twice");
        assert_eq!(err.field(), "key");
        assert!(err.to_string().contains("named twice"), "{err}");
    }

    /// A sliding log keeps one entry per unit: a limit above `MAX_LOG_UNITS` is refused
    /// (a single check of cost 2·10⁷ took 170 MB and half a second under a shard lock; on
    /// Redis one of 10⁶ blocked the server for 2.5 s and left a 112 MB key). Sliding
    /// windows take such limits.
    #[test]
    fn a_sliding_log_limit_is_bounded() {
        let q = |n| Quota::new(n, std::time::Duration::from_secs(3600)).expect("valid");
        Limit::new("l", Algorithm::SlidingLog, q(MAX_LOG_UNITS)).expect("at the bound");
        let err = Limit::new("l", Algorithm::SlidingLog, q(MAX_LOG_UNITS + 1)).expect_err("above");
        assert_eq!(err.field(), "limit");
        Limit::new("w", Algorithm::sliding_window(), q(MAX_LOG_UNITS + 1)).expect("windows");
    }

    /// Capacity is the burst for smooth algorithms and the limit for windows.
    #[test]
    fn capacity_follows_algorithm() {
        let q = quota().with_burst(3).expect("valid");
        let gcra = Limit::new("g", Algorithm::Gcra, q).expect("valid");
        let fixed = Limit::new("f", Algorithm::FixedWindow, q).expect("valid");
        assert_eq!(gcra.capacity(), 3);
        assert_eq!(fixed.capacity(), 10);
    }
}
