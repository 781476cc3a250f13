//! [`LeaseGrant`]: a store's answer to a [`crate::LeaseTake`].

use std::time::Duration;

/// The store's answer to a [`crate::LeaseTake`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Units taken (0 when refused or for a give-back alone).
    pub granted: u64,
    /// The start of the window they belong to (µs since the epoch, store's clock): what a
    /// give-back names.
    pub window: u64,
    /// How long the window lasts after the store's `now`: the lease ends then at the latest.
    pub valid_for: Duration,
    /// Units left in the store after the call.
    pub remaining: u64,
    /// When refused (`granted < need`): until `need` units may be available.
    pub retry_after: Option<Duration>,
}
