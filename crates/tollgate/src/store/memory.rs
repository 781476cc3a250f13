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
//! - **Bounded memory**: a state that has fully replenished equals no state, so it is swept
//!   (by a background thread every `sweep_interval`, and on demand when the key cap is hit). A
//!   key cap answers [`StoreError::Full`] instead of growing without end.
//! - The sweeper asks the store's [`Clock`]; give the store the same clock as the limiter.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use smallvec::SmallVec;

use crate::key::BuildKeyHasher;
use crate::rules::{AnyRule, AnyState};
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
}

type Shard = HashMap<Key, Slot, BuildKeyHasher>;

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
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How often a background thread drops replenished keys (default
    /// [`DEFAULT_SWEEP_INTERVAL`]); `None` for no thread (sweeps then happen only when the key
    /// cap is reached, or by calling [`MemoryStore::sweep`]).
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
    // Without a thread the store still works: the cap sweeps on demand.
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
            for key in lock(shard).keys() {
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
    /// [`StoreError::Full`] when a check needs new keys beyond the key cap (a peek never
    /// stores a key, so it never fails).
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
    /// [`StoreError::Full`] when a check's key is new and the key cap leaves no room for it.
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
        match self.inner.try_decide_one(limit, key, cost, now, op) {
            Ok(decision) => Ok(decision),
            Err(NoRoom) => self.inner.sweep_and_decide_one(limit, key, cost, now),
        }
    }

    /// [`Store::reset`] without the future.
    pub fn reset_now(&self, request: &Request<'_>) {
        for e in request.entries() {
            let mut shard = lock(&self.inner.shards[shard_of(&e.key)]);
            if shard.remove(&e.key).is_some() {
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
    /// Decides; when the key cap is reached, sweeps every shard once and tries again.
    #[inline]
    fn decide(&self, request: &Request<'_>, now: u64, op: Op) -> Result<Decisions, StoreError> {
        let first = match request.entries() {
            [e] => self
                .try_decide_one(e.limit, &e.key, request.cost(), now, op)
                .map(Decisions::from),
            _ => self.try_decide(request, now, op),
        };
        match first {
            Ok(decisions) => Ok(decisions),
            Err(NoRoom) => self.sweep_and_decide(request, now, op),
        }
    }

    /// The key cap is reached: sweeps every shard once and tries again.
    #[cold]
    fn sweep_and_decide(
        &self,
        request: &Request<'_>,
        now: u64,
        op: Op,
    ) -> Result<Decisions, StoreError> {
        self.sweep_all(now);
        self.try_decide(request, now, op)
            .map_err(|NoRoom| self.full())
    }

    fn full(&self) -> StoreError {
        StoreError::Full {
            max_keys: self.max_keys,
        }
    }

    /// [`Inner::sweep_and_decide`] for a single pair.
    #[cold]
    fn sweep_and_decide_one(
        &self,
        limit: &Limit,
        key: &Key,
        cost: u64,
        now: u64,
    ) -> Result<Decision, StoreError> {
        self.sweep_all(now);
        self.try_decide_one(limit, key, cost, now, Op::Check)
            .map_err(|NoRoom| self.full())
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
        let (status, retry) = match shard.get_mut(key) {
            Some(slot) => {
                let (status, retry) = rule.decide(&mut slot.state, now, cost, op);
                if op.charges() && retry.is_none() {
                    slot.replenished_at = now + status.reset_after_us;
                }
                (status, retry)
            }
            None => self.decide_new(&mut shard, rule, key, cost, now, op)?,
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
        rule: &AnyRule,
        key: &Key,
        cost: u64,
        now: u64,
        op: Op,
    ) -> Result<(Status, Option<u64>), NoRoom> {
        let mut state = rule.empty_state();
        let (status, retry) = rule.decide(&mut state, now, cost, op);
        if !op.charges() || retry.is_some() {
            return Ok((status, retry));
        }
        // Charged a fresh state: kept only if the cap leaves room (else dropped, unseen).
        if !self.reserve(1) {
            return Err(NoRoom);
        }
        let replenished_at = now + status.reset_after_us;
        shard.insert(
            key.clone(),
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
            let retry = match guards[g].1.get_mut(&e.key) {
                Some(slot) => rule.admits(&mut slot.state, now, cost).err(),
                None => rule.admits(&mut rule.empty_state(), now, cost).err(),
            };
            retries.push(retry);
        }
        let all_admit = retries.iter().all(Option::is_none);

        if all_admit && charge {
            let new_keys = entries
                .iter()
                .zip(&shard_ids)
                .filter(|(e, id)| {
                    let g = guard_of(&mut guards, **id);
                    !guards[g].1.contains_key(&e.key)
                })
                .count();
            if new_keys > 0 && !self.reserve(new_keys) {
                return Err(NoRoom);
            }
        }

        let mut decisions = Decisions::new();
        for ((e, &id), retry) in entries.iter().zip(&shard_ids).zip(retries) {
            let g = guard_of(&mut guards, id);
            let rule = e.limit.rule();
            let shard = &mut guards[g].1;
            let decision = if all_admit && charge {
                if !shard.contains_key(&e.key) {
                    let state = rule.empty_state();
                    shard.insert(
                        e.key.clone(),
                        Slot {
                            state,
                            replenished_at: 0,
                        },
                    );
                }
                let Some(slot) = shard.get_mut(&e.key) else {
                    unreachable!("inserted above")
                };
                rule.charge(&mut slot.state, now, cost);
                let status = rule.status(&mut slot.state, now);
                slot.replenished_at = now + status.reset_after_us;
                crate::rules::decision(rule.limit(), status, None)
            } else {
                match shard.get_mut(&e.key) {
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
        let before = shard.len();
        shard.retain(|_, slot| slot.replenished_at > now);
        let removed = before - shard.len();
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

    /// The key cap refuses new keys with a clear error, after trying a sweep.
    #[test]
    fn key_cap_refuses_new_keys() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_keys(3)
            .build();
        let l = limit("f", Algorithm::FixedWindow);
        for u in ["a", "b", "c"] {
            store
                .decide_at(&request(&l, u), Op::Check, clock.now())
                .expect("room");
        }
        let err = store
            .decide_at(&request(&l, "d"), Op::Check, clock.now())
            .expect_err("full");
        assert!(matches!(err, StoreError::Full { max_keys: 3 }), "{err}");
        assert!(err.to_string().contains("3 keys"), "{err}");
        // Existing keys still work, and once the window is over the cap frees itself.
        store
            .decide_at(&request(&l, "a"), Op::Check, clock.now())
            .expect("existing key");
        clock.advance(Duration::from_secs(60));
        store
            .decide_at(&request(&l, "d"), Op::Check, clock.now())
            .expect("swept");
        assert_eq!(store.len(), 1);
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
}
