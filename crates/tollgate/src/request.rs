//! A validated request to a store: which (limit, key) pairs, each at what cost.
//!
//! A request is the prepared form of a check: [`crate::Limiter::prepare`] builds each key
//! once and validates once, and the same request can then be decided ([`crate::Op::Check`] or
//! [`crate::Op::Peek`]) or reset. Stores can rely on what [`Request::new`] (and the limiter's
//! `prepare_*` functions) checked: at least one entry, no (limit, key) twice, and each entry's
//! cost at least 1 and, for an enforced entry, at most its limit's capacity. So no store
//! re-validates, and "cost too large" is decided once, apart from "not now".
//!
//! A shadow entry is the exception: its cost may exceed its capacity by one. A shadow limit
//! must never refuse, and a cost it can never admit failing the whole request (a 413 naming
//! the shadow limit, from the tower layer) is a refusal, and one that shows the limit. So a
//! shadow entry's cost above its capacity becomes capacity + 1, and the entry is decided
//! like any other: every algorithm refuses a cost above its capacity without charging it
//! (each rule, and each Lua twin, has the case), so the limiter counts it as the shadow
//! limit's would-be refusal and the enforced entries decide the request. A store may meet a
//! cost of capacity + 1 on a shadow entry only, and must refuse it; never a larger one (the
//! arithmetic of every rule stays far from overflowing). A request that counts its refusals
//! ([`Request::count_refusals`]: a fixed window charges them too) charges such an entry
//! capacity + 1, not the cost asked.
//!
//! The cost is the entry's, not the request's: an Envoy request may ask a different
//! `hits_addend` of each descriptor, and all of them are still one all-or-nothing decision
//! (one store call). Most requests have one cost for every entry ([`Request::new`]); a cost
//! per entry is set only through the limiter ([`crate::Limiter::prepare_keyed_costs`],
//! [`crate::Limiter::prepare_with`]), which builds and validates each entry.
//!
//! All or nothing is the default, not the only shape. An entry's [`Need`] says what the
//! request needs of it: that it admits ([`Need::Must`], the default), that at least one entry
//! of the request's *any-of group* admits ([`Need::OneOf`]: Envoy's quota mode), or nothing
//! ([`Need::Optional`]). Whatever the needs, a store decides the request in one atomic step:
//! when the request is refused nothing is charged, and when it passes every entry that admits
//! is charged and every refusing one is not ([`Request::admitted`] is the one rule).
//!
//! [`Request::count_refusals`] makes a request count as envoyproxy/ratelimit does: every
//! entry charged its cost whether it admits or not, each on its own, and answered from its
//! count after (fixed windows only); a peek of it answers from the count as it stands,
//! refused only past the limit (the reference's check-only `hits_addend` 0).
//!
//! Beside it in `request/`: [`Ask`](crate::Ask) (an entry built per call), [`Op`](crate::Op) (what
//! a store call does with a request) and [`SingleRequest`](crate::SingleRequest) (one entry,
//! decided offline).

pub(crate) mod ask;
pub(crate) mod op;
pub(crate) mod single_request;

use std::collections::HashSet;

use smallvec::SmallVec;

use crate::limit::key::BuildKeyHasher;
use crate::{CheckError, Key, Limit};

/// Up to this many entries, duplicates are found by comparing pairs; past it, through a set.
const PAIRWISE_UP_TO: usize = 16;

/// What a request needs of one of its entries to be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Need {
    /// The entry must admit: a refusal refuses the request (all or nothing, the default).
    #[default]
    Must,
    /// At least one of the request's `OneOf` entries must admit (the request's any-of group,
    /// Envoy's quota mode): their refusals refuse the request only when every one of them
    /// refuses. When the request passes, those that admit are charged and those that refuse
    /// are not.
    OneOf,
    /// Nothing: the entry is decided, and charged when it admits and the request passes, but
    /// its refusal never refuses the request (a `OneOf` entry whose group another member
    /// already satisfied, outside this request).
    Optional,
}

impl Need {
    /// Whether a request whose entries need and admit as `pairs` says (need, admitted) is
    /// admitted: every [`Need::Must`] entry admits, and when there are [`Need::OneOf`]
    /// entries at least one of them does. The one rule of [`Request::admitted`], for stores
    /// that hold needs apart from a request (a Redis call in flight).
    pub fn admits(pairs: impl IntoIterator<Item = (Need, bool)>) -> bool {
        let mut one_of = None;
        for (need, allowed) in pairs {
            match need {
                Need::Must if !allowed => return false,
                Need::OneOf => one_of = Some(one_of.unwrap_or(false) || allowed),
                Need::Must | Need::Optional => {}
            }
        }
        one_of.unwrap_or(true)
    }
}

