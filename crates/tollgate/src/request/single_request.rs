//! A request of exactly one (limit, key) pair, borrowing its key: the shape of most checks,
//! for the memory store's fast path.
//!
//! [`crate::Request`] owns its keys in a small vector so that it can carry any number of
//! entries across an `await`; building one per call costs more than a memory-store decision
//! itself (the key's reference count, and moving the vector). This type is three words, `Copy`,
//! and validated the same way, so [`crate::MemoryStore::check_single_at`] can decide with no
//! per-call work beyond the decision.

use crate::request::fits;
use crate::{CheckError, Key, Limit};

/// One (limit, key) pair at one cost, validated: cost between 1 and the limit's capacity.
#[derive(Debug, Clone, Copy)]
pub struct SingleRequest<'a> {
    limit: &'a Limit,
    key: &'a Key,
    cost: u64,
}

impl<'a> SingleRequest<'a> {
    /// `cost` units of `limit` for `key` (built by [`Key::new`] for this limit).
    ///
    /// # Errors
    /// [`CheckError::ZeroCost`] or [`CheckError::CostExceedsCapacity`].
    #[inline]
    pub fn new(limit: &'a Limit, key: &'a Key, cost: u64) -> Result<Self, CheckError> {
        if cost == 0 {
            return Err(CheckError::ZeroCost);
        }
        fits(limit, cost)?;
        Ok(SingleRequest { limit, key, cost })
    }

    /// The limit.
    #[inline]
    pub fn limit(&self) -> &'a Limit {
        self.limit
    }

    /// The key.
    #[inline]
    pub fn key(&self) -> &'a Key {
        self.key
    }

    /// The cost, between 1 and the limit's capacity.
    #[inline]
    pub fn cost(&self) -> u64 {
        self.cost
    }
}
