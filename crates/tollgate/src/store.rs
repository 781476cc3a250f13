//! The one trait every store implements.
//!
//! A store holds per-key state and decides atomically: [`Store::check`] evaluates every entry
//! of a [`Request`] and charges them all only if all admit, in one step that no concurrent
//! caller can interleave with. Algorithms are not the store's business: it runs the
//! [`crate::rules`] (memory) or their Lua twins (Redis).
//!
//! `now` is `Some` when the caller's clock decides (tests, simulation, a limiter built with a
//! clock) and `None` when the store's own time does (Redis `TIME`, so that instances with
//! skewed clocks agree; the memory store's configured clock).

mod memory;

use std::future::Future;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::{Decision, Request, StoreError, Timestamp};

pub use memory::{DEFAULT_MAX_KEYS, DEFAULT_SWEEP_INTERVAL, MemoryStore, MemoryStoreBuilder};

/// One decision per entry of a request, in the request's order.
pub type Decisions = SmallVec<[Decision; 2]>;

/// Shared rate-limit state.
pub trait Store: Send + Sync + 'static {
    /// Decides every entry and, when all admit, charges them all; otherwise charges none.
    fn check(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Decisions, StoreError>> + Send;

    /// Decides every entry without charging anything.
    fn peek(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Decisions, StoreError>> + Send;

    /// Forgets the state of every entry's key.
    fn reset(&self, request: &Request<'_>) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<S: Store> Store for Arc<S> {
    fn check(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Decisions, StoreError>> + Send {
        (**self).check(request, now)
    }

    fn peek(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> impl Future<Output = Result<Decisions, StoreError>> + Send {
        (**self).peek(request, now)
    }

    fn reset(&self, request: &Request<'_>) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).reset(request)
    }
}
