//! Lease mode: a hot key costs the store one call per `k` decisions, never more than the
//! limit per window from the store's point of view, unspent units given back.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use tollgate::{
    Algorithm, FakeClock, Lease, Limit, Limiter, MemoryStore, OnStoreError, Op, Outcome, Quota,
    Source, Store, Timestamp,
};
use tollgate_testkit::{CountingStore, FailingStore};

type Counting<S> = CountingStore<S>;

fn counting<S: Store>(inner: S) -> Counting<S> {
    CountingStore::new(inner)
}

fn memory() -> MemoryStore {
    MemoryStore::builder().sweep_interval(None).build()
}

/// The start of a minute: windows of a minute begin here.
fn clock() -> FakeClock {
    FakeClock::new(Timestamp::from_millis(1_899_999_960_000))
}

fn leased(per_minute: u64, lease: Lease) -> Limit {
    Limit::new(
        "hot",
        Algorithm::FixedWindow,
        Quota::per_minute(per_minute).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .and_then(|l| l.lease(lease))
    .expect("valid")
}

fn limiter<S: Store>(store: S, clock: &FakeClock, limits: Vec<Limit>) -> Limiter<S> {
    Limiter::builder(store)
        .clock(clock.clone())
        .limits(limits)
        .build()
        .expect("valid")
}

const KEY: [(&str, &str); 1] = [("user", "hot")];

/// Units the store counts for the key, read with a peek on a limiter without leases.
async fn store_count(store: &MemoryStore, clock: &FakeClock, per_minute: u64) -> u64 {
    let plain = Limit::new(
        "hot",
        Algorithm::FixedWindow,
        Quota::per_minute(per_minute).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("valid");
    let l = limiter(store.clone(), clock, vec![plain]);
    let request = l.prepare(&["hot"], &KEY, 1).expect("valid");
    per_minute - l.decide(&request, Op::Peek).await.decision().remaining
}

/// A limit of 1000 with k = 10: exactly 1000 admitted, at most one store call per 10, and
/// the refusals after it cost no store call until the window ends.
#[tokio::test]
async fn one_store_call_per_k_decisions() {
    let clock = clock();
    let store = counting(memory());
    let l = limiter(
        store.clone(),
        &clock,
        vec![leased(1_000, Lease::new().units(10))],
    );
    for i in 0..1_000 {
        let v = l.check("hot", &KEY).await.expect("valid");
        assert_eq!(v.outcome(), Outcome::Allowed, "check {i}: {v:?}");
    }
    let takes = store.takes.load(Ordering::SeqCst);
    assert!(takes <= 100, "{takes} takes for 1000 decisions at k = 10");
    assert_eq!(store.decides.load(Ordering::SeqCst), 0);
    let refused = l.check("hot", &KEY).await.expect("valid");
    assert!(
        matches!(refused.outcome(), Outcome::Limited { .. }),
        "{refused:?}"
    );
    let after_first_refusal = store.takes.load(Ordering::SeqCst);
    for _ in 0..100 {
        clock.advance(Duration::from_millis(5));
        let v = l.check("hot", &KEY).await.expect("valid");
        assert!(matches!(v.outcome(), Outcome::Limited { .. }));
        assert_eq!(v.decisions()[0].source, Source::Lease);
    }
    assert_eq!(
        store.takes.load(Ordering::SeqCst),
        after_first_refusal,
        "known refusals went to the store"
    );
    assert_eq!(store_count(store.inner(), &clock, 1_000).await, 1_000);
}

/// Four instances on one store, each holding a lease at the window's end: no unit of a
/// window is spent in the next (the lease ends with its window), and each window admits
/// exactly the limit.
#[tokio::test]
async fn a_lease_ends_with_its_window() {
    let clock = clock();
    let store = memory();
    let instances: Vec<_> = (0..4)
        .map(|_| {
            limiter(
                store.clone(),
                &clock,
                vec![leased(100, Lease::new().units(7))],
            )
        })
        .collect();
    for window in 0..3 {
        let mut admitted = 0;
        for round in 0..60 {
            for l in &instances {
                let v = l.check("hot", &KEY).await.expect("valid");
                admitted += u64::from(v.outcome() == Outcome::Allowed);
            }
            if round % 10 == 9 {
                clock.advance(Duration::from_secs(5));
            }
        }
        assert_eq!(admitted, 100, "window {window}");
        clock.advance(Duration::from_secs(30)); // to the next window's start
        assert!(instances.iter().all(|l| l.leased_units() <= 7));
    }
}

/// Units an idle instance holds go back when its lease expires, and another instance can
/// then spend them: nothing lost, nothing doubled.
#[tokio::test]
async fn expired_leases_go_back_and_are_spent_elsewhere() {
    let clock = clock();
    let store = memory();
    let lease = Lease::new().units(5).ttl(Duration::from_secs(1));
    let a = limiter(store.clone(), &clock, vec![leased(20, lease)]);
    let b = limiter(store.clone(), &clock, vec![leased(20, lease)]);
    assert_eq!(
        a.check("hot", &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    assert_eq!(a.leased_units(), 5);
    let mut admitted_b = 0;
    for _ in 0..30 {
        admitted_b +=
            u64::from(b.check("hot", &KEY).await.expect("valid").outcome() == Outcome::Allowed);
    }
    assert_eq!(admitted_b, 14, "20 − a's 6");
    assert_eq!(store_count(&store, &clock, 20).await, 20);
    clock.advance(Duration::from_secs(1));
    assert_eq!(a.return_expired_leases().await.expect("memory"), 5);
    assert_eq!(a.leased_units(), 0);
    assert_eq!(store_count(&store, &clock, 20).await, 15);
    for _ in 0..30 {
        admitted_b +=
            u64::from(b.check("hot", &KEY).await.expect("valid").outcome() == Outcome::Allowed);
    }
    assert_eq!(admitted_b, 19, "a's 5 unspent units were spent by b");
    assert_eq!(store_count(&store, &clock, 20).await, 20);
}

/// A reload or shutdown gives back every unspent unit at once; units given back to a window
/// that has ended are dropped by the store.
#[tokio::test]
async fn return_leases_gives_back_unspent_units() {
    let clock = clock();
    let store = memory();
    let l = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10))],
    );
    for _ in 0..3 {
        assert_eq!(
            l.check("hot", &KEY).await.expect("valid").outcome(),
            Outcome::Allowed
        );
    }
    let held = l.leased_units();
    assert!(held > 0);
    assert_eq!(store_count(&store, &clock, 100).await, 3 + held);
    assert_eq!(l.return_leases().await.expect("memory"), held);
    assert_eq!(store_count(&store, &clock, 100).await, 3);
    assert_eq!(l.leased_units(), 0);

    // Taken in one window, given back in the next: nothing changes there. (On a limiter of
    // its own: one whose leases were given back holds none again.)
    let first = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10))],
    );
    let _ = first.check("hot", &KEY).await.expect("valid");
    assert!(first.leased_units() > 0, "a lease in the first window");
    clock.advance(Duration::from_secs(60));
    let other = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10))],
    );
    let _ = other.check("hot", &KEY).await.expect("valid");
    let before = store_count(&store, &clock, 100).await;
    assert!(first.return_leases().await.expect("memory") > 0);
    assert_eq!(store_count(&store, &clock, 100).await, before);
}

