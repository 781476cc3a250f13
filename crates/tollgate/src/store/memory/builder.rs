//! [`MemoryStoreBuilder`]: a memory store's settings, and the sweeper thread it starts.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::shard::Shard;
use super::{Inner, MemoryStore, Padded, SHARDS, Sweep};
use crate::Clock;
use crate::log_throttle::LogThrottle;

/// Configures a [`MemoryStore`].
#[derive(Debug)]
pub struct MemoryStoreBuilder {
    pub(super) max_keys: usize,
    pub(super) sweep_interval: Option<Duration>,
    pub(super) clock: Arc<dyn Clock>,
}

impl MemoryStoreBuilder {
    /// The most keys held at once (default [`DEFAULT_MAX_KEYS`](super::DEFAULT_MAX_KEYS)).
    ///
    /// At the cap, a new key takes the place of the key of its shard (one of 64, by hash) that
    /// replenishes soonest: a replenished key if there is one (nothing lost), else the one
    /// closest to replenishing, which then starts again from a full quota early (the least
    /// over-admission possible). This costs O(log n) and never sweeps the store. A new key is
    /// refused with [`StoreError::Full`](crate::StoreError::Full) only when its shard holds no key to give up (a cap
    /// far below 64). Counted as `tollgate_store_full_total{limit, result}`.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How often a background thread drops replenished keys (default 10 s); `None` for no
    /// thread (replenished keys then go only when a new key at the cap takes the place of one
    /// of its shard, or by calling [`MemoryStore::sweep`]).
    ///
    /// The thread locks one shard at a time, and visits only the keys it drops. It drops the
    /// keys replenished by the store clock's now, but in a shard whose decisions were made at
    /// times the caller gave (`decide_at`, a [`crate::Limiter`] with a clock of its own), no
    /// further than the last of those times: the store cannot tell whether the caller's clock
    /// runs with its own.
    pub fn sweep_interval(mut self, interval: Option<Duration>) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// The clock for `now: None` calls, [`MemoryStore::sweep`] and the sweeper (default
    /// [`SteadyClock`](crate::SteadyClock): the wall clock that never steps; the sweeper also
    /// waits for the callers' time, see [`MemoryStoreBuilder::sweep_interval`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the store and starts its sweeper thread, which ends when the store is dropped.
    pub fn build(self) -> MemoryStore {
        let inner = Arc::new(Inner {
            shards: (0..SHARDS)
                .map(|_| Padded(Mutex::new(Shard::default())))
                .collect(),
            len: AtomicUsize::new(0),
            max_keys: self.max_keys,
            clock: self.clock,
            full_warnings: LogThrottle::default(),
        });
        // A zero interval swept all 64 shards in a busy loop (a core's worth of CPU, every
        // shard lock taken back to back): at least a millisecond between sweeps.
        if let Some(interval) = self.sweep_interval.map(|i| i.max(Duration::from_millis(1))) {
            spawn_sweeper(Arc::downgrade(&inner), interval);
        }
        MemoryStore { inner }
    }
}

/// Sweeps every `interval` until the store is dropped. A sweep that panics (a bug, in the
/// store or in the clock it was given) is logged and the next one runs as usual: a sweeper
/// that ended would leave every replenished key in place for good, and the store would
/// then work at its key cap, silently.
fn spawn_sweeper(inner: Weak<Inner>, interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-sweeper".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                let Some(inner) = inner.upgrade() else { return };
                let sweep = || inner.sweep_all(inner.clock.now().as_micros(), Sweep::UpToCallers);
                if catch_unwind(AssertUnwindSafe(sweep)).is_err() {
                    tracing::error!("the memory store's sweep panicked; the next runs as usual");
                }
            }
        });
    // Without a thread the store still works: a new key at the cap evicts.
    drop(spawned);
}
