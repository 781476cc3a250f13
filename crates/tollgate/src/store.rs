//! The one trait every store implements, and [`BoxStore`], the one way to pick a store at
//! run time.
//!
//! A store holds per-key state and decides atomically: [`Store::decide`] evaluates every
//! entry of a [`Request`] and, for [`Op::Check`], charges them all only if all admit, in one
//! step that no concurrent caller can interleave with. Algorithms are not the store's
//! business: it runs the [`crate::rules`] (memory) or their Lua twins (Redis).
//!
//! `now` is `Some` when the caller's clock decides (tests, simulation, a limiter built with a
//! clock) and `None` when the store's own time does (Redis `TIME`, so that instances with
//! skewed clocks agree; the memory store's configured clock).
//!
//! Beside it in `store/`: the [`MemoryStore`](crate::MemoryStore), [`BoxStore`](crate::BoxStore) (a
//! store chosen at run time), [`StoreError`](crate::StoreError) (how a store fails) and
//! [`OnStoreError`](crate::OnStoreError) (what a limit then decides).

mod boxed;
mod memory;
pub(crate) mod on_store_error;
pub(crate) mod store_error;

use std::future::Future;
use std::sync::Arc;

use crate::{
    Decisions, Entry, LeaseGrant, LeaseTake, Op, Pace, Paced, Request, StoreError, Timestamp,
};

pub use boxed::BoxStore;
pub use memory::{DEFAULT_MAX_KEYS, MemoryStore, MemoryStoreBuilder};

/// Shared rate-limit state.
pub trait Store: Send + Sync + 'static {
    /// Decides every entry at `now` (the store's own time when `None`); for [`Op::Check`],
    /// charges them all when all admit and none otherwise. A denied or peeked request writes
    /// nothing.
    fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Decisions, StoreError>> + Send;

    /// Forgets the state of every entry's key.
    fn reset(&self, request: &Request<'_>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The lease tier's one call (see [`crate::lease`]): gives back `take.give_back` units to
    /// their window if it is still the key's current one, then takes `min(want, available)`
    /// units, or none when fewer than `need` are available (a refusal, writing nothing but
    /// the give-back), atomically. A store without leases answers an error, and the limit's
    /// failure policy applies.
    ///
    /// No method of this trait has a default: a store that wraps another (a connection not
    /// made yet, a counting test double) must say what each call does, so that it cannot
    /// forget to forward one (a lease-mode limit behind a wrapper that kept a default error
    /// would never reach the store it wraps).
    fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<LeaseGrant, StoreError>> + Send;

    /// A pacing call on one (limit, key) pair, atomically ([`Pace`]): a reservation of the
    /// key's next slot for the entry's cost, its cancellation, or a settlement. Stores never
    /// see a reservation on a limit that cannot hand out slots (the [`crate::Limiter`]
    /// refuses it), and answer one with an error if they do.
    fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Paced, StoreError>> + Send;

    /// Whether this store answers in this process, without I/O (the memory store). The
    /// limiter times only the calls of stores that do not (`tollgate_store_latency_seconds`):
    /// an in-process decision takes well under a microsecond, less than reading the clock
    /// twice to time it, and would only fill the histogram's lowest bucket.
    fn in_process(&self) -> bool;
}

impl<S: Store> Store for Arc<S> {
    fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Decisions, StoreError>> + Send {
        (**self).decide(request, op, now)
    }

    fn reset(&self, request: &Request<'_>) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).reset(request)
    }

    fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<LeaseGrant, StoreError>> + Send {
        (**self).take_lease(take, now)
    }

    fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Paced, StoreError>> + Send {
        (**self).pace(entry, pace, now)
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }
}
