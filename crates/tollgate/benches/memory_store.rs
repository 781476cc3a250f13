//! Decisions per second of the [`MemoryStore`], against `governor`'s keyed limiter, and the
//! sharded `Mutex<HashMap>` against a `dashmap` map for the same single-key checks.
//!
//! Why it exists: the issue sets a target (GCRA at least as fast as `governor`), and the design
//! note in `store/memory.rs` rests on the sharded-mutex-versus-`dashmap` measurement. Results
//! and how to read them are in `docs/benchmarks.md` ("Memory store (criterion)").
//!
//! How every case runs, so that the comparisons are like for like:
//! - Keys are `tollgate::Key`s built once, shuffled (so that map accesses are not in insertion
//!   order), and reused. Every store — ours, `governor`, the `dashmap` comparator — is keyed by
//!   those same `Key`s and hashes them with the same pass-through of [`Key::prehash`].
//! - Our calls build a [`SingleRequest`] per call (validating the cost, borrowing the prebuilt
//!   `Key`) and call [`MemoryStore::check_single_at`], as a caller checking one key does; the
//!   `gcra-request` cases build the general [`Request`] per call instead (cloning the `Key` into
//!   it) and call [`MemoryStore::check_at`], to show what that path costs.
//! - Time is virtual: each thread's clock moves 1 µs per call. Our stores get it as `now`;
//!   `governor` reads the same value from a thread-local clock. Every key of a case is touched
//!   once, untimed, before measuring, so the timed loop never inserts.
//! - Two-thread cases split the keys into two disjoint halves, one per thread; the time is the
//!   wall time for both, so the rate is the total throughput.

use std::cell::{Cell, OnceCell};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dashmap::DashMap;
use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use tollgate::rules::AnyState;
use tollgate::{
    Admission, Algorithm, Decision, Entry, Key, Limit, MemoryStore, Namespace, Op, Quota, Request,
    SingleRequest, Timestamp,
};

/// Key counts measured.
const KEY_COUNTS: [usize; 2] = [1_000, 1_000_000];
/// Thread counts measured.
const THREADS: [usize; 2] = [1, 2];
/// Virtual time at the first call, µs.
const START_US: u64 = 1_000_000_000_000;

/// The admit-path quota: one unit per µs per key, so a key called at most once per µs of
/// virtual time is always admitted; the same for `governor`.
fn admit_quota() -> (Quota, governor::Quota) {
    let ours = Quota::new(1_000_000, Duration::from_secs(1)).expect("valid quota");
    let burst = NonZeroU32::new(1_000_000).expect("non-zero");
    let theirs = governor::Quota::with_period(Duration::from_micros(1))
        .expect("non-zero period")
        .allow_burst(burst);
    (ours, theirs)
}

/// The deny-path quota: one unit per hour, spent by the untimed first call of each key.
fn deny_quota() -> (Quota, governor::Quota) {
    let ours = Quota::per_hour(1).expect("valid quota");
    let theirs = governor::Quota::per_hour(NonZeroU32::MIN);
    (ours, theirs)
}

// ---------------------------------------------------------------------------------------------
// Shared by all stores: keys, the pass-through hasher, the per-thread loop.

/// `n` distinct keys of `limit`, in a fixed pseudo-random order.
fn build_keys(limit: &Limit, n: usize) -> Vec<Key> {
    let ns = Namespace::default();
    let mut keys: Vec<Key> = (0..n)
        .map(|i| Key::new(&ns, limit, &[("user", i.to_string())]))
        .collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % (i as u64 + 1)) as usize;
        keys.swap(i, j);
    }
    keys
}

type PrehashedState = tollgate::BuildKeyHasher;

/// Where one thread is: its virtual clock and its next key.
#[derive(Clone, Copy)]
struct Cursor {
    now_us: u64,
    next: usize,
}

/// Calls and admissions seen by a case, to report that it measured the path it meant to.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    admitted: AtomicU64,
}

/// `calls` decisions over `keys`, round robin from `cursor`; returns how many were admitted.
fn run(keys: &[Key], cursor: &mut Cursor, calls: u64, decide: &impl Fn(usize, u64) -> bool) -> u64 {
    let mut admitted = 0;
    let Cursor {
        mut now_us,
        mut next,
    } = *cursor;
    for _ in 0..calls {
        admitted += u64::from(decide(next, now_us));
        now_us += 1;
        next += 1;
        if next == keys.len() {
            next = 0;
        }
    }
    *cursor = Cursor { now_us, next };
    admitted
}

/// One case: its keys split into one slice per thread, with each thread's cursor.
struct Case<'k> {
    slices: Vec<(usize, &'k [Key])>,
    cursors: Vec<Cursor>,
    tally: Tally,
}

impl<'k> Case<'k> {
    fn new(keys: &'k [Key], threads: usize) -> Self {
        let per = keys.len() / threads;
        let slices = (0..threads)
            .map(|t| (t * per, &keys[t * per..(t + 1) * per]))
            .collect();
        Case {
            slices,
            cursors: vec![
                Cursor {
                    now_us: START_US,
                    next: 0,
                };
                threads
            ],
            tally: Tally::default(),
        }
    }

