//! The part of a decision that describes a key's state, apart from admitting or not.

/// What a key's state says at one instant, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Unit-cost requests that would pass right now.
    pub remaining: u64,
    /// Microseconds until the key is back to a full quota (0 when it already is).
    pub reset_after_us: u64,
}
