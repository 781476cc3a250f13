//! Sliding window with sub-buckets: the sliding log, quantized.
//!
//! Time is cut into `buckets` sub-buckets of width `w = ceil(period / buckets)`. An admitted
//! unit is counted in the bucket of its time, and a decision at `now` counts the current
//! bucket and the `buckets` before it. That span always covers `(now - period, now]`, so
//! - like the sliding log, **no interval of one period ever holds more than `limit`**;
//! - unlike it, units linger until their whole bucket has left the span: a call can be refused
//!   while the exact log would admit it, by at most the units of one bucket (the oldest);
//! - memory is bounded by `buckets + 1` counters per key, whatever the limit.
//!
//! The conformance suite holds it to that bound against `sliding_log`.

use std::collections::VecDeque;

use crate::rules::Rule;
use crate::{Quota, Status};

/// Default number of sub-buckets.
pub const DEFAULT_BUCKETS: u32 = 60;

/// Sliding window for one quota and bucket count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u64,
    /// Bucket width in µs.
    width: u64,
    buckets: u64,
}

/// Sliding window state: `(bucket index, units)` pairs, oldest first. Bucket `i` covers
/// `[i × w, (i+1) × w)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// Non-empty buckets, ascending by index.
    pub buckets: VecDeque<(u64, u64)>,
}

impl SlidingWindow {
    /// Sliding window with `quota`'s limit and period cut into `buckets` sub-buckets
    /// (at least 1; [`crate::Limit`] validates it).
    pub fn new(quota: &Quota, buckets: u32) -> Self {
        let buckets = u64::from(buckets.max(1));
        SlidingWindow {
            limit: quota.limit(),
            width: quota.period_micros().div_ceil(buckets),
            buckets,
        }
    }

    /// Bucket width in µs.
    pub fn width_micros(&self) -> u64 {
        self.width
    }

    /// When bucket `index` stops counting, `(index + buckets + 1) × w` (saturating).
    fn leaves(&self, index: u64) -> u64 {
        index
            .saturating_add(self.buckets + 1)
            .saturating_mul(self.width)
    }

    /// Index of the oldest bucket still counted at `now`.
    fn oldest_counted(&self, now: u64) -> u64 {
        (now / self.width).saturating_sub(self.buckets)
    }

    /// Position of the first counted bucket in the state, and the units counted.
    fn live(&self, state: &SlidingWindowState, now: u64) -> (usize, u64) {
        let oldest = self.oldest_counted(now);
        let first = state.buckets.partition_point(|&(i, _)| i < oldest);
        let count = state.buckets.range(first..).map(|&(_, n)| n).sum();
        (first, count)
    }
}

impl Rule for SlidingWindow {
    type State = SlidingWindowState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn admits(&self, state: &SlidingWindowState, now: u64, cost: u64) -> Result<(), u64> {
        let (first, count) = self.live(state, now);
        if count + cost <= self.limit {
            return Ok(());
        }
        // Oldest buckets leave the span one by one: bucket i stops counting at
        // (i + buckets + 1) × w. Wait until enough units have left.
        let must_leave = count + cost - self.limit;
        let mut left = 0;
        for &(index, units) in state.buckets.range(first..) {
            left += units;
            if left >= must_leave {
                return Err(self.leaves(index).saturating_sub(now));
            }
        }
        Err(0) // cost above the limit (a shadow entry's, clamped to limit + 1): never passes
    }

    #[inline]
    fn charge(&self, state: &mut SlidingWindowState, now: u64, cost: u64) {
        let (first, _) = self.live(state, now);
        state.buckets.drain(..first);
        let current = now / self.width;
        let at = state.buckets.partition_point(|&(i, _)| i < current);
        match state.buckets.get_mut(at) {
            Some((i, units)) if *i == current => *units = units.saturating_add(cost),
            _ => state.buckets.insert(at, (current, cost)),
        }
    }

    /// Newest buckets first, down to the oldest still counted. The buckets that left the
    /// span are dropped first, as [`Rule::charge`] and `lua/pace.lua` do: kept, they would
    /// count again for a caller whose clock then goes back.
    fn refund(&self, state: &mut SlidingWindowState, now: u64, units: u64) {
        let (first, _) = self.live(state, now);
        state.buckets.drain(..first);
        let mut left = units;
        while left > 0 {
            let Some((_, n)) = state.buckets.back_mut() else {
                break;
            };
            let taken = left.min(*n);
            *n -= taken;
            left -= taken;
            if *n == 0 {
                state.buckets.pop_back();
            }
        }
    }

    #[inline]
    fn status(&self, state: &SlidingWindowState, now: u64) -> Status {
        let (_, count) = self.live(state, now);
        let newest = state.buckets.back().map_or(0, |&(i, _)| i);
        Status {
            remaining: self.limit.saturating_sub(count),
            reset_after_us: if count > 0 {
                self.leaves(newest).saturating_sub(now)
            } else {
                0
            },
        }
    }
}
