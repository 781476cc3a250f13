//! The exact local deny cache: refusals answered without a store round trip.
//!
//! A refusal of cost `c` for a key with `retry_after = r`, decided at `t`, means every request
//! of cost ≥ `c` for that key is refused until `t + r` as long as units are only spent: checks
//! and reservations, on any instance, only spend more, and a larger cost needs at least as
//! long. So an instance that remembers the refusal can answer the same refusal itself until
//! `t + r`, and an abusive client hammering one key costs the store nothing after its first
//! refusal.
//!
//! The cache answers only the cost it saw refused: for it, `t + r − now` is the exact wait the
//! store would give (a larger cost is refused too, but its own wait is longer, and only the
//! store knows it). When this instance charges the key (a smaller cost that passed), the
//! refusal is forgotten: it still holds, but it now ends later than remembered.
//!
//! Exactness, precisely:
//! - `t` is read **before** the store call. On the store's own clock (Redis `TIME`) the store
//!   decided at some instant after `t`, so `t + r` is never later than the true end of the
//!   refusal: the cache can stop refusing a little early (one round trip), never late.
//! - What can make it inexact is someone giving units back: a reset, a refund
//!   ([`crate::Limiter::adjust`] with `delta < 0`), a reservation's slot given back
//!   ([`crate::Limiter::cancel`], a dropped [`crate::Limiter::acquire`]), a lease's unspent
//!   units given back, or a config change. Through this instance, a reset, a refund and a
//!   slot that went back forget the key here; a config reload builds a new limiter, hence a
//!   new cache. A reset on another instance must be told
//!   ([`crate::Limiter::forget_denial`], which the service wires to Redis pub/sub). A refund,
//!   a cancellation or a lease give-back on another instance is never told: this instance
//!   may keep refusing what the store would admit.
//! - Either way (news never sent, or lost) it refuses the key at most until the cached
//!   refusal's own end, `t + r`: `r` is the store's `retry_after`, at most the limit's period
//!   for a fixed window or a sliding log (a whole period for a fixed window refused at the
//!   start of one), a period and one bucket for a sliding window; for token bucket and GCRA
//!   `burst × period ÷ limit` plus the wait for every unit reserved ahead of the key's next
//!   free slot or charged past the quota ([`crate::Limiter::adjust`] with `delta > 0`).
//!
//! Memory is bounded: at most `capacity` entries, in shards; a full shard drops, of a few
//! entries it samples, the one that expires soonest (an expired one first), so an insert
//! costs the same whatever the cache holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::Key;
use crate::limit::key::BuildKeyHasher;

const SHARDS: usize = 16;
/// Entries of a full shard looked at to choose the one to drop.
const EVICTION_SAMPLE: usize = 8;

/// The default number of refusals remembered.
pub const DEFAULT_DENY_CACHE_ENTRIES: usize = 100_000;

/// Remembered refusals, by key.
///
/// A clone is a handle to the same entries: a task holds one to forget a key when it gives
/// units back after its caller is gone (a dropped [`crate::Limiter::acquire`]).
#[derive(Debug, Clone)]
pub(crate) struct DenyCache {
    shards: Arc<[Mutex<HashMap<Key, Denial, BuildKeyHasher>>]>,
    per_shard: usize,
    /// The local clock for store-time decisions (µs since this instant).
    epoch: Instant,
}

/// One remembered refusal.
#[derive(Debug, Clone, Copy)]
struct Denial {
    /// The smallest cost known refused until `until`.
    cost: u64,
    /// µs (in the cache's time base) until which `cost` and more are refused.
    until: u64,
}

