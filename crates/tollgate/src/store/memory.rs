//! The embedded store: state in this process's memory.
//!
//! It serves single-instance deployments, tests, the service when no Redis is configured, and
//! the `local` failure policy. It runs the Rust [`crate::rules`] directly.
//!
//! Design choices, and why:
//! - **Sharded `Mutex<HashMap>`**, not `dashmap`: an all-or-nothing check over several keys
//!   must hold every key's lock at once, and shards locked in ascending index order mean two
//!   multi-key checks can never deadlock. On single-key checks it also measured as fast as a
//!   `dashmap` map running the same rule, or faster (`docs/benchmarks.md`), each shard's lock
//!   on cache lines of its own.
//! - **A single-pair path** (`MemoryStore::decide_single_at`): one lock, one lookup, one
//!   dispatch on the algorithm, the key cloned only on insert, the decision returned by value.
//!   Most checks are one (limit, key) pair, and for them building a general [`Request`] cost
//!   more than deciding.
//! - **Keys hash once**: [`Key`] carries a hash computed when it is built, used both to pick the
//!   shard and inside the map.
//! - **Bounded memory**: a state that has fully replenished equals no state, so it is swept by
//!   a background thread every `sweep_interval`, shard by shard.
//! - **A full store evicts, in O(log n), never by a sweep.** Each shard keeps its keys in a
//!   min-heap by `replenished_at`. The heap is updated lazily: charging a known key touches only
//!   its slot, and a heap entry found out of date when it reaches the top is moved down to the
//!   slot's current time. At the key cap a new key takes the place of its shard's key that
//!   replenishes soonest: a key already replenished (nothing lost), else the one closest to
//!   it, which over-admits the least (that key starts again from a full quota, early). The
//!   alternative, refusing new keys, turns a flood of new keys into an outage for every new
//!   legitimate user; eviction keeps known keys exact unless the flood outlasts their quota.
//!   A key is refused ([`StoreError::Full`]) only when its shard holds no key to evict, which
//!   takes a cap far below the 64 shards. Each new key meeting a full store is counted,
//!   `tollgate_store_full_total{limit, result}` (`result`: `replenished`, `evicted`,
//!   `refused`), and logged once a second at most.
//! - The sweeper asks the store's [`Clock`]; give the store the same clock as the limiter.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use smallvec::SmallVec;

use crate::key::BuildKeyHasher;
use crate::log_throttle::LogThrottle;
use crate::rules::AnyState;
use crate::{
    Clock, Decision, Decisions, Key, Limit, Op, Request, SingleRequest, Status, Store, StoreError,
    SystemClock, Timestamp,
};

/// Default key cap.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
/// Default interval between background sweeps.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(10);
const SHARDS: usize = 64;

/// In-process rate-limit state. Cheap to clone: clones share the state.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Box<[Padded<Mutex<Shard>>]>,
    len: AtomicUsize,
    max_keys: usize,
    clock: Arc<dyn Clock>,
    /// Full-store warnings: one a second at most.
    full_warnings: LogThrottle,
}

/// One shard: the keys' states, and the same keys ordered by when they replenish.
#[derive(Default)]
struct Shard {
    map: HashMap<Key, Slot, BuildKeyHasher>,
    /// Every held key at least once, at the `replenished_at` its slot had when it was pushed
    /// or last moved (never later than the slot's: charging only moves it later). Reset keys
    /// and duplicates stay until they reach the top, or until [`Shard::insert`] rebuilds it.
    by_replenish: BinaryHeap<Due>,
}

/// A heap entry: 32 bytes, the key shared with the map (an `Arc` clone).
struct Due {
    at: u64,
    key: Key,
}

/// Reversed: [`BinaryHeap`] is a max-heap, the soonest must be on top.
impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.at.cmp(&self.at)
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

/// What a new key at the cap did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AtCap {
    /// Took the place of a replenished key: nothing lost.
    Replenished,
    /// Took the place of a charged key, which starts again from a full quota.
    Evicted,
    /// No key of its shard could make room: [`StoreError::Full`].
    Refused,
}

impl AtCap {
    fn as_str(self) -> &'static str {
        match self {
            AtCap::Replenished => "replenished",
            AtCap::Evicted => "evicted",
            AtCap::Refused => "refused",
        }
    }
}

impl Shard {
    /// Holds `key` (not held yet) with `slot`.
    fn insert(&mut self, key: &Key, slot: Slot) {
        // Out-of-date entries only grow by reset keys coming back: rebuild now and then, so the
        // heap stays within twice the map, amortized O(1) per insert.
        if self.by_replenish.len() >= 2 * self.map.len() + 64 {
            self.by_replenish = self
                .map
                .iter()
                .map(|(key, slot)| Due {
                    at: slot.replenished_at,
                    key: key.clone(),
                })
                .collect();
        }
        self.by_replenish.push(Due {
            at: slot.replenished_at,
            key: key.clone(),
        });
        self.map.insert(key.clone(), slot);
    }

