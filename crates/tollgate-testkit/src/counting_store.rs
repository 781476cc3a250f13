//! [`CountingStore`]: a store wrapper that counts its calls by kind, and can hold its lease
//! takes and its decisions (as a slow network would) until the test opens them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tollgate::{
    Decisions, Entry, LeaseGrant, LeaseTake, Op, Pace, Paced, Request, Store, StoreError, Timestamp,
};

/// Counts the calls that reach `inner`. Clones share the counts and the gate.
#[derive(Debug, Clone)]
pub struct CountingStore<S> {
    inner: S,
    /// [`Store::decide`] calls.
    pub decides: Arc<AtomicUsize>,
    /// [`Store::reset`] calls.
    pub resets: Arc<AtomicUsize>,
    /// [`Store::take_lease`] calls (counted when they start, before the gate).
    pub takes: Arc<AtomicUsize>,
    /// [`Store::pace`] calls.
    pub paces: Arc<AtomicUsize>,
    /// While false, `take_lease` yields instead of answering (open by default).
    pub open: Arc<AtomicBool>,
    /// While false, `decide` yields instead of answering (open by default).
    pub decides_open: Arc<AtomicBool>,
    /// Times `take_lease` yields before answering, as a store across a network would.
    pub round_trip: usize,
}

impl<S: Store> CountingStore<S> {
    /// Counting every call to `inner`, takes open, no round trip.
    pub fn new(inner: S) -> CountingStore<S> {
        CountingStore {
            inner,
            decides: Arc::default(),
            resets: Arc::default(),
            takes: Arc::default(),
            paces: Arc::default(),
            open: Arc::new(AtomicBool::new(true)),
            decides_open: Arc::new(AtomicBool::new(true)),
            round_trip: 0,
        }
    }

    /// Every call so far, of any kind.
    pub fn calls(&self) -> usize {
        self.decides.load(Ordering::SeqCst)
            + self.resets.load(Ordering::SeqCst)
            + self.takes.load(Ordering::SeqCst)
            + self.paces.load(Ordering::SeqCst)
    }

    /// The store it counts for.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for CountingStore<S> {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        self.decides.fetch_add(1, Ordering::SeqCst);
        while !self.decides_open.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        self.inner.decide(request, op, now).await
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.resets.fetch_add(1, Ordering::SeqCst);
        self.inner.reset(request).await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        for _ in 0..self.round_trip {
            tokio::task::yield_now().await;
        }
        self.inner.take_lease(take, now).await
    }

    async fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        self.paces.fetch_add(1, Ordering::SeqCst);
        self.inner.pace(entry, pace, now).await
    }

    fn in_process(&self) -> bool {
        self.inner.in_process()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};

    #[tokio::test]
    async fn counts_each_kind_of_call() {
        let store = CountingStore::new(MemoryStore::new());
        let limiter = Limiter::builder(store.clone())
            .limit(
                Limit::new("a", Algorithm::Gcra, Quota::per_second(5).expect("quota"))
                    .expect("limit"),
            )
            .build()
            .expect("limiter");
        let none: &[(&str, &str)] = &[];
        let _ = limiter.check("a", none).await.expect("check");
        let _ = limiter.check("a", none).await.expect("check");
        let request = limiter.prepare(&["a"], none, 1).expect("request");
        limiter.reset(&request).await.expect("reset");
        assert_eq!(store.decides.load(Ordering::SeqCst), 2);
        assert_eq!(store.resets.load(Ordering::SeqCst), 1);
        assert_eq!(store.calls(), 3);
    }
}