/// A cached refusal, as the limiter reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Until this cost passes.
    pub(crate) retry_after: Duration,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            epoch: Instant::now(),
        }
    }

    /// The cache's time for a decision: the caller's clock when it has one, else a local
    /// monotonic clock (the store's clock is not readable here, and only durations matter).
    pub(crate) fn time(&self, caller: Option<u64>) -> u64 {
        caller
            .unwrap_or_else(|| u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    /// Whether `cost` for `key` is known refused at `now`, and for how long exactly.
    pub(crate) fn get(&self, key: &Key, cost: u64, now: u64) -> Option<Hit> {
        let mut shard = self.shard(key);
        let denial = *shard.get(key)?;
        if denial.until <= now {
            shard.remove(key);
            return None;
        }
        (cost == denial.cost).then(|| Hit {
            retry_after: Duration::from_micros(denial.until - now),
        })
    }

    /// Remembers that `cost` for `key` was refused, asked at `asked_at`, for `retry_after`.
    pub(crate) fn insert(&self, key: &Key, cost: u64, asked_at: u64, retry_after: Duration) {
        let retry_us = u64::try_from(retry_after.as_micros()).unwrap_or(u64::MAX);
        let until = asked_at.saturating_add(retry_us);
        let mut shard = self.shard(key);
        if let Some(known) = shard.get_mut(key) {
            // The newer refusal is the better knowledge of this key.
            *known = Denial { cost, until };
            return;
        }
        if shard.len() >= self.per_shard
            && let Some(soonest) = shard
                .iter()
                .take(EVICTION_SAMPLE)
                .min_by_key(|(_, d)| d.until)
                .map(|(k, _)| k.clone())
        {
            // A sample, not the whole shard: a flood of new refused keys must not make each
            // insert scan thousands of entries under the lock. Expired entries sort first.
            shard.remove(&soonest);
        }
        shard.insert(key.clone(), Denial { cost, until });
    }

    /// Forgets `key` (a reset, units given back through this instance).
    pub(crate) fn forget(&self, key: &Key) {
        self.shard(key).remove(key);
    }

    /// Forgets the key whose text is `key` (a reset heard from another instance).
    pub(crate) fn forget_text(&self, key: &str) -> bool {
        self.shards.iter().any(|shard| {
            let mut shard = lock(shard);
            let found = shard.keys().find(|k| k.as_str() == key).cloned();
            found.is_some_and(|k| shard.remove(&k).is_some())
        })
    }

    /// Entries held (expired ones included until they are met).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    fn shard(&self, key: &Key) -> MutexGuard<'_, HashMap<Key, Denial, BuildKeyHasher>> {
        lock(&self.shards[(key.prehash() >> 56) as usize % SHARDS])
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Limit, Namespace, Quota};

    fn key(user: &str) -> Key {
        let limit =
            Limit::new("c", Algorithm::Gcra, Quota::per_second(1).expect("valid")).expect("valid");
        Key::new(&Namespace::default(), &limit, &[("user", user)])
    }

    /// A refusal is answered for its own cost, until its end and not a µs longer.
    #[test]
    fn holds_for_larger_costs_until_its_end() {
        let cache = DenyCache::new(100);
        let k = key("a");
        cache.insert(&k, 2, 1_000, Duration::from_micros(500));
        assert_eq!(cache.get(&k, 1, 1_000), None, "a smaller cost may pass");
        assert_eq!(
            cache.get(&k, 3, 1_000),
            None,
            "a larger cost waits longer: the store says"
        );
        assert_eq!(
            cache.get(&k, 2, 1_000),
            Some(Hit {
                retry_after: Duration::from_micros(500)
            })
        );
        assert_eq!(
            cache.get(&k, 2, 1_499),
            Some(Hit {
                retry_after: Duration::from_micros(1)
            })
        );
        assert_eq!(cache.get(&k, 2, 1_500), None, "over at t + r exactly");
        assert_eq!(cache.len(), 0, "an expired entry is dropped when met");
    }

    /// A full cache drops expired entries first, then the one that expires soonest; memory
    /// stays within the capacity.
    #[test]
    fn bounded_by_capacity() {
        let cache = DenyCache::new(SHARDS); // one entry per shard
        let keys: Vec<Key> = (0..200).map(|i| key(&i.to_string())).collect();
        for (i, k) in keys.iter().enumerate() {
            cache.insert(k, 1, 0, Duration::from_micros(1_000 + i as u64));
        }
        assert!(cache.len() <= SHARDS, "{}", cache.len());
        // The survivors are, per shard, the latest to expire.
        let last = keys.last().expect("keys");
        assert!(cache.get(last, 1, 0).is_some());
    }

    /// Resets forget, by key or by its text.
    #[test]
    fn forgets() {
        let cache = DenyCache::new(100);
        let (a, b) = (key("a"), key("b"));
        cache.insert(&a, 1, 0, Duration::from_secs(1));
        cache.insert(&b, 1, 0, Duration::from_secs(1));
        cache.forget(&a);
        assert!(cache.get(&a, 1, 0).is_none());
        assert!(cache.forget_text(b.as_str()));
        assert!(cache.get(&b, 1, 0).is_none());
        assert!(!cache.forget_text("nope"));
    }
}