    /// The soonest `replenished_at` of a held key, after bringing the heap's top up to date:
    /// entries of keys no longer held are dropped, entries of keys charged since move down.
    fn soonest(&mut self) -> Option<u64> {
        loop {
            let mut top = self.by_replenish.peek_mut()?;
            #[cfg(test)]
            tests::visited(1);
            match self.map.get(&top.key) {
                Some(slot) if slot.replenished_at == top.at => return Some(top.at),
                // Charged since it was pushed: moved down when the guard drops.
                Some(slot) if slot.replenished_at > top.at => top.at = slot.replenished_at,
                // Gone, or a duplicate of an entry with the slot's time.
                _ => drop(std::collections::binary_heap::PeekMut::pop(top)),
            }
        }
    }

    /// Removes the held key that replenishes soonest, other than those `keep` names (the
    /// other keys of the check being decided); `None` when there is none.
    fn evict_soonest(&mut self, now: u64, keep: impl Fn(&Key) -> bool) -> Option<AtCap> {
        let mut kept: SmallVec<[Due; 2]> = SmallVec::new();
        let evicted = loop {
            let Some(at) = self.soonest() else { break None };
            let Some(due) = self.by_replenish.pop() else {
                break None;
            };
            if keep(&due.key) {
                kept.push(due);
                continue;
            }
            self.map.remove(&due.key);
            break Some(if at <= now {
                AtCap::Replenished
            } else {
                AtCap::Evicted
            });
        };
        self.by_replenish.extend(kept);
        evicted
    }

    /// Drops every key replenished at `now`; returns how many. Visits only those keys (and
    /// out-of-date heap entries), not the whole shard.
    fn sweep(&mut self, now: u64) -> usize {
        let mut removed = 0;
        while self.soonest().is_some_and(|at| at <= now) {
            if let Some(due) = self.by_replenish.pop() {
                self.map.remove(&due.key);
                removed += 1;
            }
        }
        removed
    }
}

/// One shard's lock on cache lines of its own: two threads working on keys of neighbouring
/// shards would otherwise pass the same cache line back and forth on every lock (128 bytes:
/// the unit adjacent-line prefetchers move).
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

struct Slot {
    state: AnyState,
    /// From this instant (µs) the state equals a fresh one and may be dropped.
    replenished_at: u64,
}

/// Configures a [`MemoryStore`].
#[derive(Debug)]
pub struct MemoryStoreBuilder {
    max_keys: usize,
    sweep_interval: Option<Duration>,
    clock: Arc<dyn Clock>,
}

impl MemoryStoreBuilder {
    /// The most keys held at once (default [`DEFAULT_MAX_KEYS`]).
    ///
    /// At the cap, a new key takes the place of the key of its shard (one of 64, by hash) that
    /// replenishes soonest: a replenished key if there is one (nothing lost), else the one
    /// closest to replenishing, which then starts again from a full quota early (the least
    /// over-admission possible). This costs O(log n) and never sweeps the store. A new key is
    /// refused with [`StoreError::Full`] only when its shard holds no key to give up (a cap
    /// far below 64). Counted as `tollgate_store_full_total{limit, result}`.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How often a background thread drops replenished keys (default
    /// [`DEFAULT_SWEEP_INTERVAL`]); `None` for no thread (replenished keys then go only when a
    /// new key at the cap takes the place of one of its shard, or by calling
    /// [`MemoryStore::sweep`]).
    ///
    /// The thread locks one shard at a time, and visits only the keys it drops.
    pub fn sweep_interval(mut self, interval: Option<Duration>) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// The clock for `now: None` calls and for the sweeper (default [`SystemClock`]).
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
        if let Some(interval) = self.sweep_interval {
            spawn_sweeper(Arc::downgrade(&inner), interval);
        }
        MemoryStore { inner }
    }
}

fn spawn_sweeper(inner: Weak<Inner>, interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-sweeper".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                let Some(inner) = inner.upgrade() else { return };
                inner.sweep_all(inner.clock.now().as_micros());
            }
        });
    // Without a thread the store still works: a new key at the cap evicts.
    drop(spawned);
}

impl MemoryStore {
    /// A store with default settings.
    pub fn new() -> MemoryStore {
        MemoryStore::builder().build()
    }

