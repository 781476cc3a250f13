//! The simulator's Redis experiments on a spawned `redis-server`: exact under real
//! concurrency, and the immortal key of the naive two-command fixed window next to
//! tollgate's script.

use std::time::Duration;

use tollgate::Algorithm;
use tollgate_replay::{Report, Scenario, SimOptions, simulate};
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

/// Every expectation of `report` met, and its `runs` runs on Redis each admitted exactly 100
/// with no store failure.
pub(super) fn every_run_on_redis_exact(report: &Report, runs: usize) {
    let on_redis: Vec<_> = report
        .expectations
        .iter()
        .filter(|e| e.expected.contains("on Redis"))
        .collect();
    assert_eq!(on_redis.len(), runs, "{:?}", report.expectations);
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
    every_run_on_redis_exact(&report, 4);
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

/// A replay decided on Redis too, with the log's time passed to the scripts: every
/// algorithm's answers (admitted, remaining, retry_after) are the memory store's, request by
/// request, over a log with refusals in every limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_on_redis_gives_the_memory_stores_answers() {
    use std::io::Cursor;
    use tollgate::{Limit, Quota};
    use tollgate_replay::{KeyMapping, LogOptions, replay_log};

    let server = RedisServer::start();
    let store = tollgate_redis::RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("connect");
    // Five users over two minutes, about 3 calls a second each, at uneven instants.
    let mut log = String::new();
    let mut x = 12_345_u64;
    for i in 0..1_800_u64 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let t = 1_800_000_000_000_000 + i * 66_000 + (x >> 40) % 50_000;
        log.push_str(&format!(
            "{{\"time\": {}.{:06}, \"user\": \"u{}\"}}\n",
            t / 1_000_000,
            t % 1_000_000,
            (x >> 20) % 5
        ));
    }
    let limits: Vec<Limit> = Algorithm::ALL
        .iter()
        .map(|a| {
            Limit::new(
                a.name(),
                *a,
                Quota::new(90, Duration::from_secs(60))
                    .expect("quota")
                    .with_burst(30)
                    .expect("burst"),
            )
            .expect("limit")
            .keyed_by(["user"])
            .expect("keyed")
        })
        .collect();
    let options = LogOptions {
        mapping: KeyMapping::parse(&["user=$user"]).expect("mapping"),
        redis: Some(store),
        ..LogOptions::default()
    };
    let report = replay_log(Cursor::new(log), "t", limits, &options, &mut |_| {})
        .await
        .expect("replay");
    assert_eq!(report.malformed, 0, "{:?}", report.malformed_examples);
    for l in &report.limits {
        assert!(
            l.denied() > 0 && l.admitted > 0,
            "{}: nothing to compare",
            l.name
        );
    }
    let agreement = report.expectations.last().expect("the Redis comparison");
    assert!(agreement.met, "{}: {:?}", agreement.measured, report.notes);
    assert_eq!(
        agreement.measured,
        "9000 decisions compared: 0 differ, 0 failed on Redis"
    );
    assert!(immortal_keys(&server).is_empty());
}

/// Pacing on Redis: the three ways run again through the Lua scripts (virtual time as the
/// client's clock), with the memory store's figures: the upstream never over its limit, no
/// idle slot, one store call per call sent when reserving; every key written has a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_on_redis_matches_the_memory_store() {
    let server = RedisServer::start();
    let mut options =
        SimOptions::algorithms(&[Algorithm::Gcra], 100, Duration::from_secs(60)).expect("options");
    options.workers = 10;
    options.redis = Some(server.url());
    let report = simulate(Scenario::Pacing, &options)
        .await
        .expect("simulate");
    let on_redis: Vec<_> = report
        .expectations
        .iter()
        .filter(|e| e.expected.contains("on Redis"))
        .collect();
    assert_eq!(on_redis.len(), 3, "{:?}", report.expectations);
    for e in &report.expectations {
        assert!(e.met, "expected {}, measured {}", e.expected, e.measured);
    }
    let by = |name: &str| {
        report
            .limits
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("{name} in the report"))
    };
    for way in ["reserve", "retry", "retry-jitter"] {
        let (memory, redis) = (by(way), by(&format!("{way}-on-redis")));
        assert_eq!(redis.admitted, 4 * 10 * 3, "{way}");
        assert_eq!(redis.admitted, memory.admitted, "{way}");
        assert_eq!(
            redis.max_in_any_period(),
            memory.max_in_any_period(),
            "{way}: the scripts pace as the memory store does"
        );
    }
    assert_eq!(
        by("reserve-on-redis").denied(),
        0,
        "a reservation is never refused here"
    );
    assert!(immortal_keys(&server).is_empty());
}
