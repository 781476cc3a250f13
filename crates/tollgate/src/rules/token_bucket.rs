//! Token bucket: a bucket of `burst` tokens refilled one token per emission interval.
//!
//! Tokens are whole numbers and the refill time is kept exactly: `last` is the instant the
//! current token count was reached, and only whole emission intervals are ever added to it,
//! so the fractional progress towards the next token is never lost nor rounded. The same
//! integer arithmetic runs in `token_bucket.lua`. Its answers equal [`Gcra`](super::Gcra)'s for the
//! same quota; it exists because it is the algorithm people know and can inspect
//! (`HGETALL` shows the tokens left).

use crate::rules::Rule;
use crate::{Quota, Status};

/// Token bucket for one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    limit: u64,
    burst: u64,
    /// Emission interval in µs: one token per `t`.
    t: u64,
}

/// Token bucket state. `None` (a key never seen, or refilled to the top) is a full bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenBucketState {
    /// `(tokens, last)`: `tokens` whole tokens were in the bucket at `last` (µs).
    pub level: Option<(u64, u64)>,
}

impl TokenBucket {
    /// A token bucket of `quota.burst()` tokens refilled at `quota`'s rate.
    pub fn new(quota: &Quota) -> Self {
        TokenBucket {
            limit: quota.limit(),
            burst: quota.burst(),
            t: quota.emission_interval_micros(),
        }
    }

    /// Tokens at `now` and the instant that count was reached (`now` when full).
    fn refill(&self, state: &TokenBucketState, now: u64) -> (u64, u64) {
        match state.level {
            None => (self.burst, now),
            Some((tokens, last)) if now <= last => (tokens, last),
            Some((tokens, last)) => {
                let earned = (now - last) / self.t;
                if tokens + earned >= self.burst {
                    (self.burst, now)
                } else {
                    (tokens + earned, last + earned * self.t)
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
        if tokens >= cost {
            Ok(())
        } else {
            // `now - last < t` after a refill, so this is positive.
            Err((cost - tokens) * self.t + last - now)
        }
    }

    #[inline]
    fn charge(&self, state: &mut TokenBucketState, now: u64, cost: u64) {
        let (tokens, last) = self.refill(state, now);
        state.level = Some((tokens - cost, last));
    }

    #[inline]
    fn status(&self, state: &TokenBucketState, now: u64) -> Status {
        let (tokens, last) = self.refill(state, now);
        let reset_after_us = if tokens >= self.burst {
            0
        } else {
            ((self.burst - tokens) * self.t + last).saturating_sub(now)
        };
        Status {
            remaining: tokens,
            reset_after_us,
        }
    }
}
