//! The simulator's Redis experiments on a spawned `redis-server`: exact under real
//! concurrency, and the immortal key of the naive two-command fixed window next to
//! tollgate's script.

use std::time::Duration;

use tollgate::Algorithm;
use tollgate_replay::{Scenario, SimOptions, simulate};
use tollgate_testkit::RedisServer;

/// Keys without an expiry on `server`.
fn immortal_keys(server: &RedisServer) -> Vec<String> {
    let mut con = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).expect("keys");
    keys.into_iter()
        .filter(|k| {
            redis::cmd("PTTL")
                .arg(k)
                .query::<i64>(&mut con)
                .expect("pttl")
                == -1
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_tasks_on_redis_get_exactly_the_limit() {
    let server = RedisServer::start();
    // Per hour, so that real time refills nothing of the smooth algorithms during the run.
    let mut options = SimOptions::algorithms(
        &[
            Algorithm::SlidingLog,
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::sliding_window(),
        ],
        100,
        Duration::from_secs(3_600),
    )
    .expect("options");
    options.redis = Some(server.url());
    let report = simulate(Scenario::Concurrent, &options)
        .await
        .expect("simulate");
    let on_redis: Vec<_> = report
        .expectations
        .iter()
        .filter(|e| e.expected.contains("on Redis"))
        .collect();
    assert_eq!(on_redis.len(), 4, "{:?}", report.expectations);
    for e in &report.expectations {
        assert!(e.met, "expected {}, measured {}", e.expected, e.measured);
    }
    for e in on_redis {
        assert!(
            e.measured.starts_with("100 admitted, 0 store failures"),
            "{}",
            e.measured
        );
    }
    assert!(immortal_keys(&server).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_window_leaves_an_immortal_key_and_tollgate_never_does() {
    let server = RedisServer::start();
    let mut options = SimOptions::limits(Vec::new());
    options.redis = Some(server.url());
    let report = simulate(Scenario::ImmortalKey, &options)
        .await
        .expect("simulate");
    let [naive, ours] = &report.expectations[..] else {
        panic!("two outcomes: {:?}", report.expectations)
    };
    assert!(naive.met && naive.measured.contains("TTL -1"), "{naive:?}");
    assert!(ours.met, "{ours:?}");
    // The naive key was deleted; what tollgate wrote has its TTL.
    assert!(immortal_keys(&server).is_empty());
}
