//! A validated request to a store: which (limit, key) pairs, at what cost.
//!
//! Stores can rely on what [`Request::new`] checked: at least one entry, no (limit, key) twice,
//! and a
//! cost between 1 and every limit's capacity. So no store re-validates, and "cost too large"
//! is decided once, apart from "not now".

use smallvec::SmallVec;

use crate::{CheckError, Key, Limit};

/// One limit and the key it counts.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key, built by [`Key::new`].
    pub key: Key,
}

/// One or several (limit, key) pairs decided together, all or nothing, at one cost. One limit
/// may appear with several keys (an Envoy request limiting two clients at once).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    entries: SmallVec<[Entry<'a>; 2]>,
    cost: u64,
}

impl<'a> Request<'a> {
    /// A request for `entries` at `cost`.
    ///
    /// # Errors
    /// [`CheckError::NoLimits`], [`CheckError::DuplicateLimit`], [`CheckError::ZeroCost`] or
    /// [`CheckError::CostExceedsCapacity`].
    #[inline(always)]
    pub fn new(
        entries: impl IntoIterator<Item = Entry<'a>>,
        cost: u64,
    ) -> Result<Request<'a>, CheckError> {
        // Pushed one by one: `collect` goes through `SmallVec::extend`, which does not inline
        // and costs a single-entry request more than the rest of a memory-store check.
        let mut list: SmallVec<[Entry<'a>; 2]> = SmallVec::new();
        for e in entries {
            list.push(e);
        }
        let entries = list;
        if entries.is_empty() {
            return Err(CheckError::NoLimits);
        }
        if cost == 0 {
            return Err(CheckError::ZeroCost);
        }
        for (i, e) in entries.iter().enumerate() {
            if entries[..i].iter().any(|p| p.key == e.key) {
                return Err(CheckError::DuplicateLimit(e.limit.name().to_owned()));
            }
            fits(e.limit, cost)?;
        }
        Ok(Request { entries, cost })
    }

    /// The entries, in the caller's order.
    #[inline]
    pub fn entries(&self) -> &[Entry<'a>] {
        &self.entries
    }

    /// The cost, between 1 and every entry's capacity.
    #[inline]
    pub fn cost(&self) -> u64 {
        self.cost
    }
}

/// `cost` within what `limit` can ever hold (else "cost too large", apart from "not now").
#[inline]
pub(crate) fn fits(limit: &Limit, cost: u64) -> Result<(), CheckError> {
    if cost > limit.capacity() {
        return Err(CheckError::CostExceedsCapacity {
            limit: limit.name().to_owned(),
            cost,
            capacity: limit.capacity(),
        });
    }
    Ok(())
}
