//! The store the service runs on, chosen by config at start-up.
//!
//! [`tollgate::Store`] returns `impl Future`, so it cannot be a trait object; an enum over the
//! two stores is the cheapest way to pick one at run time (one `match` per call, no boxing).
//! Both variants are cheap clones sharing their state, so a reloaded limiter gets the same
//! counters.

use std::time::Duration;

use tollgate::{Clock, Decisions, MemoryStore, Request, Store, StoreError, Timestamp};
use tollgate_redis::RedisStore;

use crate::config::{Backend, StoreConfig};

/// The memory store or Redis.
#[derive(Clone, Debug)]
pub enum AnyStore {
    /// Counters in this process.
    Memory(MemoryStore),
    /// Counters in Redis (single or cluster).
    Redis(RedisStore),
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
        Ok(match &config.backend {
            Backend::Memory => {
                let builder = MemoryStore::builder().max_keys(config.max_keys);
                AnyStore::Memory(match clock {
                    Some(clock) => builder
                        .clock(clock)
                        .sweep_interval(Some(Duration::from_secs(10)))
                        .build(),
                    None => builder.build(),
                })
            }
            Backend::Redis(url) => AnyStore::Redis(
                RedisStore::builder(url.expose())
                    .timeout(config.timeout)
                    .build()
                    .await?,
            ),
            Backend::Cluster(urls) => AnyStore::Redis(
                RedisStore::cluster_builder(urls.iter().map(|u| u.expose().to_owned()))
                    .timeout(config.timeout)
                    .build()
                    .await?,
            ),
        })
    }

    /// Keys held per limit, for the memory store (Redis keys are Redis's business): exact
    /// up to 100k keys, above that estimated from 8 of the store's 64 shards, so a scrape
    /// stays cheap however many keys there are.
    pub fn memory_keys(&self) -> Option<Vec<(String, u64)>> {
        match self {
            AnyStore::Memory(m) => {
                let sample = if m.len() <= 100_000 { 64 } else { 8 };
                Some(m.keys_per_limit(sample))
            }
            AnyStore::Redis(_) => None,
        }
    }

    /// `memory`, `redis` or `redis_cluster`, for logs and `/v1/limits`.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(r) if r.is_cluster() => "redis_cluster",
            AnyStore::Redis(_) => "redis",
        }
    }
}

impl Store for AnyStore {
    async fn check(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        match self {
            AnyStore::Memory(s) => s.check(request, now).await,
            AnyStore::Redis(s) => s.check(request, now).await,
        }
    }

    async fn peek(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        match self {
            AnyStore::Memory(s) => s.peek(request, now).await,
            AnyStore::Redis(s) => s.peek(request, now).await,
        }
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(s) => s.reset(request).await,
            AnyStore::Redis(s) => s.reset(request).await,
        }
    }
}
