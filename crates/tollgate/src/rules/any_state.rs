//! The state of any algorithm, for stores that keep states of several algorithms side by side.

use crate::rules::{
    FixedWindowState, GcraState, SlidingLogState, SlidingWindowState, TokenBucketState,
};

/// One key's state, whichever algorithm it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum AnyState {
    FixedWindow(FixedWindowState),
    SlidingLog(SlidingLogState),
    SlidingWindow(SlidingWindowState),
    TokenBucket(TokenBucketState),
    Gcra(GcraState),
}
