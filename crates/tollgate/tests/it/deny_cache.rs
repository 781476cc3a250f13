//! The exact local deny cache: refusals answered without a store call, never wrongly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    Algorithm, FakeClock, Limit, Limiter, MemoryStore, OnStoreError, Op, Outcome, Quota, Request,
    Source, Store, Timestamp,
};
use tollgate_testkit::{CountingStore, FailingStore};

/// A store counting its calls, and the count of its `decide` calls.
fn counting<S: Store>(inner: S) -> (CountingStore<S>, Arc<AtomicUsize>) {
    let store = CountingStore::new(inner);
    let calls = Arc::clone(&store.decides);
    (store, calls)
}

fn memory() -> MemoryStore {
    MemoryStore::builder().sweep_interval(None).build()
}

fn limit(name: &str, algorithm: Algorithm, per_minute: u64) -> Limit {
    Limit::new(
        name,
        algorithm,
        Quota::per_minute(per_minute).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid")
}

fn limiter<S: Store>(store: S, clock: &FakeClock, cache: usize, limits: Vec<Limit>) -> Limiter<S> {
    Limiter::builder(store)
        .clock(clock.clone())
        .deny_cache(cache)
        .limits(limits)
        .build()
        .expect("valid")
}

fn clock() -> FakeClock {
    FakeClock::new(Timestamp::from_millis(1_900_000_000_000))
}

/// After the first refusal, the same refusals cost no store call, with an exact
/// `retry_after`; at the refusal's end the store decides again and admits.
#[tokio::test]
async fn refusals_cost_no_store_call() {
    let clock = clock();
    let (store, calls) = counting(memory());
    let l = limiter(store, &clock, 1_000, vec![limit("api", Algorithm::Gcra, 2)]);
    let key = [("user", "abuser")];
    for _ in 0..2 {
        assert_eq!(
            l.check("api", &key).await.expect("valid").outcome(),
            Outcome::Allowed
        );
    }
    let first = l.check("api", &key).await.expect("valid");
    assert_eq!(
        first.outcome(),
        Outcome::Limited {
            retry_after: Duration::from_secs(30)
        }
    );
    assert_eq!(first.decisions()[0].source, Source::Store);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    for step in 1..=100u64 {
        clock.advance(Duration::from_millis(100));
        let v = l.check("api", &key).await.expect("valid");
        assert_eq!(
            v.outcome(),
            Outcome::Limited {
                retry_after: Duration::from_millis(30_000 - 100 * step)
            }
        );
        assert_eq!(v.decisions()[0].source, Source::DenyCache);
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "cached refusals reached the store"
    );
    clock.advance(Duration::from_millis(20_000)); // exactly the end of the refusal
    let v = l.check("api", &key).await.expect("valid");
    assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(l.deny_cache_len(), 0, "the expired refusal was dropped");
}

/// A smaller cost than the one refused is asked of the store: it may pass.
#[tokio::test]
async fn smaller_costs_go_to_the_store() {
    let clock = clock();
    let (store, calls) = counting(memory());
    let l = limiter(
        store,
        &clock,
        1_000,
        vec![limit("api", Algorithm::TokenBucket, 10)],
    );
    let key = [("user", "1")];
    assert_eq!(
        l.check_n("api", &key, 8).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    assert!(matches!(
        l.check_n("api", &key, 5).await.expect("valid").outcome(),
        Outcome::Limited { .. }
    ));
    let before = calls.load(Ordering::SeqCst);
    let v = l.check_n("api", &key, 2).await.expect("valid");
    assert_eq!(v.outcome(), Outcome::Allowed);
    assert_eq!(calls.load(Ordering::SeqCst), before + 1);
}

/// A reset through this limiter, or one heard from another instance, forgets the refusal.
#[tokio::test]
async fn resets_forget() {
    let clock = clock();
    let l = limiter(
        memory(),
        &clock,
        1_000,
        vec![limit("api", Algorithm::FixedWindow, 1)],
    );
    let key = [("user", "1")];
    assert_eq!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    assert!(matches!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Limited { .. }
    ));
    let request = l.prepare(&["api"], &key, 1).expect("valid");
    l.reset(&request).await.expect("reset");
    assert_eq!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );

    // Another instance resets the key in the shared store and says so.
    let other = limiter(
        l.store().clone(),
        &clock,
        0,
        vec![limit("api", Algorithm::FixedWindow, 1)],
    );
    assert!(matches!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Limited { .. }
    ));
    other.reset(&request_of(&other, &key)).await.expect("reset");
    let text = l.key("api", &key).expect("valid");
    assert!(l.forget_denial(text.as_str()));
    assert_eq!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
}

fn request_of<'a, S: Store>(l: &'a Limiter<S>, key: &[(&str, &str)]) -> Request<'a> {
    l.prepare(&["api"], key, 1).expect("valid")
}

