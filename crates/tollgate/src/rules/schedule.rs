//! Reservations: a caller takes the key's next free slot and waits for it, instead of being
//! refused and asking again.
//!
//! Only the two algorithms whose state is a point in time can hand out slots: GCRA and the
//! token bucket both keep, in effect, the key's *theoretical arrival time* (`tat`, when the key
//! would be back to a full quota). A reservation moves it on by the cost, exactly as a check
//! does, but is also taken when the slot it gets begins later than now: the state then runs
//! ahead of the tolerance, and every later check or reservation sees those units as spent.
//! So concurrent reservations, on any instance, get consecutive slots, and the sequence of
//! slot times is the limit's schedule. The window algorithms count what happened in a past
//! window and have no future slot to give: a reservation on them is refused with
//! [`crate::CheckError::CannotReserve`].
//!
//! A reservation is identified by the `tat` it left (its *ticket*): it can be given back
//! ([`Schedule::cancel`]) exactly when the key's `tat` is still that ticket, that is, when no
//! later unit was charged after it. Once another caller took a later slot, giving the units
//! back would move that caller's slot into the past of the schedule, so the cancelled slot is
//! lost instead (the upstream sees one idle slot).

use crate::rules::Rule;

/// An algorithm that can hand out future slots.
pub trait Schedule: Rule {
    /// The key's theoretical arrival time at `now`, in µs: when it would be back to a full
    /// quota, never earlier than `now`.
    fn tat(&self, state: &Self::State, now: u64) -> u64;

    /// Takes the next slot for `cost` units when it begins within `max_wait` µs of `now`:
    /// `Ok((wait, ticket))`, the µs until the slot and the reservation's ticket. A slot
    /// further away is refused, changing nothing: `Err(retry)`, the µs after which the same
    /// reservation would be taken.
    ///
    /// # Errors
    /// `Err(retry_us)` when the next slot begins more than `max_wait` from now.
    fn reserve(
        &self,
        state: &mut Self::State,
        now: u64,
        cost: u64,
        max_wait: u64,
    ) -> Result<(u64, u64), u64> {
        // A check's refusal is exactly the wait until the cost passes, including every unit
        // reserved ahead of it.
        let wait = self.admits(state, now, cost).err().unwrap_or(0);
        if wait > max_wait {
            return Err(wait - max_wait);
        }
        self.charge(state, now, cost);
        Ok((wait, self.tat(state, now)))
    }

    /// Gives back the `cost` units of the reservation whose ticket is `ticket`, when no unit
    /// was charged after it (the key's `tat` is still the ticket); returns whether it did.
    fn cancel(&self, state: &mut Self::State, now: u64, cost: u64, ticket: u64) -> bool {
        if self.tat(state, now) != ticket {
            return false;
        }
        self.refund(state, now, cost);
        true
    }
}
