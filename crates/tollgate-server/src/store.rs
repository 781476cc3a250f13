//! The store the service runs on, chosen by config at start-up.
//!
//! The store itself is the core's [`BoxStore`] (the one run-time store type, shared with the
//! tower layer and the Envoy service); this module only opens it from `[store]` and keeps
//! what the service shows of it: its kind (`/v1/limits`, logs) and, for the memory store,
//! its key counts (`tollgate_keys`). It is a cheap clone sharing the store's state, so a
//! reloaded limiter gets the same counters.
//!
//! **Started while Redis is down**, the service does not exit: in an orchestrator that
//! restarts it, a Redis outage would become a crash loop of every rate limiter, with no
//! limit's policy applied. A transient failure to connect (refused, timed out) starts the
//! service on a `Connecting` store instead: every call fails as a connection error until a
//! background task connects (with backoff), so every limit answers by its `on_store_error`
//! policy and `/readyz` says why it is not ready. A permanent failure (a wrong password, no
//! permission) still refuses to start, with the reason.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tollgate::{
    BoxStore, Clock, Decisions, Entry, LeaseGrant, LeaseTake, Limiter, MemoryStore, Op, Pace,
    Paced, Request, Store, StoreError, Timestamp,
};
use tollgate_redis::{RedisStore, RedisStoreBuilder};

use crate::config::{Backend, StoreConfig};

/// The configured store, its kind, and where resets heard from other instances go.
#[derive(Clone, Debug)]
pub struct AnyStore {
    store: BoxStore,
    kind: &'static str,
    deny_cache_entries: usize,
    /// The current limiter, whose deny cache forgets keys reset elsewhere (Redis pub/sub).
    reset_target: Arc<Mutex<Weak<Limiter<BoxStore>>>>,
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
        let reset_target: Arc<Mutex<Weak<Limiter<BoxStore>>>> = Arc::default();
        let on_connected = {
            let target = Arc::clone(&reset_target);
            let listen = config.deny_cache_entries > 0;
            let prefix = config.namespace.prefix().to_owned();
            move |redis: &RedisStore| {
                if listen {
                    hear_resets(redis, &prefix, target);
                }
            }
        };
        let (store, kind) = match redis_builder(&config.backend) {
            None => {
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
            Some(builder) => {
                let builder = config
                    .connection
                    .apply(coalescing(builder, config.max_batch))
                    .timeout(config.timeout)
                    .check_permissions(config.namespace.prefix());
                (
                    connect(move || builder.clone(), on_connected).await?,
                    config.backend.name(),
                )
            }
        };
        Ok(AnyStore {
            store,
            kind,
            deny_cache_entries: config.deny_cache_entries,
            reset_target,
        })
    }

    /// Refusals the limiter's deny cache may hold (0: off).
    pub fn deny_cache_entries(&self) -> usize {
        self.deny_cache_entries
    }

