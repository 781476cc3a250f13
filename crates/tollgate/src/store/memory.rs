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
//!   legitimate user. A key is evicted only after every key of its shard that replenishes
//!   sooner, so the keys charged most recently or most heavily go last. The heap costs 32 B per
//!   key (its `replenished_at` and an `Arc` clone of the key; `docs/benchmarks.md`, "Key cap").
//!   A key is refused ([`StoreError::Full`]) only when its shard holds no key to evict, which
//!   takes a cap far below the 64 shards. Each new key meeting a full store is counted,
//!   `tollgate_store_full_total{limit, result}` (`result`: `replenished`, `evicted`,
//!   `refused`), and logged once a second at most.
//! - **The sweeper never sweeps past the callers' time.** It reads the store's [`Clock`], but a
//!   caller may decide at times of its own (`decide_at`, `now: Some(..)` from a
//!   [`crate::Limiter`] given a clock, the `local` failure policy): keys stamped on a fake
//!   clock in 1970 look long replenished to a store clock in 2026, and were all dropped
//!   every 10 s (silent over-admission). So each shard notes, under the lock its decisions
//!   take anyway, the time of the last decision a caller gave it, and the background sweep
//!   drops a shard's keys only up to the earlier of that time and the store clock's now
//!   (a shard never given a caller's time: the store clock's now, as before, idle or not).
//!   The price: with caller-given times, a shard's replenished keys wait for a later decision
//!   in that shard (or for a new key at the cap, which takes the place of one), rather than
//!   go while the shard is idle. Per shard, not store-wide, so that a caller clock set back
//!   bounds each shard's sweep as soon as that shard decides at the new time. No shared
//!   atomic is written on the decision path.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use smallvec::SmallVec;

use self::locked::Locked;
use self::shard::{AtCap, Shard, Slot};

use crate::log_throttle::LogThrottle;
use crate::{
    Clock, Decision, Decisions, Entry, Key, LeaseGrant, LeaseTake, Limit, Op, Pace, Paced, Request,
    SingleRequest, Status, SteadyClock, Store, StoreError, Timestamp,
};

mod builder;
mod lease;
mod locked;
mod pace;
mod shard;

pub use self::builder::MemoryStoreBuilder;

/// Default key cap.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
/// Default interval between background sweeps.
pub(crate) const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(10);
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
            clock: Arc::new(SteadyClock),
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
    ///
    /// Unlike the background sweeper, this trusts the store's clock for every key, including
    /// keys decided at times the caller gave (`decide_at`, a [`crate::Limiter`] with a clock of
    /// its own): call it when the store's clock shows the callers' time (the replay sets its
    /// fake clock, then sweeps), never with a store clock that runs apart from theirs.
    pub fn sweep(&self) -> usize {
        self.inner
            .sweep_all(self.inner.clock.now().as_micros(), Sweep::ByStoreClock)
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
        self.inner.decide(request, At::given(now), op)
    }

    /// [`MemoryStore::decide_at`] for a single (limit, key) pair: no [`Request`] to build,
    /// one decision returned by value, synchronously, at the time given. Supported for
    /// callers that hold their keys and own the clock: offline replays of a log (`tollgate
    /// replay` decides every line through it), simulations, benchmarks. Services go through
    /// the [`crate::Limiter`] (failure policies, shadow limits, metrics).
    ///
    /// ```
    /// use tollgate::{Algorithm, Key, Limit, MemoryStore, Namespace, Op, Quota, SingleRequest, Timestamp};
    ///
    /// let limit = Limit::new("api", Algorithm::Gcra, Quota::per_second(2)?)?.keyed_by(["user"])?;
    /// let key = Key::new(&Namespace::default(), &limit, &[("user", "42")]); // build once, reuse
    /// let store = MemoryStore::new();
    /// let now = Timestamp::from_millis(1_000);
    /// let request = SingleRequest::new(&limit, &key, 1)?;
    /// assert!(store.decide_single_at(&request, Op::Check, now)?.is_allowed());
    /// assert!(store.decide_single_at(&request, Op::Check, now)?.is_allowed());
    /// let third = store.decide_single_at(&request, Op::Check, now)?;
    /// assert!(!third.is_allowed());
    /// assert_eq!(third.retry_after(), Some(std::time::Duration::from_millis(500)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Full`] when a check's key is new, the store is at its key cap and the
    /// key's shard holds no key to evict.
    #[inline]
    pub fn decide_single_at(
        &self,
        request: &SingleRequest<'_>,
        op: Op,
        now: Timestamp,
    ) -> Result<Decision, StoreError> {
        let (limit, key, cost) = (request.limit(), request.key(), request.cost());
        self.inner
            .try_decide_one(limit, key, cost, At::given(now), op)
            .map_err(|NoRoom| self.inner.full())
    }

    /// [`Store::pace`] at `now`, synchronously (what the `local` failure policy and tests
    /// use).
    ///
    /// # Errors
    /// [`StoreError::Full`] when a new key meets the key cap, and a protocol error for a
    /// reservation on a limit that cannot hand out slots (the [`crate::Limiter`] refuses it
    /// before: [`crate::CheckError::CannotReserve`]).
    pub fn pace_at(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Timestamp,
    ) -> Result<Paced, StoreError> {
        self.inner.pace(entry, pace, At::given(now))
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

    /// The caller's time when it gave one, else the store clock's.
    fn at(&self, now: Option<Timestamp>) -> At {
        match now {
            Some(now) => At::given(now),
            None => At {
                us: self.inner.clock.now().as_micros(),
                given: false,
            },
        }
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
        self.inner.decide(request, self.at(now), op)
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.reset_now(request);
        Ok(())
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        self.inner
            .take_lease(take, self.at(now))
            .map_err(|NoRoom| self.inner.full())
    }

    async fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        self.inner.pace(entry, pace, self.at(now))
    }

    fn in_process(&self) -> bool {
        true
    }
}

