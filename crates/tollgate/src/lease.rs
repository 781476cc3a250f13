//! Leases: an opt-in approximate tier for very hot keys.
//!
//! A limit in lease mode ([`Limit::lease`](crate::Limit::lease)) is not decided by one store
//! call per request. An instance takes up to `k` units from the store in one atomic call (the
//! store counts them as spent at once, never beyond the limit) and hands them out itself
//! until they are spent or the lease ends; unspent units go back to the store with the next
//! call for the key, on [`Limiter::return_leases`](crate::Limiter::return_leases) (reload,
//! shutdown) and [`Limiter::return_expired_leases`](crate::Limiter::return_expired_leases)
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

use std::time::Duration;

use crate::{Key, Limit};

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

/// One store call of the lease tier: give back `give_back` units to the window starting at
/// `give_back_window` (if it is still the key's current window), then take
/// `min(want, available)` units, or none when fewer than `need` are available. A give-back
/// alone is a take with `want = need = 0`.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTake<'a> {
    /// The limit (fixed window).
    pub limit: &'a Limit,
    /// The key.
    pub key: &'a Key,
    /// The most units to take.
    pub want: u64,
    /// The fewest units worth taking (the cost of the request waiting): fewer available
    /// takes nothing and refuses.
    pub need: u64,
    /// Unspent units of an earlier lease to give back first.
    pub give_back: u64,
    /// The window (start, µs since the epoch on the store's clock) those units were taken in.
    pub give_back_window: u64,
}

/// The store's answer to a [`LeaseTake`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Units taken (0 when refused or for a give-back alone).
    pub granted: u64,
    /// The start of the window they belong to (µs since the epoch, store's clock): what a
    /// give-back names.
    pub window: u64,
    /// How long the window lasts after the store's `now`: the lease ends then at the latest.
    pub valid_for: Duration,
    /// Units left in the store after the call.
    pub remaining: u64,
    /// When refused (`granted < need`): until `need` units may be available.
    pub retry_after: Option<Duration>,
}
