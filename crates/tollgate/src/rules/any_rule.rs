//! Any algorithm behind one type, so a store can hold limits of every algorithm.
//!
//! Dispatch is a `match`, not a trait object: the five cases are closed and the compiler
//! inlines each arm.

use std::time::Duration;

use crate::rules::{
    AnyState, FixedWindow, Gcra, Rule, Schedule, SlidingLog, SlidingWindow, TokenBucket, decision,
};
use crate::{Algorithm, Decision, Op, Pace, Paced, Quota, Slot, Status};

/// An algorithm with its quota applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyRule {
    /// A fixed window rule.
    FixedWindow(FixedWindow),
    /// A sliding log rule.
    SlidingLog(SlidingLog),
    /// A sliding window rule.
    SlidingWindow(SlidingWindow),
    /// A token bucket rule.
    TokenBucket(TokenBucket),
    /// A GCRA rule.
    Gcra(Gcra),
}

/// Runs `$body` with `$rule` bound to the concrete rule and `$state` to its state, taken from
/// (or reset into) the matching `AnyState` variant.
macro_rules! with_rule {
    ($self:expr, $any:expr, |$rule:ident, $state:ident| $body:expr) => {
        match $self {
            AnyRule::FixedWindow($rule) => {
                let $state = state_of!($any, FixedWindow);
                $body
            }
            AnyRule::SlidingLog($rule) => {
                let $state = state_of!($any, SlidingLog);
                $body
            }
            AnyRule::SlidingWindow($rule) => {
                let $state = state_of!($any, SlidingWindow);
                $body
            }
            AnyRule::TokenBucket($rule) => {
                let $state = state_of!($any, TokenBucket);
                $body
            }
            AnyRule::Gcra($rule) => {
                let $state = state_of!($any, Gcra);
                $body
            }
        }
    };
}

/// The `&mut` state of variant `$v`, replacing a state of another algorithm with a fresh
/// one (keys carry their algorithm's tag, so this only happens to a state built by hand).
macro_rules! state_of {
    ($any:expr, $v:ident) => {{
        if !matches!($any, AnyState::$v(_)) {
            *$any = AnyState::$v(Default::default());
        }
        match $any {
            AnyState::$v(s) => s,
            _ => unreachable!("just set"),
        }
    }};
}

impl AnyRule {
    /// `algorithm` applied to `quota`.
    pub fn new(algorithm: Algorithm, quota: &Quota) -> Self {
        match algorithm {
            Algorithm::FixedWindow => AnyRule::FixedWindow(FixedWindow::new(quota)),
            Algorithm::SlidingLog => AnyRule::SlidingLog(SlidingLog::new(quota)),
            Algorithm::SlidingWindow { buckets } => {
                AnyRule::SlidingWindow(SlidingWindow::new(quota, buckets))
            }
            Algorithm::TokenBucket => AnyRule::TokenBucket(TokenBucket::new(quota)),
            Algorithm::Gcra => AnyRule::Gcra(Gcra::new(quota)),
        }
    }

    /// The state of a key never seen.
    #[inline]
    pub fn empty_state(&self) -> AnyState {
        match self {
            AnyRule::FixedWindow(_) => AnyState::FixedWindow(Default::default()),
            AnyRule::SlidingLog(_) => AnyState::SlidingLog(Default::default()),
            AnyRule::SlidingWindow(_) => AnyState::SlidingWindow(Default::default()),
            AnyRule::TokenBucket(_) => AnyState::TokenBucket(Default::default()),
            AnyRule::Gcra(_) => AnyState::Gcra(Default::default()),
        }
    }

    /// [`Rule::admits`] on any state.
    ///
    /// # Errors
    /// `Err(retry_after_us)` when `cost` does not pass at `now`.
    #[inline]
    pub fn admits(&self, state: &mut AnyState, now: u64, cost: u64) -> Result<(), u64> {
        with_rule!(self, state, |rule, s| rule.admits(s, now, cost))
    }

    /// [`Rule::charge`] on any state.
    #[inline]
    pub fn charge(&self, state: &mut AnyState, now: u64, cost: u64) {
        with_rule!(self, state, |rule, s| rule.charge(s, now, cost))
    }

