//! The circuit breaker against a frozen Redis under steady traffic from many callers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Limiter, StoreErrorKind};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

use crate::common::{eventually, unique_namespace, unreachable_gcra};

/// Redis frozen (SIGSTOP) under 32 callers in a loop, started at staggered times: the calls
/// overlap (each fails a timeout after it started, when others have started since), and the
/// breaker still opens, within a few timeouts. It never did when every failure seen, counted
/// or not, moved the breaker's mark: every call had started before the last failure seen, so
/// none but the first counted, and every call waited out its timeout for the whole freeze.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_under_overlapping_calls_opens_the_breaker() {
    const TIMEOUT: Duration = Duration::from_millis(50);
    const CALLERS: u32 = 32;
    let redis = RedisServer::start();
    let store = RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        // Long enough that no probe runs (and fails, re-opening it) while the test looks.
        .circuit_breaker(5, Duration::from_secs(60))
        .build()
        .await
        .expect("connect");
    let limiter = Arc::new(
        Limiter::builder(store.clone())
            .namespace(unique_namespace("breaker-frozen"))
            .limit(unreachable_gcra("frozen"))
            .build()
            .expect("limiter"),
    );
    let v = limiter
        .check("frozen", &[("user", "0")])
        .await
        .expect("check");
    assert!(v.store_error().is_none(), "before the freeze: {v:?}");

    redis.pause();
    let frozen_at = Instant::now();
    let (stop, timed_out) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let tasks: Vec<_> = (0..CALLERS)
        .map(|t| {
            let (limiter, stop, timed_out) = (
                Arc::clone(&limiter),
                Arc::clone(&stop),
                Arc::clone(&timed_out),
            );
            tokio::spawn(async move {
                // Staggered over one timeout, so that the callers' calls overlap.
                tokio::time::sleep(TIMEOUT * t / CALLERS).await;
                let mut i = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let key = format!("{t}-{i}");
                    let v = limiter
                        .check("frozen", &[("user", key)])
                        .await
                        .expect("check");
                    match v.store_error() {
                        Some(StoreErrorKind::Timeout) => {
                            timed_out.fetch_add(1, Ordering::Relaxed);
                        }
                        // Open: refused at once; yield rather than spin.
                        Some(StoreErrorKind::CircuitOpen) => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        _ => {}
                    }
                }
            })
        })
        .collect();
    // Bounded polling. Expected after about five timeouts (one counted per timeout or so).
    let opened = eventually(Duration::from_secs(10), || store.circuit_open()).await;
    let took = frozen_at.elapsed();
    let timeouts = timed_out.load(Ordering::Relaxed);
    // Read before the thaw: the calls still waiting then succeed, which closes it.
    let cause = store.circuit_cause();
    stop.store(true, Ordering::Relaxed);
    redis.resume();
    for task in tasks {
        task.await.expect("task");
    }
    assert!(
        opened,
        "the breaker never opened in {took:?} of a freeze: {timeouts} calls timed out"
    );
    assert!(
        cause.as_deref().is_some_and(|c| c.starts_with("timeout")),
        "opened by {cause:?}"
    );
    eprintln!("opened {took:?} into the freeze, after {timeouts} timeouts");
}
