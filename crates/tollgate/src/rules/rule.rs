//! The one shape every algorithm has, so that stores, tests and the Lua ports treat them alike.
//!
//! An algorithm is three pure functions of a state, the time and a cost: `admits` (would this
//! cost pass now, and if not, how long until it would), `charge` (record an admitted cost) and
//! `status` (remaining units and time to a full quota). [`Rule::check`] and [`Rule::peek`] are
//! built from them once, here, so no algorithm can get "a denied call changes nothing" or
//! "peek consumes nothing" wrong on its own. Every Lua script follows the same three steps.

use std::fmt::Debug;
use std::time::Duration;

use crate::{Admission, Decision, Status, Timestamp};

/// An algorithm with its quota applied, ready to decide.
///
/// Costs passed in must be between 1 and the rule's capacity, or capacity + 1 (a shadow
/// entry asked more than its limit can ever admit: refused, charging nothing); [`crate::Request`]
/// guarantees this for everything that goes through a store.
pub trait Rule {
    /// Per-key state. `Default` is the state of a key never seen (a full quota).
    type State: Default + Clone + PartialEq + Debug + Send;

    /// The quota's limit, reported in every [`Decision`].
    fn limit(&self) -> u64;

    /// `Ok` when `cost` units pass at `now`; otherwise the microseconds until they would.
    ///
    /// # Errors
    /// `Err(retry_after_us)` when the cost does not pass now.
    fn admits(&self, state: &Self::State, now: u64, cost: u64) -> Result<(), u64>;

    /// Records `cost` units at `now`: an admitted cost (after [`Rule::admits`] said yes), or a
    /// reservation's ([`crate::rules::Schedule`]), which may take the state past the limit.
    fn charge(&self, state: &mut Self::State, now: u64, cost: u64);

    /// Records a settlement's extra charge of `units` at `now` ([`Rule::adjust`]), whatever
    /// the quota says, but never more than one full capacity beyond empty, on top of room for
    /// a queue of reservations [`super::DEBT_HORIZON_US`] deep: what would go past that is
    /// forgiven, so that repeated charges cannot owe for ever (a key refused and kept for
    /// years). GCRA: `tat − now ≤ 2 × burst × T + h × T`; token bucket: `tokens ≥ −burst −
    /// h` (`h = ⌈DEBT_HORIZON_US / T⌉`); sliding log (no reservations): at most `2 × limit`
    /// live entries. Debt taken beyond the cap by reservations of a longer wait is kept
    /// (their slots were handed out), and a charge then adds nothing.
    /// The windows' counters (the default, [`Rule::charge`]) end with their window anyway.
    fn debit(&self, state: &mut Self::State, now: u64, units: u64) {
        self.charge(state, now, units);
    }

    /// Remaining units and time to a full quota at `now`.
    fn status(&self, state: &Self::State, now: u64) -> Status;

    /// Gives back up to `units` units that are still counted at `now`, newest first, never
    /// past a full quota: a refund takes back a charge the quota still holds, and creates no
    /// capacity the quota would not have had without that charge (units that already left
    /// the window, or refilled, are not given twice).
    fn refund(&self, state: &mut Self::State, now: u64, units: u64);

    /// Settles a cost known only afterwards: `delta > 0` charges that many more units
    /// whatever the quota says (past the limit, a debt later callers wait out, capped at one
    /// capacity beyond empty: [`Rule::debit`]), `delta < 0` refunds `-delta`
    /// ([`Rule::refund`]), 0 changes nothing.
    fn adjust(&self, state: &mut Self::State, now: u64, delta: i64) {
        match delta.signum() {
            1 => self.debit(state, now, delta.unsigned_abs()),
            -1 => self.refund(state, now, delta.unsigned_abs()),
            _ => {}
        }
    }

    /// Decides and, when admitted, consumes: `(state, now, cost) -> (decision, new state)`.
    /// A denied call returns the state unchanged.
    fn check(&self, mut state: Self::State, now: Timestamp, cost: u64) -> (Decision, Self::State) {
        let decision = self.check_in_place(&mut state, now.as_micros(), cost);
        (decision, state)
    }

    /// [`Rule::check`] on a state held in place (what stores do).
    fn check_in_place(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        match self.admits(state, now, cost) {
            Ok(()) => {
                self.charge(state, now, cost);
                decision(self.limit(), self.status(state, now), None)
            }
            Err(retry_us) => decision(self.limit(), self.status(state, now), Some(retry_us)),
        }
    }

    /// Decides without consuming: would `cost` pass now, and the state as it is.
    fn peek(&self, state: &Self::State, now: Timestamp, cost: u64) -> Decision {
        let now = now.as_micros();
        let retry = self.admits(state, now, cost).err();
        decision(self.limit(), self.status(state, now), retry)
    }
}

/// Builds a decision from a status; `retry_us` is `Some` exactly when denied.
#[inline]
pub(crate) fn decision(limit: u64, status: Status, retry_us: Option<u64>) -> Decision {
    Decision {
        admission: Admission::from_wait(retry_us.map(Duration::from_micros)),
        limit,
        remaining: status.remaining,
        reset_after: Duration::from_micros(status.reset_after_us),
    }
}
