//! The state of any algorithm, for stores that keep states of several algorithms side by side.

use crate::rules::{
    FixedWindowState, GcraState, SlidingLogState, SlidingWindowState, TokenBucketState,
};

/// One key's state, whichever algorithm it belongs to.
///
/// The two queue-backed states are boxed so that the enum stays 32 bytes: a memory-store map
/// entry (key, state, sweep deadline) then fills one 64-byte cache line instead of straddling
/// two, which is what a lookup among a million keys pays for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyState {
    /// A fixed window state.
    FixedWindow(FixedWindowState),
    /// A sliding log state.
    SlidingLog(Box<SlidingLogState>),
    /// A sliding window state.
    SlidingWindow(Box<SlidingWindowState>),
    /// A token bucket state.
    TokenBucket(TokenBucketState),
    /// A GCRA state.
    Gcra(GcraState),
}