    /// Touches every key once, untimed, so that the timed loop finds them all.
    fn prefill(&mut self, decide: &(impl Fn(usize, u64) -> bool + Sync)) {
        for ((offset, slice), cursor) in self.slices.iter().zip(&mut self.cursors) {
            let offset = *offset;
            run(slice, cursor, slice.len() as u64, &|i, now| {
                decide(offset + i, now)
            });
        }
    }

    /// Times `iters` decisions shared out between the threads; `decide(i, now)` decides key
    /// `i` of the case's key list.
    fn timed(&mut self, iters: u64, decide: &(impl Fn(usize, u64) -> bool + Sync)) -> Duration {
        let threads = self.slices.len() as u64;
        let tally = &self.tally;
        let started = Instant::now();
        if threads == 1 {
            let (offset, slice) = self.slices[0];
            let admitted = run(slice, &mut self.cursors[0], iters, &|i, now| {
                decide(offset + i, now)
            });
            tally
                .admitted
                .fetch_add(black_box(admitted), Ordering::Relaxed);
        } else {
            std::thread::scope(|s| {
                for (t, ((offset, slice), cursor)) in
                    self.slices.iter().zip(&mut self.cursors).enumerate()
                {
                    let offset = *offset;
                    let calls = iters / threads + u64::from((t as u64) < iters % threads);
                    s.spawn(move || {
                        let admitted = run(slice, cursor, calls, &|i, now| decide(offset + i, now));
                        tally
                            .admitted
                            .fetch_add(black_box(admitted), Ordering::Relaxed);
                    });
                }
            });
        }
        let elapsed = started.elapsed();
        tally.calls.fetch_add(iters, Ordering::Relaxed);
        elapsed
    }

    fn report(&self, id: &str) {
        let calls = self.tally.calls.load(Ordering::Relaxed);
        let admitted = self.tally.admitted.load(Ordering::Relaxed);
        eprintln!(
            "tally {id}: {admitted} of {calls} timed calls admitted ({:.1}%)",
            100.0 * admitted as f64 / calls.max(1) as f64
        );
    }
}

// ---------------------------------------------------------------------------------------------
// governor with the same virtual time.

thread_local! {
    /// The calling thread's virtual time, ns, as `governor` reads it.
    static VIRTUAL_NOW_NS: Cell<u64> = const { Cell::new(START_US * 1_000) };
}

/// A `governor` clock reading [`VIRTUAL_NOW_NS`].
#[derive(Debug, Clone, Copy, Default)]
struct VirtualClock;

impl GovernorClock for VirtualClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::new(VIRTUAL_NOW_NS.with(Cell::get))
    }
}

type Governor = governor::RateLimiter<
    Key,
    DashMapStateStore<Key, PrehashedState>,
    VirtualClock,
    NoOpMiddleware<Nanos>,
>;

// ---------------------------------------------------------------------------------------------
// The dashmap comparator: the memory store's single-key path over a `DashMap`.

/// One key's state, as the memory store keeps it.
struct Slot {
    state: AnyState,
    replenished_at: u64,
}

/// A `DashMap` running the limit's rule (here [`tollgate::rules::Gcra`]) for single-pair
/// requests, with the memory store's state layout and rule dispatch. Only the map differs.
struct DashStore {
    map: DashMap<Key, Slot, PrehashedState>,
}

impl DashStore {
    fn check_single_at(&self, request: &SingleRequest<'_>, now: Timestamp) -> Decision {
        let rule = request.limit().rule();
        let (now, cost) = (now.as_micros(), request.cost());
        let mut slot = match self.map.get_mut(request.key()) {
            Some(slot) => slot,
            None => self
                .map
                .entry(request.key().clone())
                .or_insert_with(|| Slot {
                    state: rule.empty_state(),
                    replenished_at: 0,
                }),
        };
        let (status, retry) = rule.decide(&mut slot.state, now, cost, Op::Check);
        if retry.is_none() {
            slot.replenished_at = now + status.reset_after_us;
        }
        Decision {
            admission: Admission::from_wait(retry.map(Duration::from_micros)),
            limit: rule.limit(),
            remaining: status.remaining,
            reset_after: Duration::from_micros(status.reset_after_us),
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn limit(algorithm: Algorithm, quota: Quota) -> Limit {
    Limit::new("bench", algorithm, quota)
        .and_then(|l| l.keyed_by(["user"]))
        .expect("valid limit")
}

#[inline]
fn request<'a>(limit: &'a Limit, key: &Key) -> Request<'a> {
    Request::new([Entry::new(limit, key.clone())], 1).expect("valid request")
}

fn new_store() -> MemoryStore {
    MemoryStore::builder()
        .max_keys(usize::MAX)
        .sweep_interval(None)
        .build()
}

fn label(keys: usize) -> &'static str {
    if keys >= 1_000_000 { "1M" } else { "1k" }
}

