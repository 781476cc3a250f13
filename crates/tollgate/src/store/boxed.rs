//! [`BoxStore`]: any [`Store`] behind one type, chosen at run time.
//!
//! [`Store`] returns `impl Future`, which keeps the memory store's calls free of boxing but
//! makes the trait unusable as `dyn Store`. A service that picks its store from a config file
//! (memory, Redis, Redis Cluster), a tower layer that must not carry a store type, and the
//! Envoy service all need one type for "some store": this is it, in the core, once (as tower's
//! `BoxService` is for services). The price is one boxed future per call, small next to a
//! network round trip; code that knows its store at compile time uses it directly.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{
    Decisions, Entry, LeaseGrant, LeaseTake, Op, Pace, Paced, Request, Store, StoreError, Timestamp,
};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe twin of [`Store`], implemented for every store.
trait DynStore: Send + Sync + 'static {
    fn decide<'a>(
        &'a self,
        request: &'a Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<Decisions, StoreError>>;

    fn reset<'a>(&'a self, request: &'a Request<'_>) -> BoxFuture<'a, Result<(), StoreError>>;

    fn take_lease<'a>(
        &'a self,
        take: &'a LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<LeaseGrant, StoreError>>;

    fn pace<'a>(
        &'a self,
        entry: &'a Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<Paced, StoreError>>;

    fn in_process(&self) -> bool;

    fn as_any(&self) -> &dyn Any;

    fn type_name(&self) -> &'static str;
}

impl<S: Store> DynStore for S {
    fn decide<'a>(
        &'a self,
        request: &'a Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<Decisions, StoreError>> {
        Box::pin(Store::decide(self, request, op, now))
    }

    fn reset<'a>(&'a self, request: &'a Request<'_>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::reset(self, request))
    }

    fn take_lease<'a>(
        &'a self,
        take: &'a LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<LeaseGrant, StoreError>> {
        Box::pin(Store::take_lease(self, take, now))
    }

    fn pace<'a>(
        &'a self,
        entry: &'a Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> BoxFuture<'a, Result<Paced, StoreError>> {
        Box::pin(Store::pace(self, entry, pace, now))
    }

    fn in_process(&self) -> bool {
        Store::in_process(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<S>()
    }
}

/// Any store, type-erased. Cheap to clone: clones share the store.
///
/// ```
/// use tollgate::{BoxStore, MemoryStore};
///
/// let store = BoxStore::new(MemoryStore::new());
/// assert!(store.downcast_ref::<MemoryStore>().is_some());
/// ```
#[derive(Clone)]
pub struct BoxStore {
    inner: Arc<dyn DynStore>,
}

impl BoxStore {
    /// Erases `store`'s type.
    pub fn new(store: impl Store) -> BoxStore {
        BoxStore {
            inner: Arc::new(store),
        }
    }

    /// The store inside, if it is an `S` (e.g. to read a memory store's key counts).
    pub fn downcast_ref<S: Store>(&self) -> Option<&S> {
        self.inner.as_any().downcast_ref::<S>()
    }
}

impl Store for BoxStore {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        self.inner.decide(request, op, now).await
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.inner.reset(request).await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        self.inner.take_lease(take, now).await
    }

    async fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        self.inner.pace(entry, pace, now).await
    }

    fn in_process(&self) -> bool {
        self.inner.in_process()
    }
}

impl fmt::Debug for BoxStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BoxStore")
            .field(&self.inner.type_name())
            .finish()
    }
}