    /// Makes `limiter` the one whose deny cache hears resets made on other instances (the
    /// current limit set's, after a start or a reload).
    pub fn hear_resets_for(&self, limiter: &Arc<Limiter<BoxStore>>) {
        *self
            .reset_target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::downgrade(limiter);
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

    /// Whether the store is connected: always for the memory store; for Redis, once the
    /// first connection was made (started while Redis was down, not until then).
    pub fn connected(&self) -> bool {
        match self.store.downcast_ref::<Arc<Connecting>>() {
            Some(connecting) => connecting.redis.get().is_some(),
            None => true,
        }
    }

    /// Whether the Redis store's circuit breaker is open (`None`: the memory store; `false`
    /// while Redis is not connected yet).
    pub fn circuit_open(&self) -> Option<bool> {
        match self.store.downcast_ref::<Arc<Connecting>>() {
            // Not connected yet: no breaker has opened (calls fail on the connection), and the
            // gauge and the page still say so, rather than nothing.
            Some(connecting) => Some(connecting.redis.get().is_some_and(RedisStore::circuit_open)),
            None => self
                .store
                .downcast_ref::<RedisStore>()
                .map(RedisStore::circuit_open),
        }
    }

    /// Why the Redis store's circuit breaker is open (`None`: closed, the memory store, or
    /// not connected yet).
    pub fn circuit_cause(&self) -> Option<String> {
        let redis = match self.store.downcast_ref::<Arc<Connecting>>() {
            Some(connecting) => connecting.redis.get(),
            None => self.store.downcast_ref::<RedisStore>(),
        };
        redis.and_then(RedisStore::circuit_cause)
    }

    /// `memory`, `redis` or `redis_cluster`, for logs and `/v1/limits`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

/// Starts the listener that makes `target`'s deny cache forget keys reset on other instances
/// (Redis pub/sub), over `redis`'s own connection settings.
fn hear_resets(redis: &RedisStore, prefix: &str, target: Arc<Mutex<Weak<Limiter<BoxStore>>>>) {
    redis.listen_for_resets(prefix, move |key| {
        let limiter = target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .upgrade();
        if let Some(limiter) = limiter
            && limiter.forget_denial(key)
        {
            tracing::debug!(key, "reset elsewhere: cached refusal forgotten");
        }
    });
}

/// Connects to Redis now, or, when Redis is unreachable for now, returns a [`Connecting`]
/// store and keeps trying in the background; `on_connected` runs once the store is connected.
async fn connect(
    builder: impl Fn() -> RedisStoreBuilder + Send + Sync + 'static,
    on_connected: impl FnOnce(&RedisStore) + Send + 'static,
) -> Result<BoxStore, StoreError> {
    match builder().build().await {
        Ok(redis) => {
            on_connected(&redis);
            Ok(BoxStore::new(redis))
        }
        Err(error) if error.is_transient() => {
            tracing::warn!(
                cause = %error_chain(&error),
                "redis is unreachable at start; serving every limit by its on_store_error policy and connecting in the background"
            );
            let connecting = Arc::new(Connecting {
                redis: OnceLock::new(),
            });
            tokio::spawn(connect_in_background(
                Arc::downgrade(&connecting),
                builder,
                on_connected,
            ));
            Ok(BoxStore::new(connecting))
        }
        Err(error) => Err(error),
    }
}

/// A Redis store not connected yet: fails every call as a connection error until the
/// background task has connected, then is that store.
#[derive(Debug)]
struct Connecting {
    redis: OnceLock<RedisStore>,
}

impl Connecting {
    fn get(&self) -> Result<&RedisStore, StoreError> {
        self.redis.get().ok_or_else(|| {
            StoreError::Connection(
                "not connected to redis yet (connecting in the background)".into(),
            )
        })
    }
}

impl Store for Connecting {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        self.get()?.decide(request, op, now).await
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.get()?.reset(request).await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        self.get()?.take_lease(take, now).await
    }

    async fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        self.get()?.pace(entry, pace, now).await
    }

    fn in_process(&self) -> bool {
        false
    }
}

/// The first retry waits this long; each next one twice as long, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Tries to connect until it works (or the store is dropped), backing off; logs the first
/// failure of each kind and then at most every 30 s.
async fn connect_in_background(
    target: Weak<Connecting>,
    builder: impl Fn() -> RedisStoreBuilder + Send + Sync + 'static,
    on_connected: impl FnOnce(&RedisStore) + Send + 'static,
) {
    let mut wait = FIRST_BACKOFF;
    let mut last_log: Option<(tokio::time::Instant, &'static str)> = None;
    loop {
        tokio::time::sleep(wait).await;
        if target.strong_count() == 0 {
            return;
        }
        match builder().build().await {
            Ok(redis) => {
                if let Some(connecting) = target.upgrade() {
                    on_connected(&redis);
                    let _ = connecting.redis.set(redis);
                    tracing::info!("connected to redis; limits are decided by the store again");
                }
                return;
            }
            Err(error) => {
                let kind = error.kind().as_str();
                let quiet = last_log
                    .is_some_and(|(at, k)| k == kind && at.elapsed() < Duration::from_secs(30));
                if !quiet {
                    tracing::warn!(cause = %error_chain(&error), "still cannot reach redis; retrying");
                    last_log = Some((tokio::time::Instant::now(), kind));
                }
                wait = (wait * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// An error and its causes, `: `-separated, for logs (the store errors' own messages are
/// short and their sources say what happened).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut last = out.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Wrappers often repeat their cause's message: say it once.
        if text != last {
            out.push_str(": ");
            out.push_str(&text);
        }
        last = text;
        source = cause.source();
    }
    out
}

/// A Redis store's builder for `backend`; `None` for the memory store.
fn redis_builder(backend: &Backend) -> Option<RedisStoreBuilder> {
    match backend {
        Backend::Memory => None,
        Backend::Redis(url) => Some(RedisStore::builder(url.expose())),
        Backend::Cluster(urls) => Some(RedisStore::cluster_builder(
            urls.iter().map(|u| u.expose().to_owned()),
        )),
        Backend::Sentinel { sentinels, master } => Some(RedisStore::sentinel_builder(
            sentinels.iter().map(|u| u.expose().to_owned()),
            master.clone(),
        )),
    }
}

/// `builder` with coalesced calls of at most `max_batch` requests, or none (`None`).
fn coalescing(builder: RedisStoreBuilder, max_batch: Option<usize>) -> RedisStoreBuilder {
    match max_batch {
        Some(n) => builder.max_batch(n),
        None => builder.coalesce(false),
    }
}