/// A request served by another's take, whose leases are given back before it collects its
/// answer (a reload at that moment): it is admitted once, from that take. (It found its entry
/// gone and took its cost from the store again: the store counted it twice.)
#[tokio::test]
async fn a_waiter_served_before_the_leases_go_back_is_charged_once() {
    let (clock, store, l) = held_takes();
    let taker = {
        let l = Arc::clone(&l);
        tokio::spawn(async move { l.check("hot", &KEY).await.expect("valid").outcome() })
    };
    while store.takes.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // Polled by hand: it waits for the take, and runs again only when awaited below.
    let mut waiter = std::pin::pin!(l.check("hot", &KEY));
    let waiting = std::future::poll_fn(|cx| Poll::Ready(waiter.as_mut().poll(cx).is_pending()));
    assert!(waiting.await, "it waits for the take in flight");
    store.open.store(true, Ordering::SeqCst);
    assert_eq!(taker.await.expect("task"), Outcome::Allowed);
    assert_eq!(l.leased_units(), 49, "51 taken, one spent, one served");
    let returned = l.return_leases().await.expect("memory");
    assert_eq!(returned, 49);
    assert_eq!(waiter.await.expect("valid").outcome(), Outcome::Allowed);
    // One take for both, and the give-back: the waiter took nothing of its own.
    assert_eq!(store.takes.load(Ordering::SeqCst), 2);
    assert_eq!(
        store_count(store.inner(), &clock, 1_000).await,
        2,
        "two admitted, {returned} given back"
    );
}

