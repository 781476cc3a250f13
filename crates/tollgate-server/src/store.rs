//! The store the service runs on, chosen by config at start-up.
//!
//! The store itself is the core's [`BoxStore`] (the one run-time store type, shared with the
//! tower layer and the Envoy service); this module only opens it from `[store]` and keeps
//! what the service shows of it: its kind (`/v1/limits`, logs) and, for the memory store,
//! its key counts (`tollgate_keys`). It is a cheap clone sharing the store's state, so a
//! reloaded limiter gets the same counters.

use std::time::Duration;

use tollgate::{BoxStore, Clock, MemoryStore, StoreError};
use tollgate_redis::RedisStore;

use crate::config::{Backend, StoreConfig};

/// The configured store and its kind.
#[derive(Clone, Debug)]
pub struct AnyStore {
    store: BoxStore,
    kind: &'static str,
}

impl AnyStore {
    /// Opens the configured store. The memory store sweeps with `clock` (tests pass a fake
    /// one); Redis connects now, so a wrong URL fails at start-up rather than on the first
    /// request.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be reached.
    pub async fn open(
        config: &StoreConfig,
        clock: Option<impl Clock>,
    ) -> Result<AnyStore, StoreError> {
        let (store, kind) = match &config.backend {
            Backend::Memory => {
                let builder = MemoryStore::builder().max_keys(config.max_keys);
                let memory = match clock {
                    Some(clock) => builder
                        .clock(clock)
                        .sweep_interval(Some(Duration::from_secs(10)))
                        .build(),
                    None => builder.build(),
                };
                (BoxStore::new(memory), "memory")
            }
            Backend::Redis(url) => {
                let redis = RedisStore::builder(url.expose())
                    .timeout(config.timeout)
                    .build()
                    .await?;
                (BoxStore::new(redis), "redis")
            }
            Backend::Cluster(urls) => {
                let redis = RedisStore::cluster_builder(urls.iter().map(|u| u.expose().to_owned()))
                    .timeout(config.timeout)
                    .build()
                    .await?;
                (BoxStore::new(redis), "redis_cluster")
            }
        };
        Ok(AnyStore { store, kind })
    }

    /// The store, for the limiter.
    pub fn boxed(&self) -> &BoxStore {
        &self.store
    }

    /// Keys held per limit, for the memory store (Redis keys are Redis's business): exact
    /// up to 100k keys, above that estimated from 8 of the store's 64 shards, so a scrape
    /// stays cheap however many keys there are.
    pub fn memory_keys(&self) -> Option<Vec<(String, u64)>> {
        let memory = self.store.downcast_ref::<MemoryStore>()?;
        let sample = if memory.len() <= 100_000 { 64 } else { 8 };
        Some(memory.keys_per_limit(sample))
    }

    /// `memory`, `redis` or `redis_cluster`, for logs and `/v1/limits`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}
