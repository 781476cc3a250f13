//! Integration tests of the core: property tests of the pure algorithms and the limiter's
//! failure policies.

mod deny_cache;
mod lease;
mod pacing;
mod policies;
mod properties;
mod protocol;
mod settlement;
