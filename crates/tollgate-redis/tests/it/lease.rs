//! Lease mode on Redis: `lua/lease.lua` takes and gives back exactly like the memory store's
//! twin, never counts beyond the limit, leaves every key with a TTL; many tasks on four
//! limiters (four connections) hammering one key admit the limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{
    Algorithm, Key, Lease, LeaseTake, Limit, Limiter, MemoryStore, Op, Outcome, Quota, Store,
    Timestamp,
};

use tollgate_testkit::Rng;

use crate::common::{keys_without_ttl, redis_store, server, unique_namespace};

fn leased(per: Duration, limit: u64, k: u64) -> Limit {
    Limit::new(
        "hot",
        Algorithm::FixedWindow,
        Quota::new(limit, per).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .and_then(|l| l.lease(Lease::new().units(k)))
    .expect("valid")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Seeded random sequences of takes and give-backs on one key, on Redis and on the memory
/// store at the same instants: the same grants, step by step; the count never above the
/// limit; the key always with a TTL.
#[test]
fn redis_takes_like_the_memory_store() {
    let rt = runtime();
    let redis = rt.block_on(redis_store());
    let limit = Limit::new(
        "lease",
        Algorithm::FixedWindow,
        Quota::new(20, Duration::from_millis(500)).expect("valid"),
    )
    .expect("valid");
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let ns = unique_namespace("lease-diff");
        let key = Key::new(&ns, &limit, &[("k", "1")]);
        let memory = MemoryStore::builder().sweep_interval(None).build();
        let mut now = 1_893_456_000_000_000u64;
        let mut last_window = 0;
        for step in 0..40 {
            now += rng.below(200) * 1_000;
            let need = rng.below(6);
            let take = LeaseTake {
                limit: &limit,
                key: &key,
                want: rng.below(12).max(need),
                need,
                give_back: rng.below(8),
                give_back_window: last_window + 500_000 * rng.below(2),
            };
            let at = Some(Timestamp::from_micros(now));
            let r = rt.block_on(redis.take_lease(&take, at)).expect("redis");
            let m = rt.block_on(memory.take_lease(&take, at)).expect("memory");
            assert_eq!(r, m, "seed {seed} step {step}: {take:?}");
            assert!(r.remaining <= 20);
            last_window = r.window;
        }
        assert!(keys_without_ttl(server(), &format!("{}:*", ns.prefix())).is_empty());
    }
}

/// A take of more than is left grants what is left; fewer than `need` grants nothing and
/// writes nothing; a give-back to an ended window changes nothing.
#[test]
fn takes_never_exceed_the_limit() {
    let rt = runtime();
    let redis = rt.block_on(redis_store());
    let ns = unique_namespace("lease-take");
    let limit = leased(Duration::from_secs(60), 10, 5);
    let key = Key::new(&ns, &limit, &[("user", "1")]);
    let t0 = 1_893_456_000_000_000u64; // a minute's start
    let at = |s: u64| Some(Timestamp::from_micros(t0 + s * 1_000_000));
    let take = |want, need, give_back, window| LeaseTake {
        limit: &limit,
        key: &key,
        want,
        need,
        give_back,
        give_back_window: window,
    };
    let g = rt
        .block_on(redis.take_lease(&take(8, 1, 0, 0), at(0)))
        .expect("redis");
    assert_eq!((g.granted, g.remaining, g.window), (8, 2, t0));
    assert_eq!(g.valid_for, Duration::from_secs(60));
    let g = rt
        .block_on(redis.take_lease(&take(8, 1, 0, 0), at(10)))
        .expect("redis");
    assert_eq!((g.granted, g.remaining), (2, 0));
    assert_eq!(g.valid_for, Duration::from_secs(50));
    let g = rt
        .block_on(redis.take_lease(&take(8, 1, 0, 0), at(20)))
        .expect("redis");
    assert_eq!(
        (g.granted, g.retry_after),
        (0, Some(Duration::from_secs(40)))
    );
    // Give back 3 of the window's units, and take 2 in the same call.
    let g = rt
        .block_on(redis.take_lease(&take(2, 2, 3, t0), at(30)))
        .expect("redis");
    assert_eq!((g.granted, g.remaining), (2, 1));
    // Units of another window are not added to this one.
    let g = rt
        .block_on(redis.take_lease(&take(0, 0, 5, t0 - 60_000_000), at(31)))
        .expect("redis");
    assert_eq!(g.remaining, 1);
    // In the next window, the old window's give-back is dropped too.
    let g = rt
        .block_on(redis.take_lease(&take(0, 0, 5, t0), at(61)))
        .expect("redis");
    assert_eq!((g.granted, g.remaining, g.window), (0, 10, t0 + 60_000_000));
    assert!(keys_without_ttl(server(), &format!("{}:*", ns.prefix())).is_empty());
}

/// 4 limiters, each on its own connection, 16 tasks each, on Redis's own clock: every unit
/// Redis counts was admitted or is still held, admissions are within 4 × k of the limit,
/// and giving the leases back leaves Redis counting exactly what was admitted.
#[test]
fn many_tasks_on_four_limiters_admit_the_limit() {
    let rt = runtime();
    let k = 40;
    let limit_units = 3_000;
    let ns = unique_namespace("lease-tasks");
    let limiters: Vec<Arc<Limiter<_>>> = (0..4)
        .map(|_| {
            let store = rt.block_on(redis_store());
            Arc::new(
                Limiter::builder(store)
                    .namespace(ns.clone())
                    .limit(leased(Duration::from_secs(3_600), limit_units, k))
                    .build()
                    .expect("valid"),
            )
        })
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let l = Arc::clone(&limiters[i % 4]);
                let admitted = Arc::clone(&admitted);
                tokio::spawn(async move {
                    for _ in 0..80 {
                        let v = l.check("hot", &[("user", "hot")]).await.expect("valid");
                        if v.outcome() == Outcome::Allowed {
                            admitted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    let admitted = admitted.load(Ordering::SeqCst);
    let held: u64 = limiters.iter().map(|l| l.leased_units()).sum();
    assert!(limiters.iter().all(|l| l.leased_units() <= k));
    assert!(admitted <= limit_units + 4 * k, "{admitted}");
    assert!(admitted >= limit_units - 4 * k, "{admitted}");
    let peek = |l: &Limiter<tollgate_redis::RedisStore>| {
        let exact = Limiter::builder(l.store().clone())
            .namespace(ns.clone())
            .limit(
                Limit::new(
                    "hot",
                    Algorithm::FixedWindow,
                    Quota::new(limit_units, Duration::from_secs(3_600)).expect("valid"),
                )
                .and_then(|l| l.keyed_by(["user"]))
                .expect("valid"),
            )
            .build()
            .expect("valid");
        rt.block_on(async {
            let r = exact
                .prepare(&["hot"], &[("user", "hot")], 1)
                .expect("valid");
            limit_units - exact.decide(&r, Op::Peek).await.decision().remaining
        })
    };
    assert_eq!(
        peek(&limiters[0]),
        limit_units,
        "Redis never counts beyond the limit"
    );
    assert_eq!(
        admitted + held,
        limit_units,
        "{admitted} admitted, {held} held"
    );
    for l in &limiters {
        rt.block_on(l.return_leases()).expect("give back");
    }
    assert_eq!(peek(&limiters[0]), admitted);
    assert!(keys_without_ttl(server(), &format!("{}:*", ns.prefix())).is_empty());
}