/// Benchmarks case `id` with `threads` threads over `n` keys. Only when criterion's filter
/// selects it does it build what it needs: the keys (once, shared by the cases of one limit,
/// through `keys`) and `make(keys)`, which returns `decide(i, now)`: decide key `i` at `now`.
fn bench_case<'k, D>(
    c: &mut Criterion,
    id: &str,
    n: usize,
    threads: usize,
    keys: &'k OnceCell<Vec<Key>>,
    build: &dyn Fn() -> Vec<Key>,
    make: impl FnOnce(&'k [Key]) -> D,
) where
    D: Fn(usize, u64) -> bool + Sync,
{
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));
    let id = format!("{id}/t{threads}/{}", label(n));
    let mut make = Some(make);
    let mut ready: Option<(Case<'k>, D)> = None;
    group.bench_function(&id, |b| {
        let (case, decide) = ready.get_or_insert_with(|| {
            let keys = keys.get_or_init(build).as_slice();
            let make = make.take().unwrap_or_else(|| unreachable!("set up once"));
            let decide = make(keys);
            let mut case = Case::new(keys, threads);
            case.prefill(&decide);
            (case, decide)
        });
        b.iter_custom(|iters| case.timed(iters, decide));
    });
    group.finish();
    if let Some((case, _)) = &ready {
        case.report(&id);
    }
}

fn benches(c: &mut Criterion) {
    let algorithms = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::sliding_window(),
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];
    let (admit, governor_admit) = admit_quota();
    let (deny, governor_deny) = deny_quota();
    for n in KEY_COUNTS {
        for algorithm in algorithms {
            // The same rate, one unit per µs, within the sliding log's 10 000 units.
            let admit = match algorithm {
                Algorithm::SlidingLog => {
                    Quota::new(10_000, Duration::from_millis(10)).expect("valid quota")
                }
                _ => admit,
            };
            let limit = &limit(algorithm, admit);
            let keys = OnceCell::new();
            let build = || build_keys(limit, n);
            for threads in THREADS {
                bench_case(c, algorithm.name(), n, threads, &keys, &build, |keys| {
                    ours(limit, keys)
                });
            }
            if algorithm != Algorithm::Gcra {
                continue;
            }
            // GCRA extras on the same keys (a key's text depends only on the limit's name and
            // algorithm, which the deny limit shares).
            let deny_limit = limit_named_like(limit, deny);
            for threads in THREADS {
                bench_case(c, "gcra-request", n, threads, &keys, &build, |keys| {
                    let store = new_store();
                    move |i, now| {
                        let decisions = store
                            .decide_at(
                                &request(limit, &keys[i]),
                                Op::Check,
                                Timestamp::from_micros(now),
                            )
                            .expect("room for every key");
                        decisions[0].is_allowed()
                    }
                });
                bench_case(c, "gcra-dashmap", n, threads, &keys, &build, |keys| {
                    let dash = DashStore {
                        map: DashMap::with_hasher(PrehashedState::default()),
                    };
                    move |i, now| {
                        let request = SingleRequest::new(limit, &keys[i], 1).expect("valid");
                        dash.check_single_at(&request, Timestamp::from_micros(now))
                            .is_allowed()
                    }
                });
                bench_case(c, "governor", n, threads, &keys, &build, |keys| {
                    let theirs = governor_limiter(governor_admit);
                    move |i, now| {
                        VIRTUAL_NOW_NS.with(|t| t.set(now * 1_000));
                        theirs.check_key(&keys[i]).is_ok()
                    }
                });
                bench_case(c, "gcra-deny", n, threads, &keys, &build, |keys| {
                    ours(&deny_limit, keys)
                });
                bench_case(c, "governor-deny", n, threads, &keys, &build, |keys| {
                    let theirs = governor_limiter(governor_deny);
                    move |i, now| {
                        VIRTUAL_NOW_NS.with(|t| t.set(now * 1_000));
                        theirs.check_key(&keys[i]).is_ok()
                    }
                });
            }
        }
    }
}

/// `decide` for a fresh [`MemoryStore`], building a [`SingleRequest`] per call.
fn ours<'k>(limit: &'k Limit, keys: &'k [Key]) -> impl Fn(usize, u64) -> bool + Sync + 'k {
    let store = new_store();
    move |i, now| {
        let request = SingleRequest::new(limit, &keys[i], 1).expect("valid");
        store
            .decide_single_at(&request, Op::Check, Timestamp::from_micros(now))
            .expect("room for every key")
            .is_allowed()
    }
}

/// A limit with `like`'s name, algorithm and key parts but another quota.
fn limit_named_like(like: &Limit, quota: Quota) -> Limit {
    Limit::new(like.name(), like.algorithm(), quota)
        .and_then(|l| l.keyed_by(["user"]))
        .expect("valid limit")
}

fn governor_limiter(quota: governor::Quota) -> Governor {
    VIRTUAL_NOW_NS.with(|t| t.set(START_US * 1_000));
    // `governor` measures from its creation instant: the virtual start, before any call.
    Governor::dashmap_with_clock_and_hasher(quota, VirtualClock, PrehashedState::default())
}

criterion_group! {
    name = memory_store;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(memory_store);
