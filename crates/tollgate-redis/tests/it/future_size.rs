//! A decision's state stays small. A future is copied whole each time it moves (into its
//! caller's state, a timeout, a task), and a decision on Redis moves through several layers.
//! Before its rare paths were boxed (cross-slot requests, the second look a millisecond
//! later, reloading scripts after `NOSCRIPT`) and before the store's guard took the call by
//! pointer, the store's future was 6 560 bytes. A tenth of the benchmark client's CPU was
//! then `memcpy` (docs/benchmarks.md, "Smaller futures").

use tollgate::{Algorithm, Limit, Limiter, Op, Quota, Store};

use crate::common::{redis_store, unique_namespace};

/// The bounds, about 1.5× the sizes when they were set (1 344 and 2 224 bytes with rustc
/// 1.95; 1 224 and 1 560 since the layers that only awaited the next were removed from the
/// path, docs/architecture.md): room for a field or two, not for a rare path inlined again.
const STORE_BOUND: usize = 2_048;
const LIMITER_BOUND: usize = 3_328;

#[tokio::test]
async fn a_decision_on_redis_is_a_small_future() {
    let store = redis_store().await;
    let limit = Limit::new(
        "small",
        Algorithm::Gcra,
        Quota::per_second(10).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid");
    let limiter = Limiter::builder(store.clone())
        .namespace(unique_namespace("future-size"))
        .limit(limit)
        .build()
        .expect("valid");
    let request = limiter
        .prepare(&["small"], &[("user", "1")], 1)
        .expect("valid");

    let call = Store::decide(&store, &request, Op::Check, None);
    let store_size = std::mem::size_of_val(&call);
    drop(call);
    assert!(
        store_size <= STORE_BOUND,
        "RedisStore::decide's future is {store_size} bytes (bound {STORE_BOUND}): a rare path \
         is inline again, or a future is passed by value through an async fn"
    );

    let decide = limiter.decide(&request, Op::Check);
    let limiter_size = std::mem::size_of_val(&decide);
    drop(decide);
    assert!(
        limiter_size <= LIMITER_BOUND,
        "Limiter<RedisStore>::decide's future is {limiter_size} bytes (bound {LIMITER_BOUND})"
    );
    // The futures measured are the ones that decide: the same call, awaited, admits.
    let verdict = limiter.decide(&request, Op::Check).await;
    assert_eq!(verdict.outcome(), tollgate::Outcome::Allowed, "{verdict:?}");
}
