//! [`LeaseTake`]: what the lease tier asks of a store, give-back included, in one call.

use crate::{Key, Limit};

/// One store call of the lease tier: give back `give_back` units to the window starting at
/// `give_back_window` (if it is still the key's current window), then take
/// `min(want, available)` units, or none when fewer than `need` are available. A give-back
/// alone is a take with `want = need = 0`.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTake<'a> {
    /// The limit (fixed window).
    pub limit: &'a Limit,
    /// The key.
    pub key: &'a Key,
    /// The most units to take.
    pub want: u64,
    /// The fewest units worth taking (the cost of the request waiting): fewer available
    /// takes nothing and refuses.
    pub need: u64,
    /// Unspent units of an earlier lease to give back first.
    pub give_back: u64,
    /// The window (start, µs since the epoch on the store's clock) those units were taken in.
    pub give_back_window: u64,
}
