//! A reset on one instance reaches the other instances' deny caches through pub/sub.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, Outcome, Quota, Source};
use tollgate_redis::RedisStore;

use crate::common::{TEST_TIMEOUT, server, unique_namespace};

async fn instance(ns: &tollgate::Namespace) -> Arc<Limiter<RedisStore>> {
    let store = RedisStore::builder(server().url())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .expect("connect");
    let limit = Limit::new(
        "resets",
        Algorithm::FixedWindow,
        Quota::per_hour(1).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid");
    Arc::new(
        Limiter::builder(store)
            .namespace(ns.clone())
            .deny_cache(100)
            .limit(limit)
            .build()
            .expect("valid"),
    )
}

/// Instance A caches a refusal; instance B resets the key; A hears of it and admits again,
/// while an instance that does not listen keeps its cached refusal (the documented bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_reach_other_instances() {
    let ns = unique_namespace("resets");
    let (a, b, deaf) = (
        instance(&ns).await,
        instance(&ns).await,
        instance(&ns).await,
    );
    let listener = {
        let a = Arc::clone(&a);
        let store = RedisStore::connect(server().url()).await.expect("connect");
        store.listen_for_resets(ns.prefix(), move |key| {
            a.forget_denial(key);
        })
    };
    let key = [("user", "1")];
    assert_eq!(
        a.check("resets", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    for l in [&a, &deaf] {
        let v = l.check("resets", &key).await.expect("valid");
        assert!(matches!(v.outcome(), Outcome::Limited { .. }), "{v:?}");
        let v = l.check("resets", &key).await.expect("valid");
        assert_eq!(v.decisions()[0].source, Source::DenyCache, "cached: {v:?}");
    }

    // The subscription may take a moment to be in place: reset until A hears one.
    let request = b.prepare(&["resets"], &key, 1).expect("valid");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        b.reset(&request).await.expect("reset");
        if a.deny_cache_len() == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "A never heard of the reset");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        a.check("resets", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    let v = deaf.check("resets", &key).await.expect("valid");
    assert_eq!(
        v.decisions()[0].source,
        Source::DenyCache,
        "not listening: still cached"
    );
    listener.abort();
}

/// A callback that panics loses that notification, not the listener: the resets after it
/// still arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_callback_does_not_end_the_listener() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ns = unique_namespace("resets_panic");
    let b = instance(&ns).await;
    let heard = Arc::new(AtomicUsize::new(0));
    let listener = {
        let heard = Arc::clone(&heard);
        let store = RedisStore::connect(server().url()).await.expect("connect");
        store.listen_for_resets(ns.prefix(), move |_| {
            let n = heard.fetch_add(1, Ordering::SeqCst);
            assert_ne!(n, 0, "the first reset heard panics, on purpose");
        })
    };
    let request = b.prepare(&["resets"], &[("user", "1")], 1).expect("valid");
    // Reset until two are heard: the first (which panicked) and one after it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while heard.load(Ordering::SeqCst) < 2 {
        assert!(
            Instant::now() < deadline,
            "heard {} resets: the listener ended with the panic",
            heard.load(Ordering::SeqCst)
        );
        b.reset(&request).await.expect("reset");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!listener.is_finished(), "still listening");
    listener.abort();
}