/// One cached refusal refuses a multi-limit check, charging nothing; the other limit's
/// state is reported as it is.
#[tokio::test]
async fn multi_limit_checks_are_refused_whole() {
    let clock = clock();
    let (store, calls) = counting(memory());
    let l = limiter(
        store,
        &clock,
        1_000,
        vec![
            limit("user", Algorithm::SlidingLog, 1),
            limit("global", Algorithm::SlidingLog, 100),
        ],
    );
    let key = [("user", "1")];
    assert_eq!(
        l.check("user", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    assert!(matches!(
        l.check("user", &key).await.expect("valid").outcome(),
        Outcome::Limited { .. }
    ));
    let both = l.prepare(&["user", "global"], &key, 1).expect("valid");
    let before = calls.load(Ordering::SeqCst);
    for _ in 0..5 {
        let v = l.decide(&both, Op::Check).await;
        assert!(matches!(v.outcome(), Outcome::Limited { .. }), "{v:?}");
        assert_eq!(v.decisions()[0].source, Source::DenyCache);
        assert_eq!(v.decisions()[1].source, Source::Store);
        assert_eq!(v.decisions()[1].decision.remaining, 100, "global charged");
    }
    // Only the read-only peeks of "global" reached the store.
    assert_eq!(calls.load(Ordering::SeqCst), before + 5);
}

/// A refusal by a failure policy says nothing of the key: it is not cached.
#[tokio::test]
async fn policy_refusals_are_not_cached() {
    let clock = clock();
    let store = FailingStore::down();
    let l = limiter(
        store.clone(),
        &clock,
        1_000,
        vec![limit("api", Algorithm::Gcra, 5).on_store_error(OnStoreError::Deny)],
    );
    let key = [("user", "1")];
    assert!(matches!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Unavailable { .. }
    ));
    assert_eq!(l.deny_cache_len(), 0);
    store.set_down(false);
    assert_eq!(
        l.check("api", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingLog),
        Just(Algorithm::SlidingWindow { buckets: 6 }),
        Just(Algorithm::TokenBucket),
        Just(Algorithm::Gcra),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With the cache or without, every check is admitted or refused alike, with the same
    /// `retry_after`: the cache is exact.
    #[test]
    fn the_cache_changes_no_answer(
        a in algorithm(),
        steps in proptest::collection::vec((0u64..4_000, 1u64..=3, 0usize..2), 1..150),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(async {
            let clock = clock();
            let q = Quota::new(3, Duration::from_secs(6)).expect("valid");
            let make = |cache| {
                let l = Limit::new("p", a, q).expect("valid").keyed_by(["user"]).expect("valid");
                limiter(memory(), &clock, cache, vec![l])
            };
            let (with, without) = (make(1_000), make(0));
            for (advance_ms, cost, user) in steps {
                clock.advance(Duration::from_millis(advance_ms));
                let key = [("user", ["a", "b"][user])];
                let (x, y) = (
                    with.check_n("p", &key, cost).await.expect("valid"),
                    without.check_n("p", &key, cost).await.expect("valid"),
                );
                prop_assert_eq!(x.outcome(), y.outcome(), "{} {:?} {:?}", a, x, y);
            }
            Ok(())
        })?;
    }
}

/// A limit kept out of the cache (`Limit::deny_cache(false)`) is always decided by the store:
/// its refusals are neither remembered nor answered from what another limit of the same key
/// left behind (an Envoy limit override sharing a counter at another rate).
#[tokio::test]
async fn a_limit_kept_out_of_the_cache_always_asks_the_store() {
    let clock = clock();
    let (store, calls) = counting(memory());
    let l = limiter(
        store,
        &clock,
        1_000,
        vec![limit("api", Algorithm::FixedWindow, 2)],
    );
    let key = [("user", "a")];
    for _ in 0..2 {
        assert_eq!(
            l.check("api", &key).await.expect("valid").outcome(),
            Outcome::Allowed
        );
    }
    // The cached limit's refusal is remembered: the next one costs no store call.
    let first = l.check("api", &key).await.expect("valid");
    assert_eq!(first.decisions()[0].source, Source::Store);
    let again = l.check("api", &key).await.expect("valid");
    assert_eq!(again.decisions()[0].source, Source::DenyCache);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // The same name and key, 5 a minute, out of the cache: the store admits it (count 2 < 5),
    // though the cache holds a refusal for that key.
    let wider = limit("api", Algorithm::FixedWindow, 5).deny_cache(false);
    let request = l
        .prepare_with([tollgate::Ask::limit(&wider, &key)])
        .expect("valid");
    for _ in 0..3 {
        let v = l.decide(&request, Op::Check).await;
        assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
        assert_eq!(v.decisions()[0].source, Source::Store);
    }
    // Its own refusal (count 5) is not remembered: each one asks the store.
    let before = calls.load(Ordering::SeqCst);
    for _ in 0..2 {
        let v = l.decide(&request, Op::Check).await;
        assert_ne!(v.outcome(), Outcome::Allowed, "{v:?}");
        assert_eq!(v.decisions()[0].source, Source::Store);
    }
    assert_eq!(calls.load(Ordering::SeqCst), before + 2);
}
