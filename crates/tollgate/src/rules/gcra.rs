//! GCRA, the generic cell rate algorithm: one integer per key.
//!
//! The state is the theoretical arrival time `tat`: when the key would be back to a full
//! quota. Each unit moves it one emission interval `T = period / limit` later; a cost passes
//! when the new `tat` is at most `tau = T × burst` ahead of now. It answers exactly like a token
//! bucket of the same rate and burst (a property test holds both to it) with half the state,
//! and it is the cheapest script on Redis.

use crate::rules::{DEBT_HORIZON_US, Rule, Schedule};
use crate::{Quota, Status};

/// GCRA for one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    limit: u64,
    /// Emission interval in µs.
    t: u64,
    /// Burst tolerance in µs: `t × burst`.
    tau: u64,
}

/// GCRA state: the theoretical arrival time in µs (0 for a key never seen).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time, µs since the epoch.
    pub tat: u64,
}

impl Gcra {
    /// GCRA with `quota`'s rate and burst.
    pub fn new(quota: &Quota) -> Self {
        let t = quota.emission_interval_micros();
        Gcra {
            limit: quota.limit(),
            t,
            tau: t * quota.burst(),
        }
    }
}

impl Rule for Gcra {
    type State = GcraState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn admits(&self, state: &GcraState, now: u64, cost: u64) -> Result<(), u64> {
        // A `tat` past the last instant a `u64` holds (time far beyond the supported range,
        // `crate::rules`) is refused rather than saturated: a `tat` pinned at `u64::MAX` would
        // admit every later cost.
        let Some(new_tat) = state.tat.max(now).checked_add(cost.saturating_mul(self.t)) else {
            return Err((u64::MAX - self.tau).saturating_sub(now).max(1));
        };
        if new_tat - now <= self.tau {
            Ok(())
        } else {
            Err(new_tat - self.tau - now)
        }
    }

    #[inline]
    fn charge(&self, state: &mut GcraState, now: u64, cost: u64) {
        state.tat = state
            .tat
            .max(now)
            .saturating_add(cost.saturating_mul(self.t));
    }

    /// `tat` moves on by `units × T`, to at most `now + 2 × tau + h × T` with
    /// `h = ⌈DEBT_HORIZON_US / T⌉`: one full capacity owed beyond empty, on top of the
    /// deepest queue of reservations the horizon allows (a token bucket's `tokens = −burst −
    /// h` at `now`, so both answer alike). Past that the charge is forgiven; a `tat` already
    /// further (reservations of a longer `max_wait`) is kept.
    fn debit(&self, state: &mut GcraState, now: u64, units: u64) {
        let from = state.tat.max(now);
        let horizon = DEBT_HORIZON_US.div_ceil(self.t.max(1)) * self.t;
        let cap = now.saturating_add(2 * self.tau + horizon);
        let tat = from.saturating_add(units.saturating_mul(self.t));
        state.tat = if tat <= cap { tat } else { from.max(cap) };
    }

    /// `tat` moves back by `units × T`, never before now: time already past is not owed, so
    /// it cannot be given back. A refund that reaches now leaves the key full, and its state
    /// is then the empty one (`tat` 0), as `lua/pace.lua` deletes the key: the old `tat`
    /// must not come back into view for a caller whose clock then goes back. A `tat` already
    /// at or before now is left as it is (nothing is owed).
    fn refund(&self, state: &mut GcraState, now: u64, units: u64) {
        if state.tat > now {
            let tat = state.tat.saturating_sub(units.saturating_mul(self.t));
            state.tat = if tat > now { tat } else { 0 };
        }
    }

    #[inline]
    fn status(&self, state: &GcraState, now: u64) -> Status {
        let used = state.tat.saturating_sub(now);
        Status {
            remaining: self.tau.saturating_sub(used) / self.t,
            reset_after_us: used,
        }
    }
}

impl Schedule for Gcra {
    fn tat(&self, state: &GcraState, now: u64) -> u64 {
        state.tat.max(now)
    }

    /// As [`Schedule::cancel`], but a key found full (`tat` at or before now, the ticket
    /// being now) is emptied (`tat` 0), as `lua/pace.lua` deletes it.
    fn cancel(&self, state: &mut GcraState, now: u64, cost: u64, ticket: u64) -> bool {
        if self.tat(state, now) != ticket {
            return false;
        }
        if state.tat <= now {
            state.tat = 0;
        } else {
            self.refund(state, now, cost);
        }
        true
    }
}