/// One limit and the key it counts.
///
/// Its fields are the core's: a store reads them through the accessors, and only the core
/// sets a cost per entry or a shadow flag (through [`crate::Limiter::prepare_keyed_costs`]
/// and [`crate::Limiter::prepare_with`], which validate them).
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The limit.
    pub(crate) limit: &'a Limit,
    /// The key, built by [`Key::new`].
    pub(crate) key: Key,
    /// Decided but never refusing: the [`crate::Limiter`] checks shadow entries apart from the
    /// others, after them, and counts their would-be denials. Stores ignore it.
    pub(crate) shadow: bool,
    /// Units this entry asks of its limit: set by [`Request::new`] for every entry, or per
    /// entry by the limiter's `prepare_keyed_costs` / `prepare_with`.
    pub(crate) cost: u64,
    /// What the request needs of this entry ([`Need::Must`] unless set by
    /// [`Request::set_need`] or [`crate::Ask::need`]).
    pub(crate) need: Need,
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
            need: Need::Must,
        }
    }

    /// The same entry asking `cost` units (validated by [`Request::with_costs`]).
    #[inline]
    #[must_use]
    pub(crate) fn with_cost(mut self, cost: u64) -> Entry<'a> {
        self.cost = cost;
        self
    }

    /// The limit.
    #[inline]
    pub fn limit(&self) -> &'a Limit {
        self.limit
    }

    /// The key, built by [`Key::new`].
    #[inline]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// A shadow entry: decided but never refusing (the limiter decides it apart; stores
    /// ignore it).
    #[inline]
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// Units this entry asks of its limit (validated: at least 1, and at most its capacity,
    /// or capacity + 1 for a shadow entry asked more: the store refuses it, a would-be
    /// refusal).
    #[inline]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// What the request needs of this entry.
    #[inline]
    pub fn need(&self) -> Need {
        self.need
    }
}

/// One or several (limit, key) pairs decided together, all or nothing, each at its own cost.
/// One limit may appear with several keys (an Envoy request limiting two clients at once).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    entries: SmallVec<[Entry<'a>; 2]>,
    /// Every entry charged whether it admits or not ([`Request::count_refusals`]).
    counts_refusals: bool,
}

impl<'a> Request<'a> {
    /// A request for `entries`, every one at `cost` (whatever cost they carried).
    ///
    /// # Errors
    /// [`CheckError::NoLimits`], [`CheckError::DuplicateLimit`], [`CheckError::ZeroCost`] or
    /// [`CheckError::CostExceedsCapacity`] (for an enforced entry: a shadow entry's cost above
    /// its capacity is decided, as a refusal, not an error).
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
    pub(crate) fn with_costs(
        entries: impl IntoIterator<Item = Entry<'a>>,
    ) -> Result<Request<'a>, CheckError> {
        let mut list: SmallVec<[Entry<'a>; 2]> = SmallVec::new();
        for e in entries {
            list.push(e);
        }
        Request::validated(list)
    }

