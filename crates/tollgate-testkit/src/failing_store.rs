//! [`FailingStore`]: a memory store with a switch that makes every call fail, for testing
//! failure policies and how each face reports a store failure; and one that makes every call
//! panic, for testing how each face survives a bug.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tollgate::{
    Decisions, Entry, LeaseGrant, LeaseTake, MemoryStore, Op, Pace, Paced, Request, Store,
    StoreError, Timestamp,
};

/// A [`MemoryStore`] that fails every call with a connection error while it is down. Cheap to
/// clone: clones share the state and the switch.
#[derive(Debug, Clone)]
pub struct FailingStore {
    memory: MemoryStore,
    down: Arc<AtomicBool>,
    panicking: Arc<AtomicBool>,
}

impl FailingStore {
    /// Up, over `memory`.
    pub fn new(memory: MemoryStore) -> FailingStore {
        FailingStore {
            memory,
            down: Arc::new(AtomicBool::new(false)),
            panicking: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Down from the start, and for good unless [`FailingStore::set_down`] says otherwise.
    pub fn down() -> FailingStore {
        let store = FailingStore::new(MemoryStore::builder().sweep_interval(None).build());
        store.set_down(true);
        store
    }

    /// Makes every call fail (`true`) or reach the memory store again (`false`).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Makes every call panic (`true`), as a bug in a store would, or not (`false`).
    pub fn set_panicking(&self, panicking: bool) {
        self.panicking.store(panicking, Ordering::SeqCst);
    }

    /// The memory store behind the switch.
    pub fn memory(&self) -> &MemoryStore {
        &self.memory
    }

    fn failure(&self) -> Result<(), StoreError> {
        assert!(
            !self.panicking.load(Ordering::SeqCst),
            "test store panics on purpose"
        );
        match self.down.load(Ordering::SeqCst) {
            true => Err(StoreError::Connection("test store is down".into())),
            false => Ok(()),
        }
    }
}

impl Store for FailingStore {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        self.failure()?;
        self.memory.decide(request, op, now).await
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.failure()?;
        self.memory.reset(request).await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        self.failure()?;
        self.memory.take_lease(take, now).await
    }

    async fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        self.failure()?;
        self.memory.pace(entry, pace, now).await
    }

    fn in_process(&self) -> bool {
        false
    }
}
