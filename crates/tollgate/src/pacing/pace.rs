//! The three pacing operations, one enum as [`crate::Op`] is for checks.

use std::time::Duration;

/// What a pacing call does to one (limit, key) pair; the units are the entry's cost
/// ([`crate::Entry::cost`]) for a reservation and its cancellation, `delta` for a settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pace {
    /// Takes the key's next free slot for the entry's cost when it begins within `max_wait`
    /// (GCRA and token bucket only), and answers the wait until it. A slot further away is
    /// refused and charges nothing, like a check's refusal.
    Reserve {
        /// The longest the caller will wait for its slot.
        max_wait: Duration,
    },
    /// Gives back the entry's cost taken by the reservation whose ticket is `ticket`
    /// ([`crate::Slot::ticket`]), when no later slot of the key was handed out after it;
    /// otherwise the slot is lost and nothing changes.
    Cancel {
        /// The reservation's ticket.
        ticket: u64,
    },
    /// Settles a cost known afterwards: `delta > 0` charges that many more units whatever
    /// the quota says (past the limit it is a debt later callers wait out), `delta < 0`
    /// gives back `-delta` units the key still counts (never past a full quota). Every
    /// algorithm; docs/algorithms.md says what each one does with it.
    Adjust {
        /// Units to charge (positive) or refund (negative).
        delta: i64,
    },
}
