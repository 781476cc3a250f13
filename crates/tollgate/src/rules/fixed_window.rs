//! Fixed window: one counter per key for the current clock-aligned window.
//!
//! Windows are aligned to the epoch (`[k × period, (k+1) × period)`), so every instance and
//! every key switch windows at the same instant. The state remembers which window it counts,
//! so a stale counter is never mistaken for the current one, whatever the expiry did. Cheap
//! and simple, but a client can get up to 2 × limit through in one period across a window edge
//! (the conformance suite shows it); use `sliding_log` or GCRA when that matters.

use crate::rules::Rule;
use crate::{Quota, Status};

/// Fixed window for one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u64,
    period: u64,
}

/// Fixed window state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// Start of the counted window, µs since the epoch.
    pub window: u64,
    /// Units admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// Fixed window with `quota`'s limit and period.
    pub fn new(quota: &Quota) -> Self {
        FixedWindow {
            limit: quota.limit(),
            period: quota.period_micros(),
        }
    }

    /// Charges `cost` whether it fits or not, and decides from the count after, as
    /// envoyproxy/ratelimit counts (`INCRBY`, then over limit when the count is above the
    /// limit): the status after the charge and, when the count is above the limit, the µs
    /// until the window ends.
    #[inline]
    pub fn count(
        &self,
        state: &mut FixedWindowState,
        now: u64,
        cost: u64,
    ) -> (Status, Option<u64>) {
        self.charge(state, now, cost);
        let status = self.status(state, now);
        let over = state.count > self.limit;
        (status, over.then(|| self.end(state) - now))
    }

    /// When the counted window ends (saturating: no window ends past `u64::MAX`).
    fn end(&self, state: &FixedWindowState) -> u64 {
        state.window.saturating_add(self.period)
    }

    /// Units counted at `now`: the stored count while its window has not ended.
    fn live_count(&self, state: &FixedWindowState, now: u64) -> u64 {
        // `now < window + period`, without the sum (which passes `u64::MAX` at the very end).
        if now.saturating_sub(state.window) < self.period {
            state.count
        } else {
            0
        }
    }
}

impl Rule for FixedWindow {
    type State = FixedWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn admits(&self, state: &FixedWindowState, now: u64, cost: u64) -> Result<(), u64> {
        let count = self.live_count(state, now);
        if count.saturating_add(cost) <= self.limit {
            Ok(())
        } else {
            Err(self.end(state).saturating_sub(now))
        }
    }

    #[inline]
    fn charge(&self, state: &mut FixedWindowState, now: u64, cost: u64) {
        if self.live_count(state, now) == 0 {
            *state = FixedWindowState {
                window: now - now % self.period,
                count: 0,
            };
        }
        state.count = state.count.saturating_add(cost);
    }

    fn refund(&self, state: &mut FixedWindowState, now: u64, units: u64) {
        // Only the current window's count: a past window's units were never going to count
        // again.
        if self.live_count(state, now) > 0 {
            state.count = state.count.saturating_sub(units);
        }
    }

    #[inline]
    fn status(&self, state: &FixedWindowState, now: u64) -> Status {
        let count = self.live_count(state, now);
        Status {
            remaining: self.limit.saturating_sub(count),
            reset_after_us: if count > 0 { self.end(state) - now } else { 0 },
        }
    }
}