    #[inline(always)]
    fn validated(mut entries: SmallVec<[Entry<'a>; 2]>) -> Result<Request<'a>, CheckError> {
        if entries.is_empty() {
            return Err(CheckError::NoLimits);
        }
        // A few entries (every real request) are compared pairwise, cheapest when small; a
        // request of many (a library caller's, or a hostile descriptor list) through a set,
        // so that its cost stays linear.
        for e in entries.iter_mut().filter(|e| e.shadow) {
            // A shadow entry never fails the request: a cost its limit can never admit is
            // decided by the store as one unit over its capacity (a refusal, counted as the
            // shadow limit's would-be one). Clamped, never sent as asked: the caller chooses
            // the cost (up to u64::MAX), and the rules and their Lua twins add it to counts
            // and multiply it by intervals, which a cost far above capacity overflows (a
            // sliding log charged u64::MAX entries, under its shard's lock).
            e.cost = e.cost.min(e.limit.capacity().saturating_add(1));
        }
        let mut seen: Option<HashSet<&Key, BuildKeyHasher>> = None;
        for (i, e) in entries.iter().enumerate() {
            if e.cost == 0 {
                return Err(CheckError::ZeroCost);
            }
            let duplicate = match &mut seen {
                None if i < PAIRWISE_UP_TO => entries[..i].iter().any(|p| p.key == e.key),
                None => {
                    let mut set: HashSet<&Key, BuildKeyHasher> =
                        entries[..i].iter().map(|p| &p.key).collect();
                    let duplicate = !set.insert(&e.key);
                    seen = Some(set);
                    duplicate
                }
                Some(set) => !set.insert(&e.key),
            };
            if duplicate {
                return Err(CheckError::DuplicateLimit(e.limit.name().to_owned()));
            }
            // Shadow entries were clamped above.
            if !e.shadow {
                fits(e.limit, e.cost)?;
            }
        }
        Ok(Request {
            entries,
            counts_refusals: false,
        })
    }

    /// Entries already validated as part of a request (one that does not count refusals).
    pub(crate) fn from_validated(entries: SmallVec<[Entry<'a>; 2]>) -> Request<'a> {
        debug_assert!(!entries.is_empty());
        Request {
            entries,
            counts_refusals: false,
        }
    }

    /// Entries already validated as part of a request: a subset of a request's entries needs
    /// no second check. It counts refusals when `like` does.
    pub(crate) fn subset_of(like: &Request<'_>, entries: SmallVec<[Entry<'a>; 2]>) -> Request<'a> {
        debug_assert!(!entries.is_empty());
        Request {
            entries,
            counts_refusals: like.counts_refusals,
        }
    }

    /// The entries at `indices` (each of this request, in the order given) as a request of
    /// their own, with their needs and costs; `None` when `indices` is empty or names an
    /// entry this request does not have.
    pub fn select(&self, indices: &[usize]) -> Option<Request<'a>> {
        let mut entries: SmallVec<[Entry<'a>; 2]> = SmallVec::new();
        for &i in indices {
            entries.push(self.entries.get(i)?.clone());
        }
        (!entries.is_empty()).then(|| Request::subset_of(self, entries))
    }

    /// The entries, in the caller's order.
    #[inline]
    pub fn entries(&self) -> &[Entry<'a>] {
        &self.entries
    }

    /// Sets what the request needs of entry `index` (see [`Need`]).
    pub fn set_need(&mut self, index: usize, need: Need) {
        if let Some(e) = self.entries.get_mut(index) {
            e.need = need;
        }
    }

    /// Makes a check of this request count as envoyproxy/ratelimit counts: every entry is
    /// charged its cost whether it admits or not, each on its own (no all or nothing, no
    /// [`Need`]), and decided from its count after the charge (refused when it is above the
    /// limit). A peek of such a request charges nothing and answers each entry from its
    /// count as it stands, as the reference answers a descriptor of `hits_addend` 0: refused
    /// only when the count is **above** the limit (a count at the limit is admitted, with 0
    /// remaining), whatever the entries' costs.
    ///
    /// # Errors
    /// [`CheckError::RefusalsNotCountable`] when an entry's limit is not an exact fixed
    /// window (the reference's only algorithm): the other algorithms have no count to
    /// charge past the limit, and a lease-mode limit charges ahead of its decisions.
    pub fn count_refusals(&mut self) -> Result<(), CheckError> {
        for e in &self.entries {
            let reason = if e.limit.algorithm() != crate::Algorithm::FixedWindow {
                Some("is not a fixed_window limit")
            } else if e.limit.lease_mode().is_some() {
                Some("is a lease-mode limit")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(CheckError::RefusalsNotCountable {
                    limit: e.limit.name().to_owned(),
                    reason,
                });
            }
        }
        self.counts_refusals = true;
        Ok(())
    }

    /// Whether a check charges refusals too ([`Request::count_refusals`]).
    #[inline]
    pub fn counts_refusals(&self) -> bool {
        self.counts_refusals
    }

    /// Whether any entry needs something other than [`Need::Must`].
    #[inline]
    pub fn has_needs(&self) -> bool {
        self.entries.iter().any(|e| e.need != Need::Must)
    }

    /// Whether the request is admitted when its entries admit as `allowed` says (one flag
    /// per entry, in order): every [`Need::Must`] entry admits, and when there are
    /// [`Need::OneOf`] entries at least one of them does. The one rule every store follows;
    /// when it holds, a check charges exactly the entries that admit.
    pub fn admitted(&self, allowed: impl IntoIterator<Item = bool>) -> bool {
        Need::admits(self.entries.iter().map(|e| e.need).zip(allowed))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Entry, Namespace, Quota};

    fn limit() -> Limit {
        Limit::new("l", Algorithm::Gcra, Quota::per_second(10).expect("valid"))
            .and_then(|l| l.keyed_by(["u"]))
            .expect("valid")
    }

    fn entries(limit: &Limit, users: impl IntoIterator<Item = u64>) -> Vec<Entry<'_>> {
        let ns = Namespace::default();
        users
            .into_iter()
            .map(|u| Entry::new(limit, Key::new(&ns, limit, &[("u", u.to_string())])))
            .collect()
    }

    /// A duplicate key is found in a short request (pairwise) and in a long one (through a
    /// set), wherever it stands; distinct keys pass.
    #[test]
    fn duplicates_are_found_at_every_size() {
        let l = limit();
        for n in [2, PAIRWISE_UP_TO, PAIRWISE_UP_TO + 1, 1000] {
            let n = n as u64;
            assert!(Request::new(entries(&l, 0..n), 1).is_ok(), "{n} distinct");
            for (first, second) in [(0, n - 1), (n - 2, n - 1), (0, 1)] {
                let mut users: Vec<u64> = (0..n).collect();
                users[second as usize] = users[first as usize];
                let err = Request::new(entries(&l, users), 1).expect_err("a duplicate");
                assert!(matches!(err, CheckError::DuplicateLimit(_)), "{n}: {err:?}");
            }
        }
    }

    /// A request of 100 000 distinct keys is validated (pairwise, that was 5·10⁹ comparisons).
    #[test]
    fn a_huge_request_is_validated_in_linear_time() {
        let l = limit();
        let request = Request::new(entries(&l, 0..100_000), 1).expect("distinct keys");
        assert_eq!(request.entries().len(), 100_000);
    }
}