    /// A builder for a store with custom settings.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            max_keys: DEFAULT_MAX_KEYS,
            sweep_interval: Some(DEFAULT_SWEEP_INTERVAL),
            clock: Arc::new(SystemClock),
        }
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.inner.len.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys held per limit name, estimated from `sample` of the store's 64 shards (keys are
    /// spread over shards by hash, so a few shards are a fair sample) and scaled up; exact when
    /// `sample` is 64. Cheap enough for every metrics scrape with a small sample: it locks
    /// one shard at a time.
    pub fn keys_per_limit(&self, sample: usize) -> Vec<(String, u64)> {
        let sample = sample.clamp(1, SHARDS);
        let mut counts: HashMap<String, u64> = HashMap::new();
        for shard in self.inner.shards.iter().take(sample) {
            for key in lock(shard).map.keys() {
                let name = key.limit_name();
                match counts.get_mut(name) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert(name.to_owned(), 1);
                    }
                }
            }
        }
        let mut out: Vec<(String, u64)> = counts
            .into_iter()
            .map(|(name, n)| (name, n * SHARDS as u64 / sample as u64))
            .collect();
        out.sort_unstable();
        out
    }

    /// Drops every key that has fully replenished by the store clock's now; returns how many.
    pub fn sweep(&self) -> usize {
        self.inner.sweep_all(self.inner.clock.now().as_micros())
    }

    /// [`Store::decide`] without the future, at `now`.
    ///
    /// # Errors
    /// [`StoreError::Full`] when a check needs new keys beyond the key cap and their shards
    /// hold no key to evict (a peek never stores a key, so it never fails).
    #[inline]
    pub fn decide_at(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Timestamp,
    ) -> Result<Decisions, StoreError> {
        self.inner.decide(request, now.as_micros(), op)
    }

    /// [`MemoryStore::decide_at`] for a single (limit, key) pair: no [`Request`] to build,
    /// one decision returned by value. The path of the benchmark against governor; services
    /// go through the [`crate::Limiter`].
    ///
    /// ```
    /// use tollgate::{Algorithm, Key, Limit, MemoryStore, Namespace, Op, Quota, SingleRequest, Timestamp};
    ///
    /// let limit = Limit::new("api", Algorithm::Gcra, Quota::per_second(2)?)?.keyed_by(["user"])?;
    /// let key = Key::new(&Namespace::default(), &limit, &[("user", "42")]); // build once, reuse
    /// let store = MemoryStore::new();
    /// let now = Timestamp::from_millis(1_000);
    /// let request = SingleRequest::new(&limit, &key, 1)?;
    /// assert!(store.decide_single_at(&request, Op::Check, now)?.allowed);
    /// assert!(store.decide_single_at(&request, Op::Check, now)?.allowed);
    /// let third = store.decide_single_at(&request, Op::Check, now)?;
    /// assert!(!third.allowed);
    /// assert_eq!(third.retry_after, Some(std::time::Duration::from_millis(500)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Full`] when a check's key is new, the store is at its key cap and the
    /// key's shard holds no key to evict.
    #[doc(hidden)]
    #[inline]
    pub fn decide_single_at(
        &self,
        request: &SingleRequest<'_>,
        op: Op,
        now: Timestamp,
    ) -> Result<Decision, StoreError> {
        let (limit, key, cost) = (request.limit(), request.key(), request.cost());
        let now = now.as_micros();
        self.inner
            .try_decide_one(limit, key, cost, now, op)
            .map_err(|NoRoom| self.inner.full())
    }

    /// [`Store::reset`] without the future.
    pub fn reset_now(&self, request: &Request<'_>) {
        for e in request.entries() {
            let mut shard = lock(&self.inner.shards[shard_of(&e.key)]);
            if shard.map.remove(&e.key).is_some() {
                self.inner.len.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn now(&self, now: Option<Timestamp>) -> Timestamp {
        now.unwrap_or_else(|| self.inner.clock.now())
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("len", &self.len())
            .field("max_keys", &self.inner.max_keys)
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        self.decide_at(request, op, self.now(now))
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.reset_now(request);
        Ok(())
    }
}

impl Inner {
    /// Decides: one lock for a single pair, every entry's shard lock otherwise.
    #[inline]
    fn decide(&self, request: &Request<'_>, now: u64, op: Op) -> Result<Decisions, StoreError> {
        match request.entries() {
            [e] => self
                .try_decide_one(e.limit, &e.key, request.cost(), now, op)
                .map(Decisions::from),
            _ => self.try_decide(request, now, op),
        }
        .map_err(|NoRoom| self.full())
    }

    fn full(&self) -> StoreError {
        StoreError::Full {
            max_keys: self.max_keys,
        }
    }

    /// Makes room for one new key of `limit` in `shard`: under the cap, a reservation; at the
    /// cap, the eviction of the shard's soonest replenished key other than `keep`'s (counted,
    /// logged once a second). [`NoRoom`] when the shard has none to give.
    fn make_room(
        &self,
        shard: &mut Shard,
        limit: &Limit,
        now: u64,
        keep: impl Fn(&Key) -> bool,
    ) -> Result<(), NoRoom> {
        if self.reserve(1) {
            return Ok(());
        }
        self.at_cap(shard, limit, now, keep)
    }

    #[cold]
    #[inline(never)]
    fn at_cap(
        &self,
        shard: &mut Shard,
        limit: &Limit,
        now: u64,
        keep: impl Fn(&Key) -> bool,
    ) -> Result<(), NoRoom> {
        let result = shard.evict_soonest(now, keep).unwrap_or(AtCap::Refused);
        metrics::counter!(
            "tollgate_store_full_total",
            "limit" => Arc::clone(limit.name_arc()),
            "result" => result.as_str()
        )
        .increment(1);
        if let Some(also) = self.full_warnings.admit() {
            tracing::warn!(
                limit = limit.name(),
                result = result.as_str(),
                max_keys = self.max_keys,
                new_keys_at_cap_since_last_warning = also,
                "memory store at its key cap: new keys take the place of the keys that \
                 replenish soonest"
            );
        }
        match result {
            AtCap::Refused => Err(NoRoom),
            AtCap::Replenished | AtCap::Evicted => Ok(()),
        }
    }

    /// [`Inner::try_decide`] for a single pair (most checks): one lock, one lookup, one
    /// dispatch on the algorithm, and the key cloned only when it is inserted.
    #[inline(always)]
    fn try_decide_one(
        &self,
        limit: &Limit,
        key: &Key,
        cost: u64,
        now: u64,
        op: Op,
    ) -> Result<Decision, NoRoom> {
        let rule = limit.rule();
        let mut shard = lock(&self.shards[shard_of(key)]);
        let (status, retry) = match shard.map.get_mut(key) {
            Some(slot) => {
                let (status, retry) = rule.decide(&mut slot.state, now, cost, op);
                if op.charges() && retry.is_none() {
                    slot.replenished_at = now + status.reset_after_us;
                }
                (status, retry)
            }
            None => self.decide_new(&mut shard, limit, key, cost, now, op)?,
        };
        drop(shard);
        Ok(crate::rules::decision(rule.limit(), status, retry))
    }

    /// [`Inner::try_decide_one`] for a key the shard does not hold: decides on a fresh state,
    /// which is kept only when charged ([`NoRoom`] when the key cap leaves no room for it).
    #[cold]
    fn decide_new(
        &self,
        shard: &mut Shard,
        limit: &Limit,
        key: &Key,
        cost: u64,
        now: u64,
        op: Op,
    ) -> Result<(Status, Option<u64>), NoRoom> {
        let rule = limit.rule();
        let mut state = rule.empty_state();
        let (status, retry) = rule.decide(&mut state, now, cost, op);
        if !op.charges() || retry.is_some() {
            return Ok((status, retry));
        }
        // Charged a fresh state: kept only if there is room (else dropped, unseen).
        self.make_room(shard, limit, now, |_| false)?;
        let replenished_at = now + status.reset_after_us;
        shard.insert(
            key,
            Slot {
                state,
                replenished_at,
            },
        );
        Ok((status, retry))
    }

    /// Evaluates every entry under all their shard locks; for a check, charges all when all
    /// admit. [`NoRoom`] when charging needs more keys than the cap leaves.
    fn try_decide(&self, request: &Request<'_>, now: u64, op: Op) -> Result<Decisions, NoRoom> {
        let charge = op.charges();
        let entries = request.entries();
        let cost = request.cost();
        let shard_ids: SmallVec<[usize; 2]> = entries.iter().map(|e| shard_of(&e.key)).collect();
        let mut order = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        // Ascending lock order: no deadlock between multi-key checks.
        let mut guards: SmallVec<[(usize, MutexGuard<'_, Shard>); 2]> =
            order.iter().map(|&i| (i, lock(&self.shards[i]))).collect();
        let guard_of = |guards: &mut SmallVec<[(usize, MutexGuard<'_, Shard>); 2]>, id: usize| {
            guards
                .iter()
                .position(|(i, _)| *i == id)
                .unwrap_or_else(|| unreachable!("every entry's shard is locked"))
        };

        let mut retries: SmallVec<[Option<u64>; 2]> = SmallVec::new();
        for (e, &id) in entries.iter().zip(&shard_ids) {
            let g = guard_of(&mut guards, id);
            let rule = e.limit.rule();
            let retry = match guards[g].1.map.get_mut(&e.key) {
                Some(slot) => rule.admits(&mut slot.state, now, cost).err(),
                None => rule.admits(&mut rule.empty_state(), now, cost).err(),
            };
            retries.push(retry);
        }
        let all_admit = retries.iter().all(Option::is_none);

        if all_admit && charge {
            // Room for each new key, in its own shard; the check's own keys are never evicted.
            let in_check = |k: &Key| entries.iter().any(|e| e.key == *k);
            let mut made = 0;
            for (e, &id) in entries.iter().zip(&shard_ids) {
                let g = guard_of(&mut guards, id);
                let shard = &mut guards[g].1;
                if shard.map.contains_key(&e.key) {
                    continue;
                }
                if self.make_room(shard, e.limit, now, in_check).is_err() {
                    // Evicted keys stay evicted; their room goes back to the cap.
                    self.len.fetch_sub(made, Ordering::Relaxed);
                    return Err(NoRoom);
                }
                made += 1;
            }
        }

        let mut decisions = Decisions::new();
        for ((e, &id), retry) in entries.iter().zip(&shard_ids).zip(retries) {
            let g = guard_of(&mut guards, id);
            let rule = e.limit.rule();
            let shard = &mut guards[g].1;
            let decision = if all_admit && charge {
                if !shard.map.contains_key(&e.key) {
                    let state = rule.empty_state();
                    // Pushed on the heap at 0: moved to the charged time when it reaches the top.
                    shard.insert(
                        &e.key,
                        Slot {
                            state,
                            replenished_at: 0,
                        },
                    );
                }
                let Some(slot) = shard.map.get_mut(&e.key) else {
                    unreachable!("inserted above")
                };
                rule.charge(&mut slot.state, now, cost);
                let status = rule.status(&mut slot.state, now);
                slot.replenished_at = now + status.reset_after_us;
                crate::rules::decision(rule.limit(), status, None)
            } else {
                match shard.map.get_mut(&e.key) {
                    Some(slot) => rule.decision(&mut slot.state, now, retry),
                    None => rule.decision(&mut rule.empty_state(), now, retry),
                }
            };
            decisions.push(decision);
        }
        Ok(decisions)
    }

    /// Reserves room for `n` new keys under the cap.
    fn reserve(&self, n: usize) -> bool {
        let before = self.len.fetch_add(n, Ordering::Relaxed);
        if before + n <= self.max_keys {
            return true;
        }
        self.len.fetch_sub(n, Ordering::Relaxed);
        false
    }

    /// Drops every key fully replenished at `now`, one shard at a time; returns how many.
    fn sweep_all(&self, now: u64) -> usize {
        self.shards
            .iter()
            .map(|shard| self.sweep_shard(&mut lock(shard), now))
            .sum()
    }

    fn sweep_shard(&self, shard: &mut Shard, now: u64) -> usize {
        let removed = shard.sweep(now);
        self.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }
}

/// The key cap leaves no room for the keys a check would store.
#[derive(Debug)]
struct NoRoom;

#[inline]
fn shard_of(key: &Key) -> usize {
    // Bits the map itself uses least (hashbrown takes the low bits and the top seven).
    (key.prehash() >> 48) as usize % SHARDS
}

/// A poisoned shard still holds consistent data (no user code runs under the lock), so go on.
#[inline]
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Entry, FakeClock, Limit, Namespace, Op, Quota};

    fn limit(name: &str, algorithm: Algorithm) -> Limit {
        Limit::new(name, algorithm, Quota::per_minute(10).expect("valid")).expect("valid")
    }

    fn request<'a>(limit: &'a Limit, user: &str) -> Request<'a> {
        let key = Key::new(&Namespace::default(), limit, &[("user", user)]);
        Request::new([Entry::new(limit, key)], 1).expect("valid")
    }

    /// Replenished keys are swept, live ones stay.
    #[test]
    fn sweep_drops_only_replenished_state() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build();
        let gcra = limit("g", Algorithm::Gcra);
        let now = clock.now();
        store
            .decide_at(&request(&gcra, "a"), Op::Check, now)
            .expect("room");
        clock.advance(Duration::from_secs(3));
        store
            .decide_at(&request(&gcra, "b"), Op::Check, clock.now())
            .expect("room");
        assert_eq!(store.len(), 2);
        // "a" took one unit (6 s to replenish) at t0; at t0 + 6 s it is full again, "b" is not.
        clock.advance(Duration::from_secs(3));
        assert_eq!(store.sweep(), 1);
        assert_eq!(store.len(), 1);
        let d = store
            .decide_at(&request(&gcra, "b"), Op::Peek, clock.now())
            .expect("a peek stores nothing");
        assert_eq!(d[0].remaining, 9, "b is still charged after the sweep");
    }

    /// A new key at the cap is refused with a clear error only when its shard holds no key to
    /// give up; known keys still work, and a sweep makes room.
    #[test]
    fn key_cap_refuses_new_keys_only_when_their_shard_is_empty() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = capped(&clock, 1);
        let l = limit("f", Algorithm::FixedWindow);
        check(&store, &l, "a", clock.now());
        let other = user_in_other_shard(&l, "a");
        let err = store
            .decide_at(&request(&l, &other), Op::Check, clock.now())
            .expect_err("full");
        assert!(matches!(err, StoreError::Full { max_keys: 1 }), "{err}");
        assert!(err.to_string().contains("1 keys"), "{err}");
        assert!(check(&store, &l, "a", clock.now()).allowed, "known key");
        clock.advance(Duration::from_secs(60));
        assert_eq!(store.sweep(), 1);
        assert!(check(&store, &l, &other, clock.now()).allowed, "swept");
        assert_eq!(store.len(), 1);
    }

    /// A check of several keys at the cap evicts for its new keys but never its own keys, and
    /// stays all or nothing when there is no room.
    #[test]
    fn a_multi_key_check_at_the_cap_keeps_its_own_keys() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let (l1, l2) = (limit("one", Algorithm::Gcra), limit("two", Algorithm::Gcra));
        let a = "a";
        let shard_a = shard_of(&Key::new(&Namespace::default(), &l1, &[("user", a)]));
        let c = user_in_shard(&l2, shard_a);
        let both = |store: &MemoryStore| {
            let entries = [
                Entry::new(&l1, Key::new(&Namespace::default(), &l1, &[("user", a)])),
                Entry::new(&l2, Key::new(&Namespace::default(), &l2, &[("user", &c)])),
            ];
            store.decide_at(
                &Request::new(entries, 1).expect("valid"),
                Op::Check,
                clock.now(),
            )
        };
        // Room for `a` only; `c`'s shard holds nothing but `a`, which the check keeps.
        let store = capped(&clock, 1);
        check(&store, &l1, a, clock.now());
        assert!(matches!(
            both(&store),
            Err(StoreError::Full { max_keys: 1 })
        ));
        assert_eq!(
            peek(&store, &l1, a, clock.now()).remaining,
            9,
            "nothing charged"
        );
        assert_eq!(store.len(), 1);
        // With another key in that shard, it goes and both are charged.
        let store = capped(&clock, 2);
        let e = user_in_shard(&l1, shard_a);
        check(&store, &l1, a, clock.now());
        check(&store, &l1, &e, clock.now());
        let d = both(&store).expect("evicts the other key");
        assert_eq!((d[0].remaining, d[1].remaining), (8, 9));
        assert_eq!(peek(&store, &l1, &e, clock.now()).remaining, 10, "evicted");
        assert_eq!(store.len(), 2);
    }

    /// Keys reset and charged again leave out-of-date heap entries behind; the heap is rebuilt
    /// before they outgrow twice the map.
    #[test]
    fn reset_keys_do_not_grow_the_heap() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = capped(&clock, 100);
        let l = limit("r", Algorithm::Gcra);
        for _ in 0..1_000 {
            check(&store, &l, "a", clock.now());
            store.reset_now(&request(&l, "a"));
        }
        check(&store, &l, "a", clock.now());
        let key = Key::new(&Namespace::default(), &l, &[("user", "a")]);
        let heap = lock(&store.inner.shards[shard_of(&key)]).by_replenish.len();
        assert!(heap <= 2 + 64, "{heap} heap entries for one key");
        assert_eq!(store.sweep(), 0, "the charged key stays");
        assert_eq!(peek(&store, &l, "a", clock.now()).remaining, 9);
    }

    /// Per-limit key counts are exact with every shard sampled.
    #[test]
    fn keys_per_limit_counts_by_limit() {
        let store = MemoryStore::builder().sweep_interval(None).build();
        let a = limit("a", Algorithm::Gcra);
        let b = limit("b.x", Algorithm::FixedWindow);
        let now = Timestamp::from_millis(1_000_000);
        for i in 0..30 {
            store
                .decide_at(&request(&a, &i.to_string()), Op::Check, now)
                .expect("room");
        }
        store
            .decide_at(&request(&b, "k"), Op::Check, now)
            .expect("room");
        assert_eq!(
            store.keys_per_limit(64),
            vec![("a".to_owned(), 30), ("b.x".to_owned(), 1)]
        );
        let estimate: u64 = store.keys_per_limit(8).iter().map(|(_, n)| n).sum();
        assert!(estimate <= 31 * 8, "scaled by 64/8 at most: {estimate}");
    }

    /// The single-pair path decides, charges and refuses exactly as the general one, for every
    /// algorithm; its peek consumes nothing; its key cap answers `Full`.
    #[test]
    fn single_pair_path_equals_the_general_one() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        for algorithm in Algorithm::ALL {
            let general = MemoryStore::builder().sweep_interval(None).build();
            let single = MemoryStore::builder().sweep_interval(None).build();
            let l = Limit::new(
                "s",
                algorithm,
                Quota::per_second(5)
                    .and_then(|q| q.with_burst(7))
                    .expect("valid"),
            )
            .expect("valid");
            for step in 0..60_u64 {
                clock.advance(Duration::from_millis(step * 37 % 450));
                let user = ["a", "b"][(step % 2) as usize];
                let cost = 1 + step % 3;
                let key = Key::new(&Namespace::default(), &l, &[("user", user)]);
                let request = Request::new([Entry::new(&l, key.clone())], cost).expect("valid");
                let one = SingleRequest::new(&l, &key, cost).expect("valid");
                let now = clock.now();
                if step % 5 == 0 {
                    let peeked = single
                        .decide_single_at(&one, Op::Peek, now)
                        .expect("a peek stores nothing");
                    assert_eq!(
                        peeked,
                        general
                            .decide_at(&request, Op::Peek, now)
                            .expect("a peek stores nothing")[0],
                        "{algorithm}"
                    );
                    assert_eq!(
                        peeked,
                        single
                            .decide_single_at(&one, Op::Peek, now)
                            .expect("a peek stores nothing"),
                        "{algorithm}: peek charged"
                    );
                }
                let expected = general.decide_at(&request, Op::Check, now).expect("room")[0];
                let got = single.decide_single_at(&one, Op::Check, now).expect("room");
                assert_eq!(got, expected, "{algorithm} step {step}");
            }
            assert_eq!(single.len(), general.len(), "{algorithm}");
        }
        let capped = MemoryStore::builder()
            .sweep_interval(None)
            .max_keys(1)
            .build();
        let l = limit("c", Algorithm::Gcra);
        let (a, b) = (
            Key::new(&Namespace::default(), &l, &[("user", "a")]),
            Key::new(&Namespace::default(), &l, &[("user", "b")]),
        );
        let now = clock.now();
        let check = |k| {
            capped.decide_single_at(
                &SingleRequest::new(&l, k, 1).expect("valid"),
                Op::Check,
                now,
            )
        };
        assert!(check(&a).expect("room").allowed);
        assert!(matches!(check(&b), Err(StoreError::Full { max_keys: 1 })));
    }

    /// A single-pair request is validated like a general one.
    #[test]
    fn single_request_validates_the_cost() {
        let l = limit("v", Algorithm::TokenBucket);
        let key = Key::new(&Namespace::default(), &l, &[("user", "a")]);
        assert!(matches!(
            SingleRequest::new(&l, &key, 0),
            Err(crate::CheckError::ZeroCost)
        ));
        let err = SingleRequest::new(&l, &key, 11).expect_err("above capacity");
        assert!(
            matches!(
                err,
                crate::CheckError::CostExceedsCapacity {
                    cost: 11,
                    capacity: 10,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(SingleRequest::new(&l, &key, 10).expect("valid").cost(), 10);
    }

    /// Many threads on one key admit exactly the limit, half of them through the general
    /// path and half through the single-pair one, for every algorithm.
    #[test]
    fn exact_under_thread_concurrency() {
        for algorithm in Algorithm::ALL {
            let store = MemoryStore::builder().sweep_interval(None).build();
            let l =
                Limit::new("c", algorithm, Quota::per_hour(1_000).expect("valid")).expect("valid");
            let key = Key::new(&Namespace::default(), &l, &[("user", "k")]);
            let now = Timestamp::from_millis(5_000_000);
            let admitted = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for t in 0..8 {
                    let (store, l, key, admitted) = (&store, &l, &key, &admitted);
                    s.spawn(move || {
                        let single = SingleRequest::new(l, key, 1).expect("valid");
                        for _ in 0..500 {
                            let allowed = if t % 2 == 0 {
                                store
                                    .decide_single_at(&single, Op::Check, now)
                                    .expect("room")
                                    .allowed
                            } else {
                                store
                                    .decide_at(&request(l, "k"), Op::Check, now)
                                    .expect("room")[0]
                                    .allowed
                            };
                            if allowed {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            assert_eq!(admitted.into_inner(), 1_000, "{algorithm}");
        }
    }
    thread_local! {
        /// Stored entries the store looked at on this thread outside a plain lookup.
        static VISITED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    pub(super) fn visited(n: usize) {
        VISITED.with(|v| v.set(v.get() + n));
    }

    fn take_visited() -> usize {
        VISITED.with(|v| v.replace(0))
    }

    fn capped(clock: &FakeClock, max_keys: usize) -> MemoryStore {
        MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_keys(max_keys)
            .build()
    }

    fn check(store: &MemoryStore, l: &Limit, user: &str, now: Timestamp) -> Decision {
        store
            .decide_at(&request(l, user), Op::Check, now)
            .expect("room")[0]
    }

    fn peek(store: &MemoryStore, l: &Limit, user: &str, now: Timestamp) -> Decision {
        store
            .decide_at(&request(l, user), Op::Peek, now)
            .expect("a peek stores nothing")[0]
    }

    /// Users whose keys for `l` fall in the shard of `first`'s key, `first` included.
    fn same_shard(l: &Limit, first: &str, n: usize) -> Vec<String> {
        let shard = |u: &str| shard_of(&Key::new(&Namespace::default(), l, &[("user", u)]));
        let target = shard(first);
        (0..)
            .map(|i| format!("{first}{i}"))
            .filter(|u| shard(u) == target)
            .take(n)
            .collect()
    }

    /// A user whose key for `l` falls in `shard` (none of "a").
    fn user_in_shard(l: &Limit, shard: usize) -> String {
        (0..)
            .map(|i| format!("x{i}"))
            .find(|u| shard_of(&Key::new(&Namespace::default(), l, &[("user", u)])) == shard)
            .unwrap_or_else(|| unreachable!("an endless search"))
    }

    /// A user whose key for `l` falls in another shard than `user`'s.
    fn user_in_other_shard(l: &Limit, user: &str) -> String {
        let shard = shard_of(&Key::new(&Namespace::default(), l, &[("user", user)]));
        user_in_shard(l, (shard + 1) % SHARDS)
    }

    /// At the key cap a new key costs a bounded number of visited entries, whatever the
    /// number of keys held: no sweep of the whole store on the request path.
    #[test]
    fn a_new_key_at_the_cap_visits_a_bounded_number_of_entries() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = capped(&clock, 2_000);
        let l = limit("g", Algorithm::Gcra);
        for i in 0..2_000 {
            check(&store, &l, &format!("old{i}"), clock.now());
        }
        assert_eq!(store.len(), 2_000);
        take_visited();
        let answers: Vec<_> = (0..200)
            .map(|i| store.decide_at(&request(&l, &format!("new{i}")), Op::Check, clock.now()))
            .collect();
        let visited = take_visited();
        assert!(
            visited <= 200 * 4,
            "{visited} entries visited for 200 new keys at a cap of 2000"
        );
        for (i, answer) in answers.iter().enumerate() {
            assert!(
                matches!(answer, Ok(d) if d[0].allowed),
                "new{i}: {answer:?}"
            );
        }
        assert_eq!(store.len(), 2_000, "the cap holds");
    }

    /// A flood of new keys at the cap neither changes nor slows a known key's decisions: it
    /// evicts the keys that replenish soonest, not the key charged the most.
    #[test]
    fn known_keys_decide_unchanged_during_a_flood_at_the_cap() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = capped(&clock, 500);
        let l = limit("g", Algorithm::Gcra);
        for _ in 0..10 {
            assert!(check(&store, &l, "known", clock.now()).allowed);
        }
        for i in 0..499 {
            check(&store, &l, &format!("old{i}"), clock.now());
        }
        clock.advance(Duration::from_secs(1));
        for i in 0..2_000 {
            let d = store
                .decide_at(&request(&l, &format!("flood{i}")), Op::Check, clock.now())
                .expect("a new key at the cap evicts");
            assert!(d[0].allowed, "flood{i}");
            if i % 100 == 0 {
                take_visited();
                let known = check(&store, &l, "known", clock.now());
                assert!(
                    !known.allowed,
                    "flood{i}: known key lost its state {known:?}"
                );
                assert_eq!(take_visited(), 0, "a known key's check visits nothing else");
            }
        }
        assert_eq!(store.len(), 500);
    }

    /// A new key at the cap first evicts a replenished key of its shard (nothing lost), else
    /// the key of its shard that replenishes soonest; a key charged later is kept.
    #[test]
    fn a_new_key_at_the_cap_evicts_replenished_then_soonest() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = capped(&clock, 2);
        let l = limit("g", Algorithm::Gcra);
        let users = same_shard(&l, "u", 4);
        let t0 = clock.now();
        check(&store, &l, &users[0], t0); // replenished at t0 + 6 s
        clock.advance(Duration::from_secs(3));
        check(&store, &l, &users[1], clock.now()); // replenished at t0 + 9 s
        clock.advance(Duration::from_secs(4)); // t0 + 7 s: users[0] replenished
        assert!(check(&store, &l, &users[2], clock.now()).allowed);
        assert_eq!(store.len(), 2);
        let now = clock.now();
        assert_eq!(
            peek(&store, &l, &users[1], now).remaining,
            9,
            "live key kept"
        );
        // Full, nothing replenished: users[1] (t0 + 9 s) goes before users[2] (t0 + 13 s).
        assert!(check(&store, &l, &users[3], now).allowed);
        assert_eq!(store.len(), 2);
        assert_eq!(
            peek(&store, &l, &users[2], now).remaining,
            9,
            "later key kept"
        );
        assert_eq!(peek(&store, &l, &users[3], now).remaining, 9);
        assert_eq!(peek(&store, &l, &users[1], now).remaining, 10, "evicted");
    }

    /// Every new key that meets a full store is counted, by limit and by what it did.
    #[test]
    fn a_full_store_is_counted() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
            let store = capped(&clock, 10);
            let l = limit("counted", Algorithm::Gcra);
            for i in 0..10 {
                check(&store, &l, &format!("old{i}"), clock.now());
            }
            for i in 0..7 {
                // Evicting or refused: counted either way.
                drop(store.decide_at(&request(&l, &format!("new{i}")), Op::Check, clock.now()));
            }
        });
        let counted: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(k, _, _, _)| k.key().name() == "tollgate_store_full_total")
            .map(|(k, _, _, v)| {
                assert!(
                    k.key()
                        .labels()
                        .any(|l| l.key() == "limit" && l.value() == "counted"),
                    "{k:?}"
                );
                match v {
                    metrics_util::debugging::DebugValue::Counter(n) => n,
                    other => panic!("not a counter: {other:?}"),
                }
            })
            .sum();
        assert_eq!(counted, 7);
    }
}
