//! Differential test: the Lua scripts against the Rust rules. Seeded random call sequences
//! (costs above one, multi-limit requests with one cost or a cost per entry, peeks, time
//! jumps) go to a `MemoryStore` and a
//! `RedisStore` with the same explicit `now`; every decision must be identical, field by field.
//! Every other call (pacing, leases, resets, batches), on a clock that also goes back:
//! `differential_clock.rs`.

use std::time::Duration;

use tollgate::{
    Algorithm, Ask, Entry, Key, Limit, MemoryStore, Namespace, Op, Quota, Request, Store, Timestamp,
};

use tollgate_testkit::{Rng, awkward_limits};

use crate::common::{cluster_store, redis_store, unique_namespace};

/// Same sequence into both stores; every decision equal (single Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_decide_identically() {
    differential(redis_store().await).await;
}

/// The same on the cluster (every request's limits share a slot: one script per request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_decide_identically_on_a_cluster() {
    differential(cluster_store().await).await;
}

/// Costs of thousands of units (a sliding log then adds thousands of members in one script),
/// up to the largest sliding log (10 000 units).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_costs_decide_identically() {
    let redis = redis_store().await;
    let memory = MemoryStore::builder().sweep_interval(None).build();
    let ns = unique_namespace("large");
    let q = Quota::new(10_000, Duration::from_secs(60)).expect("valid");
    let mut now = 1_893_456_000_000_000_u64;
    for a in Algorithm::ALL {
        let limit = Limit::new(a.name(), a, q).expect("valid");
        let key = Key::new(&ns, &limit, &[("user", "big")]);
        for (step, cost) in [4_500_u64, 4_500, 2_500, 1_000, 10_000, 1]
            .into_iter()
            .enumerate()
        {
            now += 7_000_000;
            let request = Request::new([Entry::new(&limit, key.clone())], cost).expect("valid");
            let at = Timestamp::from_micros(now);
            let expected = memory.decide_at(&request, Op::Check, at).expect("room");
            let got = redis
                .decide(&request, Op::Check, Some(at))
                .await
                .unwrap_or_else(|e| panic!("{a} step {step} cost {cost}: redis failed: {e}"));
            assert_eq!(got, expected, "{a} step {step} cost {cost}");
        }
    }
}

async fn differential(redis: tollgate_redis::RedisStore) {
    let memory = MemoryStore::builder().sweep_interval(None).build();
    let ns: Namespace = unique_namespace("diff");
    let preparer = crate::coalesce::preparer(&ns);
    let limits = awkward_limits();
    let users = ["a", "b", "c"];
    for seed in [1_u64, 2, 3, 0xDEAD_BEEF] {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut now =
            1_893_456_000_000_000 + rng.below(1_000_000) + (seed % 1_000) * 10_000_000_000;
        for step in 0..600 {
            // Time: mostly small steps, sometimes none, sometimes a jump past every period.
            now += match rng.below(10) {
                0 => 0,
                1 => 2_000_000 + rng.below(5_000_000),
                2..=5 => rng.below(1_000),
                _ => rng.below(120_000),
            };
            let user = users[rng.below(users.len() as u64) as usize];
            // One to three distinct limits, keyed alike (one slot).
            let n = 1 + rng.below(3) as usize;
            let mut chosen: Vec<&Limit> = Vec::new();
            while chosen.len() < n {
                let l = &limits[rng.below(limits.len() as u64) as usize];
                if !chosen.iter().any(|c| c.name() == l.name()) {
                    chosen.push(l);
                }
            }
            let capacity = chosen
                .iter()
                .map(|l| l.capacity())
                .min()
                .expect("one limit");
            // One cost for every entry (mostly 1), or a cost per entry up to its own capacity.
            let costs: Vec<u64> = match rng.below(3) {
                0 => vec![1 + rng.below(capacity); n],
                1 => chosen.iter().map(|l| 1 + rng.below(l.capacity())).collect(),
                _ => vec![1; n],
            };
            let key = [("user", user)];
            let asks = chosen
                .iter()
                .zip(&costs)
                .map(|(&limit, &cost)| Ask::limit(limit, &key).cost(cost));
            let request = preparer.prepare_with(asks).expect("valid request");
            let at = Timestamp::from_micros(now);
            let peek = rng.below(5) == 0;
            let (expected, got) = if peek {
                (
                    memory
                        .decide_at(&request, Op::Peek, at)
                        .expect("a peek stores nothing"),
                    redis.decide(&request, Op::Peek, Some(at)).await,
                )
            } else {
                (
                    memory
                        .decide_at(&request, Op::Check, at)
                        .expect("memory store has room"),
                    redis.decide(&request, Op::Check, Some(at)).await,
                )
            };
            let got = got.unwrap_or_else(|e| panic!("seed {seed} step {step}: redis failed: {e}"));
            let names: Vec<&str> = chosen.iter().map(|l| l.name()).collect();
            assert_eq!(
                got,
                expected,
                "seed {seed} step {step}: {} {names:?} user {user} costs {costs:?} at {now}",
                if peek { "peek" } else { "check" }
            );
        }
    }
}
