//! A validated request to a store: which (limit, key) pairs, each at what cost.
//!
//! A request is the prepared form of a check: [`crate::Limiter::prepare`] builds each key
//! once and validates once, and the same request can then be decided ([`crate::Op::Check`] or
//! [`crate::Op::Peek`]) or reset. Stores can rely on what [`Request::new`] and
//! [`Request::with_costs`] checked: at least one entry, no (limit, key) twice, and each entry's
//! cost between 1 and its limit's capacity. So no store re-validates, and "cost too large" is
//! decided once, apart from "not now".
//!
//! The cost is the entry's, not the request's: an Envoy request may ask a different
//! `hits_addend` of each descriptor, and all of them are still one all-or-nothing decision
//! (one store call). Most requests have one cost for every entry ([`Request::new`]).

use smallvec::SmallVec;

use crate::{CheckError, Key, Limit};

/// One limit and the key it counts.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key, built by [`Key::new`].
    pub key: Key,
    /// Decided but never refusing: the [`crate::Limiter`] checks shadow entries apart from the
    /// others, after them, and counts their would-be denials. Stores ignore it.
    pub shadow: bool,
    /// Units this entry asks of its limit: set by [`Request::new`] for every entry, or by
    /// [`Entry::with_cost`] for a request built by [`Request::with_costs`].
    pub cost: u64,
}

impl<'a> Entry<'a> {
    /// `limit` for `key`, a shadow entry when the limit is a shadow limit.
    #[inline]
    pub fn new(limit: &'a Limit, key: Key) -> Entry<'a> {
        Entry {
            shadow: limit.is_shadow(),
            limit,
            key,
            cost: 1,
        }
    }

    /// The same entry asking `cost` units (validated by [`Request::with_costs`]).
    #[inline]
    #[must_use]
    pub fn with_cost(mut self, cost: u64) -> Entry<'a> {
        self.cost = cost;
        self
    }
}

/// One or several (limit, key) pairs decided together, all or nothing, each at its own cost.
/// One limit may appear with several keys (an Envoy request limiting two clients at once).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    entries: SmallVec<[Entry<'a>; 2]>,
}

impl<'a> Request<'a> {
    /// A request for `entries`, every one at `cost` (whatever cost they carried).
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
        for mut e in entries {
            e.cost = cost;
            list.push(e);
        }
        Request::validated(list)
    }

    /// A request for `entries`, each at its own [`Entry::cost`] (see [`Entry::with_cost`]):
    /// still decided all or nothing, in one store call.
    ///
    /// # Errors
    /// As [`Request::new`], for each entry's cost.
    pub fn with_costs(
        entries: impl IntoIterator<Item = Entry<'a>>,
    ) -> Result<Request<'a>, CheckError> {
        let mut list: SmallVec<[Entry<'a>; 2]> = SmallVec::new();
        for e in entries {
            list.push(e);
        }
        Request::validated(list)
    }

    #[inline(always)]
    fn validated(entries: SmallVec<[Entry<'a>; 2]>) -> Result<Request<'a>, CheckError> {
        if entries.is_empty() {
            return Err(CheckError::NoLimits);
        }
        for (i, e) in entries.iter().enumerate() {
            if e.cost == 0 {
                return Err(CheckError::ZeroCost);
            }
            if entries[..i].iter().any(|p| p.key == e.key) {
                return Err(CheckError::DuplicateLimit(e.limit.name().to_owned()));
            }
            fits(e.limit, e.cost)?;
        }
        Ok(Request { entries })
    }

    /// Entries already validated as part of a request: a subset of a request's entries needs
    /// no second check.
    pub(crate) fn from_validated(entries: SmallVec<[Entry<'a>; 2]>) -> Request<'a> {
        debug_assert!(!entries.is_empty());
        Request { entries }
    }

    /// The entries, in the caller's order.
    #[inline]
    pub fn entries(&self) -> &[Entry<'a>] {
        &self.entries
    }

    /// Makes entry `index` a shadow entry (an Envoy rule in shadow mode over an enforced
    /// limit). A limit's own shadow flag cannot be lifted this way.
    pub fn set_shadow(&mut self, index: usize) {
        if let Some(e) = self.entries.get_mut(index) {
            e.shadow = true;
        }
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
