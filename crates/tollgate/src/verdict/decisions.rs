//! A store's answer: one [`Decision`] per entry of a request, in the request's order.
//!
//! Inline storage for the usual one or two entries (no allocation per check); the container
//! itself stays private so that the public API is a slice and an iterator, not a
//! `SmallVec` whose version users would have to match.

use std::ops::Deref;

use smallvec::SmallVec;

use crate::Decision;

/// One decision per entry of a request, in the request's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions(SmallVec<[Decision; 2]>);

impl Decisions {
    /// No decision yet.
    #[inline]
    pub fn new() -> Decisions {
        Decisions(SmallVec::new())
    }

    /// Appends the next entry's decision.
    #[inline]
    pub fn push(&mut self, decision: Decision) {
        self.0.push(decision);
    }
}

impl Deref for Decisions {
    type Target = [Decision];

    #[inline]
    fn deref(&self) -> &[Decision] {
        &self.0
    }
}

impl FromIterator<Decision> for Decisions {
    fn from_iter<I: IntoIterator<Item = Decision>>(iter: I) -> Self {
        let mut out = Decisions::new();
        for d in iter {
            out.push(d);
        }
        out
    }
}

impl IntoIterator for Decisions {
    type Item = Decision;
    type IntoIter = IntoIter;

    #[inline]
    fn into_iter(self) -> IntoIter {
        IntoIter(self.0.into_iter())
    }
}

/// The decisions of a [`Decisions`], by value.
#[derive(Debug)]
pub struct IntoIter(smallvec::IntoIter<[Decision; 2]>);

impl Iterator for IntoIter {
    type Item = Decision;

    #[inline]
    fn next(&mut self) -> Option<Decision> {
        self.0.next()
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl From<Decision> for Decisions {
    #[inline]
    fn from(decision: Decision) -> Self {
        let mut out = Decisions::new();
        out.push(decision);
        out
    }
}