impl Inner {
    /// Decides: one lock for a single pair, every entry's shard lock otherwise.
    #[inline]
    fn decide(&self, request: &Request<'_>, at: At, op: Op) -> Result<Decisions, StoreError> {
        match request.entries() {
            _ if request.counts_refusals() && op.charges() => self.try_count(request, at),
            _ if request.counts_refusals() => Ok(self.peek_counts(request, at)),
            [e] => self
                .try_decide_one(e.limit, &e.key, e.cost, at, op)
                .map(Decisions::from),
            _ => self.try_decide(request, at, op),
        }
        .map_err(|NoRoom| self.full())
    }

    fn full(&self) -> StoreError {
        StoreError::Full {
            max_keys: self.max_keys,
        }
    }

    /// A new key of `limit` met the key cap: evicts `shard`'s soonest replenished key other
    /// than `keep`'s (counted, logged once a second), whose room the new key takes.
    /// [`NoRoom`] when the shard has none to give.
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
        at: At,
        op: Op,
    ) -> Result<Decision, NoRoom> {
        let rule = limit.rule();
        let now = at.us;
        let mut shard = lock(&self.shards[shard_of(key)]);
        at.note(&mut shard);
        let (status, retry) = match shard.map.get_mut(key) {
            Some(slot) => {
                let (status, retry) = rule.decide(&mut slot.state, now, cost, op);
                if op.charges() && retry.is_none() {
                    slot.replenished_at = now.saturating_add(status.reset_after_us);
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
        if !self.reserve(1) {
            self.at_cap(shard, limit, now, |_| false)?;
        }
        let replenished_at = now.saturating_add(status.reset_after_us);
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
    fn try_decide(&self, request: &Request<'_>, at: At, op: Op) -> Result<Decisions, NoRoom> {
        let now = at.us;
        let entries = request.entries();
        let shard_ids: SmallVec<[usize; 2]> = entries.iter().map(|e| shard_of(&e.key)).collect();
        let mut locked = Locked::new(|i| &*self.shards[i], shard_ids.iter().copied());
        for &id in &shard_ids {
            at.note(locked.shard(id));
        }
        let mut retries: SmallVec<[Option<u64>; 2]> = SmallVec::new();
        for (e, &id) in entries.iter().zip(&shard_ids) {
            let rule = e.limit.rule();
            let retry = match locked.shard(id).map.get_mut(&e.key) {
                Some(slot) => rule.admits(&mut slot.state, now, e.cost).err(),
                None => rule.admits(&mut rule.empty_state(), now, e.cost).err(),
            };
            retries.push(retry);
        }
        // Charged: every entry that admits, when the request is admitted (all or nothing
        // unless entries need less, `Request::admitted`).
        let admitted = op.charges() && request.admitted(retries.iter().map(Option::is_none));
        let charged = |i: usize| admitted && retries[i].is_none();
        if admitted {
            self.make_room(entries, &shard_ids, &mut locked, now, charged)?;
        }
        let mut decisions = Decisions::new();
        for (i, (e, &id)) in entries.iter().zip(&shard_ids).enumerate() {
            let rule = e.limit.rule();
            let shard = locked.shard(id);
            let decision = if charged(i) {
                let slot = slot_of(shard, e);
                rule.charge(&mut slot.state, now, e.cost);
                let status = rule.status(&mut slot.state, now);
                slot.replenished_at = now.saturating_add(status.reset_after_us);
                crate::rules::decision(rule.limit(), status, None)
            } else {
                match shard.map.get_mut(&e.key) {
                    Some(slot) => rule.decision(&mut slot.state, now, retries[i]),
                    None => rule.decision(&mut rule.empty_state(), now, retries[i]),
                }
            };
            decisions.push(decision);
        }
        Ok(decisions)
    }

    /// Room under the cap for each key of `entries` that is `charged` and not held yet, in
    /// its own shard; the request's own keys are never evicted. [`NoRoom`] when one finds
    /// none (the keys evicted for the others stay evicted; their room goes back to the cap).
    fn make_room(
        &self,
        entries: &[Entry<'_>],
        shard_ids: &[usize],
        locked: &mut Locked<'_>,
        now: u64,
        charged: impl Fn(usize) -> bool,
    ) -> Result<(), NoRoom> {
        let in_check = |k: &Key| entries.iter().any(|e| e.key == *k);
        let mut made = 0;
        for (i, (e, &id)) in entries.iter().zip(shard_ids).enumerate() {
            let shard = locked.shard(id);
            if !charged(i) || shard.map.contains_key(&e.key) {
                continue;
            }
            if !self.reserve(1) && self.at_cap(shard, e.limit, now, in_check).is_err() {
                self.len.fetch_sub(made, Ordering::Relaxed);
                return Err(NoRoom);
            }
            made += 1;
        }
        Ok(())
    }

    /// A check of a request that counts refusals ([`Request::count_refusals`]): every entry
    /// charged its cost whether it admits or not, each on its own, under all their shard
    /// locks (so the request is still one step to every other caller). [`NoRoom`] when a new
    /// key finds no room (the entries before it stay charged, as separate counts would).
    fn try_count(&self, request: &Request<'_>, at: At) -> Result<Decisions, NoRoom> {
        let now = at.us;
        let entries = request.entries();
        let mut locked = Locked::new(
            |i| &*self.shards[i],
            entries.iter().map(|e| shard_of(&e.key)),
        );
        let in_check = |k: &Key| entries.iter().any(|e| e.key == *k);
        let mut decisions = Decisions::new();
        for e in entries {
            let shard = locked.shard(shard_of(&e.key));
            at.note(shard);
            let rule = e.limit.rule();
            if !shard.map.contains_key(&e.key) && !self.reserve(1) {
                self.at_cap(shard, e.limit, now, in_check)?;
            }
            let slot = slot_of(shard, e);
            let (status, retry) = rule.count(&mut slot.state, now, e.cost);
            slot.replenished_at = now.saturating_add(status.reset_after_us);
            decisions.push(crate::rules::decision(rule.limit(), status, retry));
        }
        Ok(decisions)
    }

    /// A peek of a request that counts refusals ([`Request::count_refusals`]): every entry
    /// answered from its count as it stands, as a count of nothing would answer it (refused
    /// when the count is above the limit: envoyproxy/ratelimit's `hits_addend` 0), on a copy
    /// of its state, so nothing is written and no key is made. Each entry under its own
    /// shard's lock: a peek charges nothing, so there is no all or nothing to keep.
    fn peek_counts(&self, request: &Request<'_>, at: At) -> Decisions {
        let now = at.us;
        let mut decisions = Decisions::new();
        for e in request.entries() {
            let rule = e.limit.rule();
            let mut state = {
                let mut shard = lock(&self.shards[shard_of(&e.key)]);
                at.note(&mut shard);
                shard
                    .map
                    .get(&e.key)
                    .map_or_else(|| rule.empty_state(), |slot| slot.state.clone())
            };
            let (status, retry) = rule.count(&mut state, now, 0);
            decisions.push(crate::rules::decision(rule.limit(), status, retry));
        }
        decisions
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

    /// Drops every key fully replenished at `now` (the store clock's), one shard at a time,
    /// a shard given callers' times only up to the last of them with [`Sweep::UpToCallers`];
    /// returns how many.
    fn sweep_all(&self, now: u64, how: Sweep) -> usize {
        self.shards
            .iter()
            .map(|shard| self.sweep_shard(&mut lock(shard), now, how))
            .sum()
    }

    fn sweep_shard(&self, shard: &mut Shard, now: u64, how: Sweep) -> usize {
        let until = match (how, shard.caller_now) {
            (Sweep::UpToCallers, Some(caller)) => caller.min(now),
            _ => now,
        };
        let removed = shard.sweep(until);
        self.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }
}

/// `entry`'s slot in `shard`, made empty when the key is not held (its room under the cap
/// already found). A new slot is pushed on the heap at 0: moved to its charged time when it
/// reaches the top.
fn slot_of<'s>(shard: &'s mut Shard, entry: &Entry<'_>) -> &'s mut Slot {
    if !shard.map.contains_key(&entry.key) {
        let state = entry.limit.rule().empty_state();
        shard.insert(
            &entry.key,
            Slot {
                state,
                replenished_at: 0,
            },
        );
    }
    let Some(slot) = shard.map.get_mut(&entry.key) else {
        unreachable!("inserted above")
    };
    slot
}

/// The instant a call decides at (µs), and whether its caller gave it: the caller's clock, which
/// may run apart from the store's (see the module's notes on the sweeper).
#[derive(Clone, Copy, Debug)]
struct At {
    us: u64,
    given: bool,
}

impl At {
    /// `now`, given by the caller.
    #[inline]
    fn given(now: Timestamp) -> At {
        At {
            us: now.as_micros(),
            given: true,
        }
    }

    /// Notes a caller's time in `shard`, whose lock the call holds: the background sweep
    /// goes no further in it.
    #[inline]
    fn note(self, shard: &mut Shard) {
        if self.given {
            shard.caller_now = Some(self.us);
        }
    }
}

/// How far a sweep goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sweep {
    /// Up to the store clock's now in every shard ([`MemoryStore::sweep`]).
    ByStoreClock,
    /// The background sweeper: in a shard given callers' times, up to the last of them at
    /// most (the store's clock cannot tell whether theirs runs with it).
    UpToCallers,
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
mod tests;
