//! Leases: an opt-in approximate tier for very hot keys.
//!
//! A limit in lease mode ([`Limit::lease`](crate::Limit::lease)) is not decided by one store
//! call per request. An instance takes up to `k` units from the store in one atomic call (the
//! store counts them as spent at once, never beyond the limit) and hands them out itself
//! until they are spent or the lease ends; unspent units go back to the store with the next
//! call for the key, on [`Limiter::return_leases`](crate::Limiter::return_leases) (reload,
//! shutdown: the limiter then takes no lease again, and decides lease-mode limits as exact
//! ones) and [`Limiter::return_expired_leases`](crate::Limiter::return_expired_leases)
//! (a periodic sweep). A hot key then costs the store one call per about `k` decisions.
//!
//! Only the fixed window supports it: its units belong to one window that the store and every
//! instance agree on, so a lease can end with the window and a give-back can say which window
//! it returns units to (the store ignores units returned to a window that has ended). The
//! smooth algorithms (token bucket, GCRA) refill continuously: units taken early and spent
//! later have no window to belong to, and giving them back to a bucket that refilled in the
//! meantime can add more than was taken. The sliding algorithms remember when each unit was
//! spent, which a lease taken in one call cannot tell. `docs/algorithms.md`, "Leases", has
//! the bound on overshoot and how `k` is chosen.

pub(crate) mod lease_grant;
pub(crate) mod lease_take;
pub(crate) mod tier;

use std::time::Duration;

/// The default lease duration: how long an instance may hold units before it gives back
/// what it has not spent (a lease also ends with its window).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(1);
/// The share of a limit one lease may take when `k` is chosen automatically: `limit ÷ 16`
/// (at least 1), so one instance never takes the whole quota of a key it sees little of.
pub const AUTO_LEASE_SHARE: u64 = 16;

/// How a limit in lease mode takes units from the store.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Lease, Limit, Quota};
///
/// let hot = Limit::new("hot", Algorithm::FixedWindow, Quota::per_second(100_000)?)?
///     .lease(Lease::new().units(1_000).ttl(Duration::from_millis(500)))?;
/// assert_eq!(hot.lease_mode().and_then(|l| l.fixed_units()), Some(1_000));
/// // Only the fixed window supports leases:
/// let err = Limit::new("g", Algorithm::Gcra, Quota::per_second(10)?)?.lease(Lease::new());
/// assert_eq!(err.expect_err("gcra").field(), "mode");
/// # Ok::<(), tollgate::LimitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    units: Option<u64>,
    ttl: Duration,
}

impl Lease {
    /// A lease of automatically chosen size, held at most [`DEFAULT_LEASE_TTL`].
    pub const fn new() -> Lease {
        Lease {
            units: None,
            ttl: DEFAULT_LEASE_TTL,
        }
    }

    /// Takes `k` units per store call (at least 1, at most the limit; checked by
    /// [`Limit::lease`](crate::Limit::lease)). Unset, `k` follows the observed rate
    /// ([`Lease::units_for`]).
    pub const fn units(mut self, k: u64) -> Lease {
        self.units = Some(k);
        self
    }

    /// Holds a lease at most `ttl` (it also ends with its window).
    pub const fn ttl(mut self, ttl: Duration) -> Lease {
        self.ttl = ttl;
        self
    }

    /// The fixed `k`, if set.
    pub const fn fixed_units(&self) -> Option<u64> {
        self.units
    }

    /// How long a lease is held at most.
    pub const fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    /// The most units one take asks for: the fixed `k`, else `limit ÷ 16` (at least 1). The
    /// overshoot bound is this times the number of instances.
    pub fn max_units(&self, limit: u64) -> u64 {
        self.units
            .unwrap_or_else(|| (limit / AUTO_LEASE_SHARE).max(1))
            .min(limit)
    }

    /// `k` for a take, given the rate this instance observed for the key (units per second):
    /// the fixed `k` when set, else what the rate spends in one lease duration, clamped to
    /// `1 ..= limit ÷ 16`.
    pub fn units_for(&self, limit: u64, rate_per_sec: f64) -> u64 {
        if let Some(k) = self.units {
            return k.min(limit);
        }
        let wanted = (rate_per_sec * self.ttl.as_secs_f64()).ceil();
        let wanted = if wanted.is_finite() && wanted >= 1.0 {
            // Saturating: a float above u64::MAX converts to u64::MAX.
            wanted as u64
        } else {
            1
        };
        wanted.clamp(1, self.max_units(limit))
    }
}

impl Default for Lease {
    fn default() -> Self {
        Lease::new()
    }
}
