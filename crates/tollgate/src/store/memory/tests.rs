//! Tests of the memory store: sweeps, the key cap, the single-pair path, concurrency.

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
    let _ = check(&store, &l, "a", clock.now());
    let other = user_in_other_shard(&l, "a");
    let err = store
        .decide_at(&request(&l, &other), Op::Check, clock.now())
        .expect_err("full");
    assert!(matches!(err, StoreError::Full { max_keys: 1 }), "{err}");
    assert!(err.to_string().contains("1 keys"), "{err}");
    assert!(
        check(&store, &l, "a", clock.now()).is_allowed(),
        "known key"
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(store.sweep(), 1);
    assert!(check(&store, &l, &other, clock.now()).is_allowed(), "swept");
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
    let _ = check(&store, &l1, a, clock.now());
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
    let _ = check(&store, &l1, a, clock.now());
    let _ = check(&store, &l1, &e, clock.now());
    let d = both(&store).expect("evicts the other key");
    assert_eq!((d[0].remaining, d[1].remaining), (8, 9));
    assert_eq!(peek(&store, &l1, &e, clock.now()).remaining, 10, "evicted");
    assert_eq!(store.len(), 2);
}

/// Keys reset and charged again leave out-of-date heap entries behind; the heap is rebuilt
/// before they outgrow twice the map.
#[test]
fn reset_keys_do_not_grow_the_heap() {
    let (clock, store, l) = gcra_capped("r", 100);
    for _ in 0..1_000 {
        let _ = check(&store, &l, "a", clock.now());
        store.reset_now(&request(&l, "a"));
    }
    let _ = check(&store, &l, "a", clock.now());
    let key = Key::new(&Namespace::default(), &l, &[("user", "a")]);
    let heap = lock(&store.inner.shards[shard_of(&key)]).heap_len();
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
    assert!(check(&a).expect("room").is_allowed());
    // At the cap, a second key is refused (`full`) or evicts the first, depending on whether
    // the hasher's seed puts both in one shard: the general path must do the same.
    let twin = MemoryStore::builder()
        .sweep_interval(None)
        .max_keys(1)
        .build();
    let general = |k: &Key| {
        let request = Request::new([Entry::new(&l, k.clone())], 1).expect("valid");
        twin.decide_at(&request, Op::Check, now)
    };
    assert!(general(&a).expect("room")[0].is_allowed());
    match (check(&b), general(&b)) {
        (Err(StoreError::Full { max_keys: 1 }), Err(StoreError::Full { max_keys: 1 })) => {}
        (Ok(single), Ok(general)) => assert_eq!(single, general[0]),
        other => panic!("the paths differ at the cap: {other:?}"),
    }
    assert_eq!(capped.len(), twin.len());
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
        let l = Limit::new("c", algorithm, Quota::per_hour(1_000).expect("valid")).expect("valid");
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
                                .is_allowed()
                        } else {
                            store
                                .decide_at(&request(l, "k"), Op::Check, now)
                                .expect("room")[0]
                                .is_allowed()
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

/// A GCRA limit (10 per minute) and a store capped at `max_keys` on a fake clock.
fn gcra_capped(name: &str, max_keys: usize) -> (FakeClock, MemoryStore, Limit) {
    let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
    let store = capped(&clock, max_keys);
    (clock, store, limit(name, Algorithm::Gcra))
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
    let (clock, store, l) = gcra_capped("g", 2_000);
    for i in 0..2_000 {
        let _ = check(&store, &l, &format!("old{i}"), clock.now());
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
            matches!(answer, Ok(d) if d[0].is_allowed()),
            "new{i}: {answer:?}"
        );
    }
    assert_eq!(store.len(), 2_000, "the cap holds");
}

/// A flood of new keys at the cap neither changes nor slows a known key's decisions: it
/// evicts the keys that replenish soonest, not the key charged the most.
///
/// 2 000 keys over 64 shards: a shard left empty by the (randomly seeded) hashing would
/// refuse its flood keys `Full`; with 500 keys that happened in about 3 % of runs, with 2 000
/// the odds are below 10^-12.
#[test]
fn known_keys_decide_unchanged_during_a_flood_at_the_cap() {
    let (clock, store, l) = gcra_capped("g", 2_000);
    for _ in 0..10 {
        assert!(check(&store, &l, "known", clock.now()).is_allowed());
    }
    for i in 0..1_999 {
        let _ = check(&store, &l, &format!("old{i}"), clock.now());
    }
    clock.advance(Duration::from_secs(1));
    for i in 0..2_000 {
        let d = store
            .decide_at(&request(&l, &format!("flood{i}")), Op::Check, clock.now())
            .expect("a new key at the cap evicts");
        assert!(d[0].is_allowed(), "flood{i}");
        if i % 100 == 0 {
            take_visited();
            let known = check(&store, &l, "known", clock.now());
            assert!(
                !known.is_allowed(),
                "flood{i}: known key lost its state {known:?}"
            );
            assert_eq!(take_visited(), 0, "a known key's check visits nothing else");
        }
    }
    assert_eq!(store.len(), 2_000);
}

