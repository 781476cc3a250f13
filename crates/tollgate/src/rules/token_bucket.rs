//! Token bucket: a bucket of `burst` tokens refilled one token per emission interval.
//!
//! Tokens are whole numbers and the refill time is kept exactly: `last` is the instant the
//! current token count was reached, and only whole emission intervals are ever added to it,
//! so the fractional progress towards the next token is never lost nor rounded. The same
//! integer arithmetic runs in `token_bucket.lua`. Its answers equal [`Gcra`](super::Gcra)'s for the
//! same quota; it exists because it is the algorithm people know and can inspect
//! (`HGETALL` shows the tokens left).
//!
//! Tokens may go below zero: a reservation ([`Schedule`]) or a settlement's extra charge
//! ([`Rule::adjust`]) takes tokens the bucket does not have yet, a debt the refill pays off
//! before anything else passes. A settlement owes at most `burst` tokens beyond a queue of
//! reservations an hour deep ([`Rule::debit`]).

use crate::rules::{DEBT_HORIZON_US, Rule, Schedule};
use crate::{Quota, Status};

/// Token bucket for one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    limit: u64,
    burst: i64,
    /// Emission interval in µs: one token per `t`.
    t: u64,
}

/// Token bucket state. `None` (a key never seen, or refilled to the top) is a full bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenBucketState {
    /// `(tokens, last)`: `tokens` whole tokens were in the bucket at `last` (µs); negative
    /// while the bucket owes tokens.
    pub level: Option<(i64, u64)>,
}

impl TokenBucket {
    /// A token bucket of `quota.burst()` tokens refilled at `quota`'s rate.
    pub fn new(quota: &Quota) -> Self {
        TokenBucket {
            limit: quota.limit(),
            // A quota's burst is at most `MAX_UNITS`, far below `i64::MAX`.
            burst: i64::try_from(quota.burst()).unwrap_or(i64::MAX),
            t: quota.emission_interval_micros(),
        }
    }

    /// Tokens at `now` and the instant that count was reached (`now` when full).
    fn refill(&self, state: &TokenBucketState, now: u64) -> (i64, u64) {
        match state.level {
            None => (self.burst, now),
            Some((tokens, last)) if now <= last => (tokens, last),
            Some((tokens, last)) => {
                let earned = i64::try_from((now - last) / self.t).unwrap_or(i64::MAX);
                if tokens.saturating_add(earned) >= self.burst {
                    (self.burst, now)
                } else {
                    (tokens + earned, last + earned.unsigned_abs() * self.t)
                }
            }
        }
    }
}

impl Rule for TokenBucket {
    type State = TokenBucketState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn admits(&self, state: &TokenBucketState, now: u64, cost: u64) -> Result<(), u64> {
        let (tokens, last) = self.refill(state, now);
        let cost = signed(cost);
        if tokens >= cost {
            Ok(())
        } else {
            // `now - last < t` after a refill, so this is positive.
            Err(cost
                .abs_diff(tokens)
                .saturating_mul(self.t)
                .saturating_add(last)
                .saturating_sub(now))
        }
    }

    #[inline]
    fn charge(&self, state: &mut TokenBucketState, now: u64, cost: u64) {
        let (tokens, last) = self.refill(state, now);
        state.level = Some((tokens.saturating_sub(signed(cost)), last));
    }

    /// Tokens go below zero, to at most `burst + h` owed, `h = ⌈DEBT_HORIZON_US / T⌉`
    /// (room for the deepest queue of reservations the horizon allows, plus one capacity). A
    /// charge past that leaves `−burst − h` tokens counted at `now` (the excess, and the
    /// progress towards the next token, forgiven), which is GCRA's `tat = now + 2 × burst ×
    /// T + h × T` exactly. A bucket owing more already (reservations) is kept.
    fn debit(&self, state: &mut TokenBucketState, now: u64, units: u64) {
        let (tokens, last) = self.refill(state, now);
        let owed = tokens.saturating_sub(signed(units));
        let horizon = DEBT_HORIZON_US.div_ceil(self.t.max(1));
        let cap = now.saturating_add((2 * self.burst.unsigned_abs() + horizon) * self.t);
        state.level = Some(if self.tat_of(owed, last) <= cap {
            (owed, last)
        } else if self.tat_of(tokens, last) >= cap {
            (tokens, last)
        } else {
            (-self.burst - signed(horizon), now)
        });
    }

    fn refund(&self, state: &mut TokenBucketState, now: u64, units: u64) {
        let (tokens, last) = self.refill(state, now);
        let tokens = tokens.saturating_add(signed(units));
        // Never past a full bucket: a refund does not bring back tokens that already refilled.
        state.level = (tokens < self.burst).then_some((tokens, last));
    }

    #[inline]
    fn status(&self, state: &TokenBucketState, now: u64) -> Status {
        let (tokens, last) = self.refill(state, now);
        Status {
            remaining: tokens.max(0).unsigned_abs(),
            reset_after_us: self.tat_of(tokens, last).saturating_sub(now),
        }
    }
}

impl TokenBucket {
    /// When a bucket of `tokens` at `last` is full again: GCRA's theoretical arrival time.
    fn tat_of(&self, tokens: i64, last: u64) -> u64 {
        if tokens >= self.burst {
            last
        } else {
            last.saturating_add(self.burst.abs_diff(tokens).saturating_mul(self.t))
        }
    }
}

impl Schedule for TokenBucket {
    fn tat(&self, state: &TokenBucketState, now: u64) -> u64 {
        let (tokens, last) = self.refill(state, now);
        self.tat_of(tokens, last).max(now)
    }
}

/// A cost or a refund as a token count (both are at most `MAX_UNITS`, validated).
fn signed(units: u64) -> i64 {
    i64::try_from(units).unwrap_or(i64::MAX)
}
