//! The state of any algorithm, for stores that keep states of several algorithms side by side.

use crate::rules::{
    FixedWindowState, GcraState, SlidingLogState, SlidingWindowState, TokenBucketState,
};

/// One key's state, whichever algorithm it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyState {
    /// A fixed window state.
    FixedWindow(FixedWindowState),
    /// A sliding log state.
    SlidingLog(SlidingLogState),
    /// A sliding window state.
    SlidingWindow(SlidingWindowState),
    /// A token bucket state.
    TokenBucket(TokenBucketState),
    /// A GCRA state.
    Gcra(GcraState),
}