/// A limiter whose leases were given back decides its lease-mode limits as exact ones, all
/// or nothing with the others: a request refused by one limit charges no other. (Taken entry
/// by entry, the refused requests each left a unit on the limit that passed.)
#[tokio::test]
async fn a_limiter_whose_leases_went_back_decides_all_or_nothing() {
    let clock = clock();
    let store = counting(memory());
    let small = Limit::new(
        "small",
        Algorithm::FixedWindow,
        Quota::per_minute(5).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .and_then(|l| l.lease(Lease::new().units(2)))
    .expect("valid");
    let l = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10)), small],
    );
    assert_eq!(
        l.check("hot", &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    l.return_leases().await.expect("memory");
    assert_eq!(store_count(store.inner(), &clock, 100).await, 1);
    for _ in 0..5 {
        let v = l.check("small", &KEY).await.expect("valid");
        assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
    }
    for _ in 0..10 {
        let v = l.check_all(&["hot", "small"], &KEY).await.expect("valid");
        assert!(matches!(v.outcome(), Outcome::Limited { .. }), "{v:?}");
    }
    assert_eq!(
        store_count(store.inner(), &clock, 100).await,
        1,
        "the refused requests charged nothing"
    );
    assert_eq!(l.leased_units(), 0, "and hold nothing");
}

/// With the store down, units in hand keep being handed out; then the limit's policy.
#[tokio::test]
async fn held_units_outlive_a_store_failure_then_the_policy_applies() {
    let clock = clock();
    let store = FailingStore::new(memory());
    let limit = leased(100, Lease::new().units(5)).on_store_error(OnStoreError::Deny);
    let l = limiter(store.clone(), &clock, vec![limit]);
    assert_eq!(
        l.check("hot", &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    store.set_down(true);
    for _ in 0..5 {
        let v = l.check("hot", &KEY).await.expect("valid");
        assert_eq!(v.outcome(), Outcome::Allowed);
        assert_eq!(v.decisions()[0].source, Source::Lease);
    }
    let v = l.check("hot", &KEY).await.expect("valid");
    assert!(matches!(v.outcome(), Outcome::Unavailable { .. }), "{v:?}");
}

/// An exact limit of one a minute, beside a lease-mode one.
fn strict() -> Limit {
    Limit::new(
        "strict",
        Algorithm::Gcra,
        Quota::per_minute(1).expect("valid"),
    )
    .expect("valid")
}

/// All or nothing: a request refused by its other (exact) limit spends nothing of the
/// lease.
#[tokio::test]
async fn a_refusal_by_another_limit_refunds_the_lease() {
    let clock = clock();
    let store = counting(memory());
    let exact = strict();
    let l = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10)), exact],
    );
    let both = ["hot", "strict"];
    assert_eq!(
        l.check_all(&both, &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    let held = l.leased_units();
    let v = l.check_all(&both, &KEY).await.expect("valid");
    assert!(matches!(v.outcome(), Outcome::Limited { .. }), "{v:?}");
    assert_eq!(
        l.leased_units(),
        held,
        "the refused request's unit came back"
    );
    assert_eq!(store_count(store.inner(), &clock, 100).await, 1 + held);
}

/// A request given up while its exact limit's store call is under way (a client gone, a
/// timeout firing) gives the unit it spent from the lease back: unanswered, it charged
/// nothing, as the same request without a lease.
#[tokio::test]
async fn a_request_given_up_during_its_exact_call_refunds_the_lease() {
    let clock = clock();
    let store = counting(memory());
    let wide = Limit::new(
        "wide",
        Algorithm::FixedWindow,
        Quota::per_minute(1_000).expect("valid"),
    )
    .expect("valid");
    let l = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10)), wide],
    );
    let both = ["hot", "wide"];
    assert_eq!(
        l.check_all(&both, &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    let held = l.leased_units();
    assert!(held > 0, "a lease is held: {held}");
    store.decides_open.store(false, Ordering::SeqCst);
    let given_up = at_most(l.check_all(&both, &KEY), 20).await;
    assert!(given_up.is_none(), "the exact call never answered");
    assert_eq!(
        store.decides.load(Ordering::SeqCst),
        2,
        "the second request reached its exact call"
    );
    assert_eq!(
        l.leased_units(),
        held,
        "the given-up request's unit came back"
    );
    store.decides_open.store(true, Ordering::SeqCst);
    l.return_leases().await.expect("given back");
    assert_eq!(store_count(store.inner(), &clock, 100).await, 1);
}

/// The same while a second lease-mode limit's take is under way: the first limit's unit
/// comes back.
#[tokio::test]
async fn a_request_given_up_during_another_limits_take_refunds_the_lease() {
    let clock = clock();
    let store = counting(memory());
    let cold = Limit::new(
        "cold",
        Algorithm::FixedWindow,
        Quota::per_minute(100).expect("valid"),
    )
    .and_then(|l| l.lease(Lease::new().units(10)))
    .expect("valid");
    let l = limiter(
        store.clone(),
        &clock,
        vec![leased(100, Lease::new().units(10)), cold],
    );
    assert_eq!(
        l.check("hot", &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    let held = l.leased_units();
    store.open.store(false, Ordering::SeqCst);
    let given_up = at_most(l.check_all(&["hot", "cold"], &KEY), 20).await;
    assert!(given_up.is_none(), "the take never answered");
    assert_eq!(
        store.takes.load(Ordering::SeqCst),
        2,
        "cold's take was made"
    );
    assert_eq!(l.leased_units(), held, "hot's unit came back");
}

/// A take in flight when the limiter's leases are given back (a reload swapping the limiter,
/// while a request still runs on the old one): its request is admitted, and what the take got
/// beyond it goes back to the store; a request after that takes exactly its cost and holds
/// nothing. (The take's 49 other units stayed counted in a tier no one swept: an audit's
/// reloads under load lost 1 194 units of 60 000.)
#[tokio::test]
async fn a_take_in_flight_when_the_leases_go_back_gives_its_rest_back() {
    let (clock, store, l) = held_takes();
    let request = {
        let l = Arc::clone(&l);
        tokio::spawn(async move { l.check("hot", &KEY).await.expect("valid").outcome() })
    };
    while store.takes.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        l.return_leases().await.expect("given back"),
        0,
        "none held yet"
    );
    store.open.store(true, Ordering::SeqCst);
    assert_eq!(request.await.expect("task"), Outcome::Allowed);
    assert_eq!(l.leased_units(), 0);
    assert_eq!(
        store_count(store.inner(), &clock, 1_000).await,
        1,
        "the take's other units went back"
    );
    let v = l.check("hot", &KEY).await.expect("valid");
    assert_eq!(v.outcome(), Outcome::Allowed);
    assert_eq!(l.leased_units(), 0, "a closed tier holds nothing");
    assert_eq!(store_count(store.inner(), &clock, 1_000).await, 2);
}

/// A limiter with a lease of 50 on a limit of 1 000 a minute, on a counting memory store whose
/// takes wait until `open` is set.
fn held_takes() -> (
    FakeClock,
    Counting<MemoryStore>,
    Arc<Limiter<Counting<MemoryStore>>>,
) {
    let clock = clock();
    let store = counting(memory());
    store.open.store(false, Ordering::SeqCst);
    let l = Arc::new(limiter(
        store.clone(),
        &clock,
        vec![leased(1_000, Lease::new().units(50))],
    ));
    (clock, store, l)
}

/// Requests arriving while a take is in flight wait for it instead of calling the store.
#[tokio::test]
async fn concurrent_requests_share_one_take() {
    let (_clock, store, l) = held_takes();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let l = Arc::clone(&l);
            tokio::spawn(async move { l.check("hot", &KEY).await.expect("valid").outcome() })
        })
        .collect();
    while store.takes.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    store.open.store(true, Ordering::SeqCst);
    for t in tasks {
        assert_eq!(t.await.expect("task"), Outcome::Allowed);
    }
    assert_eq!(
        store.takes.load(Ordering::SeqCst),
        1,
        "one take for 20 requests"
    );
    assert_eq!(l.leased_units(), 50 - 19);
}

