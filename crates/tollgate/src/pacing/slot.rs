//! A reservation's place in a limit's schedule.

use std::time::Duration;

/// A slot taken by [`crate::Pace::Reserve`]: the caller may go after `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    wait: Duration,
    ticket: u64,
}

impl Slot {
    /// The slot `wait` from the reservation, identified by `ticket`.
    #[inline]
    pub const fn new(wait: Duration, ticket: u64) -> Slot {
        Slot { wait, ticket }
    }

    /// How long after the reservation the slot begins (zero: go now).
    #[inline]
    pub const fn wait(&self) -> Duration {
        self.wait
    }

    /// What the store needs to give the slot back ([`crate::Pace::Cancel`]): the key's
    /// theoretical arrival time after the reservation, in µs on the store's clock.
    #[inline]
    pub const fn ticket(&self) -> u64 {
        self.ticket
    }
}
