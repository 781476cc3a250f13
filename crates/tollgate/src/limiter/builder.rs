//! [`LimiterBuilder`]: a [`Limiter`]'s limits, namespace, clock and deny cache, checked once
//! when it is built (two limits of one name are an error there, not at the first check).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::{Limiter, NameHasher};
use crate::lease::tier::LeaseTier;
use crate::limiter::deny_cache::DenyCache;
use crate::limiter::top_denied::LimitActivity;
use crate::log_throttle::LogThrottle;
use crate::{Clock, Limit, LimitError, Namespace, Store};

impl<S: Store> Limiter<S> {
    /// A builder over `store`.
    pub fn builder(store: S) -> LimiterBuilder<S> {
        LimiterBuilder {
            store,
            limits: Vec::new(),
            namespace: Namespace::default(),
            clock: None,
            deny_cache: None,
        }
    }
}

/// Configures a [`Limiter`].
pub struct LimiterBuilder<S> {
    store: S,
    limits: Vec<Limit>,
    namespace: Namespace,
    clock: Option<Arc<dyn Clock>>,
    deny_cache: Option<usize>,
}

impl<S: Store> LimiterBuilder<S> {
    /// Adds a limit.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Adds limits.
    pub fn limits(mut self, limits: impl IntoIterator<Item = Limit>) -> Self {
        self.limits.extend(limits);
        self
    }

    /// The key prefix (default `tollgate`).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = namespace;
        self
    }

    /// Decide at this clock's time instead of the store's.
    ///
    /// Over a [`crate::MemoryStore`] on a clock of its own (`MemoryStore::new()`'s, the wall
    /// clock), the decisions keep this clock's time: the store's background sweep goes no
    /// further, in each of its shards, than the time of the last decision made there, so a
    /// [`crate::FakeClock`] that stands still keeps its keys however long the wall clock runs
    /// (they go once a decision there comes at a later time, or at the key cap). The same
    /// holds for the `local` failure policy's store.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Remembers up to `entries` refusals and answers them without a store call while they
    /// hold, which is worth it in front of a remote store, where it turns an abusive client's
    /// flood of refused requests into no store traffic at all. `0` turns it off (the default).
    ///
    /// A refusal of cost `c` holds for every cost ≥ `c` until its `retry_after` as long as
    /// the key is only charged meanwhile, by any instance. Units given back end it early, and
    /// only those given back through this limiter are seen here: a [`Limiter::reset`], an
    /// [`Limiter::adjust`] with `delta < 0`, a [`Limiter::cancel`] or a dropped
    /// [`Limiter::acquire`] that returned its slot forget the key's cached refusal. A reset on
    /// another instance must be forwarded with [`Limiter::forget_denial`]. An `adjust` with
    /// `delta < 0`, a cancellation or a lease give-back on another instance is never
    /// published: this instance may then keep refusing what the store would admit, until
    /// the cached refusal's `retry_after` ends (up to a whole period for a fixed window;
    /// docs/algorithms.md, "The exact deny cache", bounds it for each algorithm).
    pub fn deny_cache(mut self, entries: usize) -> Self {
        self.deny_cache = (entries > 0).then_some(entries);
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    /// [`LimitError::InvalidName`] naming `name` when two limits share a name.
    pub fn build(self) -> Result<Limiter<S>, LimitError> {
        let mut limits =
            HashMap::with_capacity_and_hasher(self.limits.len(), NameHasher::default());
        for limit in self.limits {
            let name = limit.name_arc().clone();
            if limits.insert(name.clone(), limit).is_some() {
                return Err(LimitError::InvalidName {
                    field: "name",
                    value: name.to_string(),
                    reason: "is used by two limits",
                });
            }
        }
        let activity = limits
            .keys()
            .map(|name| (Arc::clone(name), LimitActivity::default()))
            .collect();
        Ok(Limiter {
            store: self.store,
            activity,
            limits,
            namespace: self.namespace,
            clock: self.clock,
            local: OnceLock::new(),
            deny_cache: self.deny_cache.map(DenyCache::new),
            leases: LeaseTier::new(),
            warnings: LogThrottle::default(),
        })
    }
}

impl<S> fmt::Debug for LimiterBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("limits", &self.limits.len())
            .finish_non_exhaustive()
    }
}