/// A limiter with a lease of `k` on a limit of a million a minute, on a counting memory store
/// that yields `round_trip` times before each take, as a store across a network would.
fn far_store(
    round_trip: usize,
    k: u64,
) -> (
    FakeClock,
    Counting<MemoryStore>,
    Arc<Limiter<Counting<MemoryStore>>>,
) {
    let clock = clock();
    let mut store = counting(memory());
    store.round_trip = round_trip;
    let l = Arc::new(limiter(
        store.clone(),
        &clock,
        vec![leased(1_000_000, Lease::new().units(k))],
    ));
    (clock, store, l)
}

/// Tasks that check in a tight loop (a local spend never yields) on one thread: the requests
/// that waited for a take are served from it before the task that made it can spend the
/// rest, so nobody waits in vain and takes alone. Still one take per about `k` decisions.
#[tokio::test(flavor = "current_thread")]
async fn tight_loops_share_each_take() {
    const TASKS: usize = 16;
    const CHECKS: usize = 500;
    let (clock, store, l) = far_store(2, 100);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let l = Arc::clone(&l);
            tokio::spawn(async move {
                for _ in 0..CHECKS {
                    let v = l.check("hot", &KEY).await.expect("valid");
                    assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let takes = store.takes.load(Ordering::SeqCst);
    let decisions = TASKS * CHECKS;
    assert!(
        takes <= decisions / 100 + TASKS,
        "{takes} takes for {decisions} decisions at k = 100"
    );
    assert_eq!(
        store_count(store.inner(), &clock, 1_000_000).await,
        decisions as u64 + l.leased_units(),
        "what the store counts is what was admitted and what is held"
    );
}

/// A request that waited for a take, was served from it, and was dropped before it ran again
/// (a timeout, a client gone) gives its units back to the lease: none is lost.
#[tokio::test(flavor = "current_thread")]
async fn a_served_waiter_dropped_gives_its_units_back() {
    let (clock, store, l) = held_takes();
    let taker = {
        let l = Arc::clone(&l);
        tokio::spawn(async move { l.check("hot", &KEY).await.expect("valid").outcome() })
    };
    while store.takes.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let mut waiter = Box::pin(l.check("hot", &KEY));
    let first = std::future::poll_fn(|cx| Poll::Ready(waiter.as_mut().poll(cx))).await;
    assert!(first.is_pending(), "it waits for the take in flight");
    store.open.store(true, Ordering::SeqCst);
    assert_eq!(taker.await.expect("task"), Outcome::Allowed);
    assert_eq!(
        l.leased_units(),
        50 - 1,
        "the take served the waiter: its unit is spent"
    );
    drop(waiter);
    assert_eq!(l.leased_units(), 50, "the dropped waiter's unit is back");
    assert_eq!(store.takes.load(Ordering::SeqCst), 1);
    assert_eq!(store_count(store.inner(), &clock, 1_000).await, 1 + 50);
}

/// Many tasks on four instances (real threads) hammering one key: the store never counts
/// more than the limit, admissions add up to the limit exactly, every instance holds at
/// most k at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_on_four_instances_admit_the_limit() {
    let clock = clock();
    let store = memory();
    let k = 25;
    let instances: Vec<_> = (0..4)
        .map(|_| {
            Arc::new(limiter(
                store.clone(),
                &clock,
                vec![leased(2_000, Lease::new().units(k))],
            ))
        })
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let l = Arc::clone(&instances[i % 4]);
            let admitted = Arc::clone(&admitted);
            tokio::spawn(async move {
                for _ in 0..200 {
                    if l.check("hot", &KEY).await.expect("valid").outcome() == Outcome::Allowed {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let admitted = admitted.load(Ordering::SeqCst);
    assert!(admitted <= 2_000 + 4 * k, "{admitted} admitted");
    assert!(admitted >= 2_000 - 4 * k, "{admitted} admitted");
    // Exact accounting: every unit the store counts was admitted or is still held.
    let held: u64 = instances.iter().map(|l| l.leased_units()).sum();
    assert_eq!(store_count(&store, &clock, 2_000).await, 2_000);
    assert_eq!(admitted + held, 2_000, "{admitted} admitted, {held} held");
    for l in &instances {
        assert!(l.leased_units() <= k);
    }
}

/// Polls `fut` at most `polls` times; woken once more, drops it without polling it: a caller
/// that gives up (a timeout firing, a client gone) whatever woke it, without a timer.
async fn at_most<F: Future>(fut: F, polls: usize) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut left = polls;
    std::future::poll_fn(|cx| {
        if left == 0 {
            return Poll::Ready(None);
        }
        left -= 1;
        fut.as_mut().poll(cx).map(Some)
    })
    .await
}

/// Requests given up at every stage (waiting for a take, served by it but not yet back,
/// making a take) on real threads: no unit is lost or made up. Everything the store counts
/// was admitted or is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_given_up_anywhere_lose_no_units() {
    // The store yields before it counts: a take given up during those yields counts nothing.
    let (clock, store, l) = far_store(3, 20);
    let admitted = Arc::new(AtomicU64::new(0));
    let given_up = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let (l, admitted, given_up) =
                (Arc::clone(&l), Arc::clone(&admitted), Arc::clone(&given_up));
            tokio::spawn(async move {
                for i in 0..300 {
                    match at_most(l.check("hot", &KEY), (t + i) % 5).await {
                        Some(v) => {
                            let v = v.expect("valid");
                            assert_eq!(v.outcome(), Outcome::Allowed, "limit never reached");
                            admitted.fetch_add(1, Ordering::SeqCst);
                        }
                        None => {
                            given_up.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let (admitted, given_up) = (
        admitted.load(Ordering::SeqCst),
        given_up.load(Ordering::SeqCst),
    );
    assert!(
        admitted > 1_000 && given_up > 1_000,
        "both happened: {admitted} admitted, {given_up} given up"
    );
    let held = l.leased_units();
    assert_eq!(
        store_count(store.inner(), &clock, 1_000_000).await,
        admitted + held,
        "{admitted} admitted, {held} held"
    );
}

/// Without a fixed k, the lease grows with the observed rate up to limit ÷ 16.
#[tokio::test]
async fn automatic_k_follows_the_rate() {
    let clock = clock();
    let store = counting(memory());
    let l = limiter(store.clone(), &clock, vec![leased(16_000, Lease::new())]);
    for _ in 0..8_000 {
        clock.advance(Duration::from_micros(100)); // 10 000 per second
        assert_eq!(
            l.check("hot", &KEY).await.expect("valid").outcome(),
            Outcome::Allowed
        );
    }
    let takes = store.takes.load(Ordering::SeqCst);
    assert!(
        takes <= 20,
        "{takes} takes: k did not grow to 1000 (16 000 ÷ 16)"
    );
    assert!(l.leased_units() <= 1_000);
    assert_eq!(Lease::new().units_for(16_000, 0.0), 1);
    assert_eq!(Lease::new().units_for(16_000, 300.0), 300);
    assert_eq!(Lease::new().units_for(16_000, 1e9), 1_000);
}

/// `tollgate_lease_overshoot_units{limit}` follows the units held (taken, spent, returned);
/// `tollgate_lease_takes_total` counts the store calls.
#[test]
fn the_overshoot_gauge_is_the_units_held() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // A debugging snapshot drains what it reads (counters and gauges back to 0): the
    // totals are summed over snapshots.
    let gauge = std::cell::Cell::new(0.0);
    let takes = std::cell::Cell::new(0);
    let read = || {
        for (k, _, _, v) in snapshotter.snapshot().into_vec() {
            match (k.key().name(), v) {
                ("tollgate_lease_overshoot_units", DebugValue::Gauge(g)) => {
                    gauge.set(gauge.get() + g.into_inner());
                }
                ("tollgate_lease_takes_total", DebugValue::Counter(n)) => {
                    takes.set(takes.get() + n);
                }
                _ => {}
            }
        }
        (Some(gauge.get()), takes.get())
    };
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let clock = clock();
            let l = limiter(memory(), &clock, vec![leased(100, Lease::new().units(10))]);
            for _ in 0..7 {
                let _ = l.check("hot", &KEY).await.expect("valid");
            }
            assert_eq!(l.leased_units(), 4);
            let (held, first) = read();
            assert_eq!(held, Some(4.0));
            assert_eq!(first, 1);
            for _ in 0..5 {
                let _ = l.check("hot", &KEY).await.expect("valid");
            }
            let (held, both) = read();
            assert_eq!(held, Some(l.leased_units() as f64));
            assert_eq!(both, 2, "two takes for 12 checks at k = 10");
            l.return_leases().await.expect("memory");
            assert_eq!(read().0, Some(0.0));
        });
    });
}

/// When the take requests waited for fails, they apply the failure policy at once instead
/// of calling the store in turn (each would wait out the store's timeout again).
#[tokio::test]
async fn a_failed_take_answers_its_waiters_by_policy() {
    let clock = clock();
    let failing = FailingStore::new(memory());
    let store = counting(failing.clone());
    store.open.store(false, Ordering::SeqCst);
    let limit = leased(1_000, Lease::new().units(50)).on_store_error(OnStoreError::Deny);
    let l = Arc::new(limiter(store.clone(), &clock, vec![limit]));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let l = Arc::clone(&l);
            tokio::spawn(async move { l.check("hot", &KEY).await.expect("valid").outcome() })
        })
        .collect();
    while store.takes.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    failing.set_down(true);
    store.open.store(true, Ordering::SeqCst);
    for t in tasks {
        let outcome = t.await.expect("task");
        assert!(
            matches!(outcome, Outcome::Unavailable { .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(
        store.takes.load(Ordering::SeqCst),
        1,
        "the waiters called the store"
    );
    // The next request tries the store again.
    failing.set_down(false);
    assert_eq!(
        l.check("hot", &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
}

/// A request topping up counts on the units held beside what it takes: they are set aside for
/// it during the take. Two instances (k = 4 and k = 3) on a limit of 10, the store one unit
/// short of spent; on the first, a check of 5 (4 held + 1 taken) and a check of 4 race. The
/// second spent the 4 held while the first's take was in flight, and the first was admitted
/// whole on its 1 unit: 14 admitted in a window of 10. Now the window admits 10.
#[tokio::test]
async fn units_counted_on_during_a_take_are_not_spent_twice() {
    let clock = clock();
    let mut store = counting(memory());
    store.round_trip = 1;
    let one = limiter(
        store.clone(),
        &clock,
        vec![leased(10, Lease::new().units(4))],
    );
    let two = limiter(
        store.clone(),
        &clock,
        vec![leased(10, Lease::new().units(3))],
    );
    let admitted = |outcome: Outcome, cost: u64| if outcome == Outcome::Allowed { cost } else { 0 };
    let mut total = 0;
    for l in [&one, &two] {
        let v = l.check_n("hot", &KEY, 1).await.expect("valid");
        total += admitted(v.outcome(), 1);
    }
    assert_eq!((total, one.leased_units(), two.leased_units()), (2, 4, 3));
    let (a, b) = tokio::join!(one.check_n("hot", &KEY, 5), one.check_n("hot", &KEY, 4));
    total += admitted(a.expect("valid").outcome(), 5) + admitted(b.expect("valid").outcome(), 4);
    while two.leased_units() > 0 {
        let v = two.check_n("hot", &KEY, 1).await.expect("valid");
        total += admitted(v.outcome(), 1);
    }
    total += one.leased_units();
    assert!(total <= 10, "{total} admitted or held in a window of 10");
    assert_eq!(total, 10, "every unit of the window admitted or held");
}

/// All or nothing across a window's end: a request spent a unit of the lease, then waited
/// for its other (exact) limit, which refused it after the window had turned and the lease
/// had been taken anew. Its unit belongs to the old window; given back to the new window's
/// lease, the instance handed out one unit more than the store granted it: 6 admitted in a
/// window of 5. It is now lost to the old window instead.
#[tokio::test]
async fn a_refund_after_the_window_turned_is_not_spent_in_the_new_one() {
    let clock = clock();
    let store = counting(memory());
    let exact = strict();
    let l = Arc::new(limiter(
        store.clone(),
        &clock,
        vec![leased(5, Lease::new().units(5)), exact],
    ));
    let both = ["hot", "strict"];
    assert_eq!(
        l.check_all(&both, &KEY).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    assert_eq!(l.leased_units(), 4, "the whole window taken, one spent");
    // The next request spends a unit of the lease, then waits for "strict" (spent).
    store.decides_open.store(false, Ordering::SeqCst);
    let decides = store.decides.load(Ordering::SeqCst);
    let refused = {
        let l = Arc::clone(&l);
        tokio::spawn(async move { l.check_all(&both, &KEY).await.expect("valid").outcome() })
    };
    while store.decides.load(Ordering::SeqCst) == decides {
        tokio::task::yield_now().await;
    }
    // Meanwhile the window turns, and another request takes the new window's lease.
    clock.advance(Duration::from_secs(60));
    store.decides_open.store(true, Ordering::SeqCst);
    let mut admitted = 0;
    let first = l.check("hot", &KEY).await.expect("valid").outcome();
    admitted += u64::from(first == Outcome::Allowed);
    assert!(matches!(
        refused.await.expect("task"),
        Outcome::Limited { .. }
    ));
    while l.check("hot", &KEY).await.expect("valid").outcome() == Outcome::Allowed {
        admitted += 1;
        assert!(admitted <= 10, "runaway");
    }
    assert_eq!(admitted, 5, "the new window admits its limit, no more");
}
