//! The answer to a reservation: a slot to wait for, or a refusal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::verdict::{LimitDecision, Source};
use crate::{Key, Limit, OnStoreError, Outcome, Slot, StoreErrorKind, Verdict};

/// What [`crate::Limiter::reserve`] (or [`crate::Limiter::acquire`]) got: a slot to go at, or
/// a refusal, as a check's [`Outcome`]. Keep it to give the slot back
/// ([`crate::Limiter::cancel`]) when the caller will not use it.
///
/// A slot is given back once: the reservation remembers that it was cancelled, and a clone
/// is the same reservation (cancelling either cancels both). A second cancellation gives back
/// nothing, since the store hands a given-back slot, and its ticket, to the next reservation.
#[derive(Debug, Clone)]
#[must_use]
pub struct Reservation {
    pub(crate) limit: Limit,
    pub(crate) key: Key,
    pub(crate) cost: u64,
    pub(crate) decision: LimitDecision,
    pub(crate) slot: Option<Slot>,
    /// Set by the first cancellation (of this reservation or of a clone of it).
    pub(crate) cancelled: Arc<AtomicBool>,
}

impl Reservation {
    /// Allowed (go after [`Reservation::wait`]), limited (the next slot begins later than the
    /// wait the caller accepts: retry after the given wait to be offered one within it), or
    /// unavailable (the store failed and the limit's policy denies): the outcome of
    /// [`Reservation::verdict`], so a reservation reads exactly as a check of one limit.
    pub fn outcome(&self) -> Outcome {
        self.verdict().outcome()
    }

    /// The reservation as a check's [`Verdict`] of its one limit: what the faces turn into
    /// statuses and rate-limit headers, the same way for a reservation as for a check.
    pub fn verdict(&self) -> Verdict {
        Verdict::new(smallvec::smallvec![self.decision.clone()])
    }

    /// When allowed: how long from the reservation until the slot begins (zero: go now; a
    /// shadow limit and an `allow` policy always say zero).
    pub fn wait(&self) -> Option<Duration> {
        if !self.decision.shown_allowed() {
            return None;
        }
        Some(
            self.slot
                .filter(|_| !self.decision.shadow)
                .map_or(Duration::ZERO, |s| s.wait()),
        )
    }

    /// The slot taken in the store (or in the `local` fallback), `None` when no slot was
    /// taken (refused, a shadow limit, an `allow` policy).
    pub fn slot(&self) -> Option<Slot> {
        self.slot
    }

    /// The limit's decision: the key's state after the reservation, and how it was reached.
    pub fn decision(&self) -> &LimitDecision {
        &self.decision
    }

    /// The store failure a policy answered for, if any.
    pub fn store_error(&self) -> Option<StoreErrorKind> {
        match self.decision.source {
            Source::Policy { error, .. } => Some(error),
            Source::Store | Source::DenyCache | Source::Lease => None,
        }
    }

    /// Units reserved.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The slot to give back, the first time only: `None` when no slot was taken or it was
    /// already given back (or tried to be) through this reservation or a clone of it. After
    /// it was given back, the same ticket names the slot of the next reservation of the key.
    pub(crate) fn slot_to_cancel(&self) -> Option<Slot> {
        let slot = self.slot?;
        // Only the flag itself is shared through it: no ordering with other memory needed.
        (!self.cancelled.swap(true, Ordering::Relaxed)).then_some(slot)
    }

    /// Where the slot was taken: the `local` fallback when the store failed.
    pub(crate) fn on_local(&self) -> bool {
        matches!(
            self.decision.source,
            Source::Policy {
                policy: OnStoreError::Local,
                ..
            }
        )
    }
}