/// A new key at the cap first evicts a replenished key of its shard (nothing lost), else
/// the key of its shard that replenishes soonest; a key charged later is kept.
#[test]
fn a_new_key_at_the_cap_evicts_replenished_then_soonest() {
    let (clock, store, l) = gcra_capped("g", 2);
    let users = same_shard(&l, "u", 4);
    let t0 = clock.now();
    let _ = check(&store, &l, &users[0], t0); // replenished at t0 + 6 s
    clock.advance(Duration::from_secs(3));
    let _ = check(&store, &l, &users[1], clock.now()); // replenished at t0 + 9 s
    clock.advance(Duration::from_secs(4)); // t0 + 7 s: users[0] replenished
    assert!(check(&store, &l, &users[2], clock.now()).is_allowed());
    assert_eq!(store.len(), 2);
    let now = clock.now();
    assert_eq!(
        peek(&store, &l, &users[1], now).remaining,
        9,
        "live key kept"
    );
    // Full, nothing replenished: users[1] (t0 + 9 s) goes before users[2] (t0 + 13 s).
    assert!(check(&store, &l, &users[3], now).is_allowed());
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
        let (clock, store, l) = gcra_capped("counted", 10);
        for i in 0..10 {
            let _ = check(&store, &l, &format!("old{i}"), clock.now());
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

/// A clock that panics on its next `panics` readings, then reads `inner`.
#[derive(Debug)]
struct PanickyClock {
    inner: FakeClock,
    panics: Arc<std::sync::atomic::AtomicUsize>,
}

impl crate::Clock for PanickyClock {
    fn now(&self) -> Timestamp {
        use std::sync::atomic::Ordering;
        let take = |n: usize| n.checked_sub(1);
        if self
            .panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
            .is_ok()
        {
            panic!("the clock panics on purpose");
        }
        self.inner.now()
    }
}

/// A sweep that panics does not end the sweeper: the next sweeps run and drop replenished
/// keys. (Real time: the sweeper is a thread that sleeps; bounded polling.)
#[test]
fn the_sweeper_survives_a_panicking_sweep() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
    let panics = Arc::new(AtomicUsize::new(0));
    let store = MemoryStore::builder()
        .clock(PanickyClock {
            inner: clock.clone(),
            panics: Arc::clone(&panics),
        })
        .sweep_interval(Some(Duration::from_millis(5)))
        .build();
    let gcra = limit("g", Algorithm::Gcra);
    store
        .decide_at(&request(&gcra, "a"), Op::Check, clock.now())
        .expect("room");
    panics.store(2, Ordering::SeqCst);
    clock.advance(Duration::from_secs(60)); // "a" has replenished
    // Its shard was given the caller's time: the sweeper goes no further than the caller's
    // last decision there, so decide at the new time.
    let _ = peek(&store, &gcra, "a", clock.now());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !store.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(panics.load(Ordering::SeqCst), 0, "two sweeps panicked");
    assert_eq!(store.len(), 0, "a later sweep dropped the replenished key");
}

/// Polls every 5 ms until `done` or 2 s have passed (the sweeper is a thread that sleeps:
/// real time, bounded); whether `done`.
fn poll(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !done() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The audit's scenario: a limiter deciding on a fake clock (`LimiterBuilder::clock`) over a
/// store on its own clock (`MemoryStore::new()`'s, the wall clock). The store's sweeper used
/// to take the keys, stamped in 1970, for long replenished and drop them all (a login limit
/// of 3 an hour admitted a 4th, 5th... every 10 s). It now sweeps a shard no further than
/// the caller's last time in it. A key decided on the store's own clock, in another shard,
/// shows the sweeper ran meanwhile (and still sweeps those idle, as before).
#[tokio::test]
async fn a_limiter_clock_apart_from_the_store_clock_keeps_its_keys_through_sweeps() {
    let store = MemoryStore::builder()
        .sweep_interval(Some(Duration::from_millis(5)))
        .build();
    let fake = FakeClock::new(Timestamp::from_millis(1_000_000));
    let login = Limit::new(
        "login",
        Algorithm::SlidingLog,
        Quota::per_hour(3).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid");
    let limiter = crate::Limiter::builder(store.clone())
        .clock(fake.clone())
        .limit(login.clone())
        .build()
        .expect("valid");
    let alice = [("user", "alice")];
    for i in 0..3 {
        let verdict = limiter.check("login", &alice).await.expect("decided");
        assert!(verdict.decision().is_allowed(), "check {i}");
    }
    let fourth = limiter.check("login", &alice).await.expect("decided");
    assert!(!fourth.decision().is_allowed(), "the 4th in the hour");

    // On the store's clock: replenished 1 ms after now, in another shard than alice's key.
    let quick = Limit::new(
        "quick",
        Algorithm::Gcra,
        Quota::new(1, Duration::from_millis(1)).expect("valid"),
    )
    .expect("valid");
    let alice_shard = shard_of(&limiter.key("login", &alice).expect("valid"));
    let other = user_in_shard(&quick, (alice_shard + 1) % SHARDS);
    Store::decide(&store, &request(&quick, &other), Op::Check, None)
        .await
        .expect("room");
    assert_eq!(store.len(), 2);
    assert!(
        poll(|| store.len() < 2),
        "the sweeper drops the store-clock key"
    );
    // A few more sweeps (every 5 ms).
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        store.len(),
        1,
        "alice's key is kept: the fake clock has not moved"
    );
    let again = limiter.check("login", &alice).await.expect("decided");
    assert!(!again.decision().is_allowed(), "still refused: {again:?}");

    // Once the caller's time passes the hour (a decision in the shard), the sweeper drops it.
    fake.advance(Duration::from_secs(3_600));
    let peeked = limiter.decide(&request(&login, "alice"), Op::Peek).await;
    assert!(peeked.decision().is_allowed(), "replenished: {peeked:?}");
    assert!(
        poll(|| store.is_empty()),
        "swept once replenished at the caller's time"
    );
}

/// Calls on the store's own clock (`now: None`: a limiter without a clock) are swept as
/// before, idle: the store's clock moves, no call comes, the key goes.
#[tokio::test]
async fn the_store_clock_still_sweeps_idle_keys() {
    let clock = FakeClock::new(Timestamp::from_millis(1_000_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(Some(Duration::from_millis(5)))
        .build();
    let gcra = limit("g", Algorithm::Gcra);
    Store::decide(&store, &request(&gcra, "a"), Op::Check, None)
        .await
        .expect("room");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(store.len(), 1, "not replenished yet");
    clock.advance(Duration::from_secs(60));
    assert!(poll(|| store.is_empty()), "swept idle");
}

/// The five algorithms at 10 per second, the sliding window's buckets dividing the second.
fn ten_per_second() -> Vec<Limit> {
    [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow { buckets: 10 },
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ]
    .into_iter()
    .map(|a| {
        Limit::new(a.to_string(), a, Quota::per_second(10).expect("valid"))
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid")
    })
    .collect()
}

/// Times at the end of `u64` (far beyond the supported range, 2^53 µs) used to panic on
/// every algorithm ("attempt to add with overflow": an instant plus a period or a wait), and
/// would wrap in a release build (a `tat` near 0 admitting everything). The arithmetic now
/// saturates: no panic, and the limit is still enforced (GCRA refuses a cost whose `tat`
/// would pass `u64::MAX`), through checks, peeks, settlements and reservations.
#[test]
fn times_at_the_end_of_u64_never_panic_and_stay_enforced() {
    // Each algorithm on its own, so that a failure names every one that fails.
    let at_the_end = |l: &Limit, now: Timestamp| {
        let store = MemoryStore::builder().sweep_interval(None).build();
        let allowed = (0..11)
            .filter(|_| check(&store, l, "m", now).is_allowed())
            .count();
        assert!(allowed <= 10, "{allowed} of 11 allowed");
        assert!(!check(&store, l, "m", now).is_allowed(), "the 12th allowed");
        let _ = peek(&store, l, "m", now);
        let entry = Entry::new(l, Key::new(&Namespace::default(), l, &[("user", "m")]));
        for delta in [5, i64::MAX, -3, i64::MIN + 1] {
            let pace = Pace::Adjust { delta };
            store.pace_at(&entry, pace, now).expect("settled");
        }
        if matches!(l.algorithm(), Algorithm::Gcra | Algorithm::TokenBucket) {
            let pace = Pace::Reserve {
                max_wait: Duration::MAX,
            };
            let _ = store.pace_at(&entry, pace, now).expect("answered");
        }
        assert_eq!(store.sweep(), 0, "kept, at the end of time");
    };
    let mut failed = Vec::new();
    for now in [u64::MAX - 1_000, u64::MAX] {
        for l in ten_per_second() {
            let run = std::panic::AssertUnwindSafe(|| at_the_end(&l, Timestamp::from_micros(now)));
            if let Err(panic) = std::panic::catch_unwind(run) {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failed.push(format!(
                    "{} at u64::MAX - {}: {message}",
                    l.name(),
                    u64::MAX - now
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Near 2^53 µs (year 2255), the end of the supported range for quotas this short
/// (`crate::rules`), every algorithm answers exactly as it does today: the same decisions,
/// shifted in time.
#[test]
fn the_end_of_the_supported_range_answers_as_today() {
    let today = 1_700_000_000_000_000_u64;
    let end = (1_u64 << 53) - (1_u64 << 53) % 1_000_000;
    let run = |l: &Limit, start: u64| {
        let store = MemoryStore::builder().sweep_interval(None).build();
        (0..30_u64)
            .map(|i| check(&store, l, "m", Timestamp::from_micros(start + i * 45_000)))
            .collect::<Vec<_>>()
    };
    for l in ten_per_second() {
        assert_eq!(run(&l, end), run(&l, today), "{}", l.name());
    }
}
