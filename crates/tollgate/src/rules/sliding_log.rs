//! Sliding log: the time of every admitted unit, exact on every interval.
//!
//! A unit admitted at `t` counts until `t + period`. A cost passes when the units admitted in
//! `(now - period, now]` plus the cost stay within the limit, so no interval of one period
//! ever holds more than `limit` admitted units. The price is memory: one entry per admitted
//! unit (a ZSET member on Redis, ~36 B while under 128 entries, ~143 B past that).

use std::collections::VecDeque;

use crate::rules::Rule;
use crate::{Quota, Status};

/// Sliding log for one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    period: u64,
}

/// Sliding log state: admission times in µs, oldest first, one entry per unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    /// Admission times, ascending.
    pub entries: VecDeque<u64>,
}

impl SlidingLog {
    /// Sliding log with `quota`'s limit and period.
    pub fn new(quota: &Quota) -> Self {
        SlidingLog {
            limit: quota.limit(),
            period: quota.period_micros(),
        }
    }

    /// Index of the oldest entry still counted at `now`: entries `t` with `t + period > now`
    /// (compared without the sum, which could pass `u64::MAX`).
    fn first_live(&self, state: &SlidingLogState, now: u64) -> usize {
        state
            .entries
            .partition_point(|&t| now.saturating_sub(t) >= self.period)
    }
}

impl Rule for SlidingLog {
    type State = SlidingLogState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn admits(&self, state: &SlidingLogState, now: u64, cost: u64) -> Result<(), u64> {
        let first = self.first_live(state, now);
        let count = (state.entries.len() - first) as u64;
        if count + cost <= self.limit {
            return Ok(());
        }
        // The oldest `count + cost - limit` live entries must expire first.
        let must_expire = (count + cost - self.limit) as usize;
        match state.entries.get(first + must_expire - 1) {
            Some(&t) => Err(t.saturating_add(self.period).saturating_sub(now)),
            // Cost above the limit (a shadow entry's, clamped to limit + 1): never passes.
            None => Err(0),
        }
    }

    #[inline]
    fn charge(&self, state: &mut SlidingLogState, now: u64, cost: u64) {
        let first = self.first_live(state, now);
        state.entries.drain(..first);
        let at = state.entries.partition_point(|&t| t <= now);
        for _ in 0..cost {
            state.entries.insert(at, now);
        }
    }

    /// Entries at now, up to `2 × limit` live ones: a charge past that is forgiven (the key
    /// is refused for at most a period whatever was charged, and holds at most twice the
    /// entries a full key does).
    fn debit(&self, state: &mut SlidingLogState, now: u64, units: u64) {
        let first = self.first_live(state, now);
        let live = (state.entries.len() - first) as u64;
        let room = (2 * self.limit).saturating_sub(live);
        self.charge(state, now, units.min(room));
    }

    fn refund(&self, state: &mut SlidingLogState, now: u64, units: u64) {
        // The newest live entries: the ones that would have counted longest.
        let first = self.first_live(state, now);
        let live = (state.entries.len() - first) as u64;
        for _ in 0..units.min(live) {
            state.entries.pop_back();
        }
    }

    #[inline]
    fn status(&self, state: &SlidingLogState, now: u64) -> Status {
        let first = self.first_live(state, now);
        let count = (state.entries.len() - first) as u64;
        let newest = state.entries.back().copied().unwrap_or(0);
        Status {
            remaining: self.limit.saturating_sub(count),
            reset_after_us: if count > 0 {
                newest.saturating_add(self.period).saturating_sub(now)
            } else {
                0
            },
        }
    }
}