    /// [`Rule::status`] on any state.
    #[inline]
    pub fn status(&self, state: &mut AnyState, now: u64) -> Status {
        with_rule!(self, state, |rule, s| rule.status(s, now))
    }

    /// Decides `cost` at `now` and, when it passes and `op` charges, charges it: one
    /// dispatch for what [`AnyRule::admits`], [`AnyRule::charge`] and [`AnyRule::status`] do
    /// in three, so that the chosen rule's arithmetic inlines into one piece of code. Returns
    /// the status after the call and, when the cost does not pass, the µs until it would (a
    /// denied call leaves the state as it was).
    #[inline(always)]
    pub fn decide(
        &self,
        state: &mut AnyState,
        now: u64,
        cost: u64,
        op: Op,
    ) -> (Status, Option<u64>) {
        with_rule!(self, state, |rule, s| {
            let verdict = rule.admits(s, now, cost);
            if verdict.is_ok() && op.charges() {
                rule.charge(s, now, cost);
            }
            (rule.status(s, now), verdict.err())
        })
    }

    /// Charges `cost` whether it passes or not and decides from the state after
    /// ([`FixedWindow::count`]): the counting of [`crate::Request::count_refusals`], which
    /// only fixed windows take. Any other rule decides as a check ([`AnyRule::decide`]).
    #[inline]
    pub fn count(&self, state: &mut AnyState, now: u64, cost: u64) -> (Status, Option<u64>) {
        match self {
            AnyRule::FixedWindow(rule) => rule.count(state_of!(state, FixedWindow), now, cost),
            other => other.decide(state, now, cost, Op::Check),
        }
    }

    /// Runs a pacing call for `cost` units at `now` ([`Pace`]); `None` when the rule cannot
    /// hand out slots and `pace` asks for one (a window algorithm and a reservation or its
    /// cancellation), changing nothing.
    pub fn pace(&self, state: &mut AnyState, now: u64, cost: u64, pace: Pace) -> Option<Paced> {
        let (retry, slot, given_back) = match (pace, self) {
            (Pace::Adjust { delta }, _) => {
                with_rule!(self, state, |rule, s| rule.adjust(s, now, delta));
                (None, None, false)
            }
            (pace, AnyRule::Gcra(rule)) => scheduled(rule, state_of!(state, Gcra), now, cost, pace),
            (pace, AnyRule::TokenBucket(rule)) => {
                scheduled(rule, state_of!(state, TokenBucket), now, cost, pace)
            }
            (Pace::Reserve { .. } | Pace::Cancel { .. }, _) => return None,
        };
        Some(Paced {
            decision: self.decision(state, now, retry),
            slot,
            given_back,
        })
    }

    /// The quota's limit.
    #[inline]
    pub fn limit(&self) -> u64 {
        match self {
            AnyRule::FixedWindow(r) => r.limit(),
            AnyRule::SlidingLog(r) => r.limit(),
            AnyRule::SlidingWindow(r) => r.limit(),
            AnyRule::TokenBucket(r) => r.limit(),
            AnyRule::Gcra(r) => r.limit(),
        }
    }

    /// The decision for a state at `now`, `retry_us` being `Some` exactly when denied.
    #[inline]
    pub fn decision(&self, state: &mut AnyState, now: u64, retry_us: Option<u64>) -> Decision {
        decision(self.limit(), self.status(state, now), retry_us)
    }
}

/// A reservation or its cancellation on a rule that hands out slots: the refusal's wait (µs),
/// the slot taken, and whether units went back.
fn scheduled<R: Schedule>(
    rule: &R,
    state: &mut R::State,
    now: u64,
    cost: u64,
    pace: Pace,
) -> (Option<u64>, Option<Slot>, bool) {
    match pace {
        Pace::Reserve { max_wait } => {
            let max_wait = u64::try_from(max_wait.as_micros()).unwrap_or(u64::MAX);
            match rule.reserve(state, now, cost, max_wait) {
                Ok((wait, ticket)) => (
                    None,
                    Some(Slot::new(Duration::from_micros(wait), ticket)),
                    false,
                ),
                Err(retry) => (Some(retry), None, false),
            }
        }
        Pace::Cancel { ticket } => (None, None, rule.cancel(state, now, cost, ticket)),
        Pace::Adjust { delta } => {
            rule.adjust(state, now, delta);
            (None, None, false)
        }
    }
}
