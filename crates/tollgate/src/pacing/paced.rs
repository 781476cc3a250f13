//! A store's answer to a pacing call.

use crate::{Decision, Slot};

/// What one [`crate::Pace`] did.
///
/// `decision` is the key's state after the call (limit, remaining, reset). Its admission is
/// a refusal only for a reservation whose slot lies beyond its `max_wait` (the wait is then
/// how long until the same reservation would be taken); a reservation that got its slot has
/// `slot`, a cancellation says in `given_back` whether the units went back, and a settlement
/// always passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paced {
    /// The key after the call.
    pub decision: Decision,
    /// The slot a reservation took.
    pub slot: Option<Slot>,
    /// Whether a cancellation gave its units back.
    pub given_back: bool,
}
