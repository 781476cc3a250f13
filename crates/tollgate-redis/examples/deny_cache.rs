//! Benchmark of the exact deny cache — not a test: it measures and prints a Markdown section
//! for `docs/benchmarks.md`.
//!
//! `cargo run --release -p tollgate-redis --features bench --example deny_cache` spawns its own `redis-server`
//! and, in one run so that the figures compare, hammers **one abusive key** (a limit of
//! 100/min, GCRA, already used up) from 64 concurrent tasks through a `Limiter` on
//! `RedisStore`, alternating, three rounds:
//! - before the local tier: no deny cache, no coalescing, Nagle on, and that code's GCRA
//!   script (`examples/bench/before_gcra.lua`): every refusal is one script call, as in the
//!   code before the cache;
//! - coalescing alone: no deny cache (concurrent refusals share script calls);
//! - the defaults: deny cache and coalescing.
//!
//! For scale, Redis's own client runs the same refusal right after each run: `redis-benchmark
//! -P 16 -c 50` on the single-entry GCRA script and one used-up key. It reports refusals/s, their ratios, and the scripts Redis ran per refusal (`INFO
//! commandstats`, `cmdstat_evalsha` calls, before and after each run).
//!
//! `TOLLGATE_BENCH_SECS` sets the seconds per run (default 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, Outcome, Quota};
use tollgate_redis::{RedisStore, ScriptCall};
use tollgate_testkit::{RedisBenchmark, RedisServer};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TASKS: usize = 64;

const ROUNDS: usize = 3;

/// GCRA's single-entry script before the local tier (see `examples/bench/before_gcra.lua`).
const BEFORE_GCRA: &str = include_str!("bench/before_gcra.lua");

fn main() -> BenchResult<()> {
    let secs: u64 = std::env::var("TOLLGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let server = RedisServer::start();
    // One worker thread, as in the store benchmark: Redis keeps the other core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // redis-benchmark on what each refusal without the cache runs: the single-entry script,
    // one key, used up by a first short run (its first 100 calls are admitted).
    let call = ScriptCall::check(&abused()?, 1);
    let args = RedisBenchmark::evalsha(&server, call.source, call.sha, "rb:abuser", call.args);
    let use_up = RedisBenchmark {
        pipeline: 1,
        clients: 1,
        requests: 200,
    };
    use_up.run(&server, &args, 1)?;
    let mut rows = Vec::new();
    for round in 1..=ROUNDS {
        for (label, cache, coalesce) in [
            ("before the local tier", 0, false),
            ("coalescing alone", 0, true),
            ("the defaults (deny cache)", 10_000, true),
        ] {
            let (refused, elapsed, scripts) =
                rt.block_on(run(&server, (cache, coalesce), secs, round))?;
            let (baseline, _) = RedisBenchmark::default().run(&server, &args, 1)?;
            rows.push((round, label, refused, elapsed, scripts, baseline));
        }
    }
    println!("## Deny cache\n");
    println!(
        "Measured by `cargo run --release -p tollgate-redis --features bench --example deny_cache`: one key \
         over its limit (100/min, GCRA), {TASKS} concurrent tasks on one tokio worker thread, \
         {secs} s per run, {ROUNDS} rounds alternating, in the same process against the same \
         `redis-server`. Scripts counted from `INFO commandstats`. `redis-benchmark`: \
         `-P 16 -c 50` running the single-entry GCRA script on one used-up key (what each \
         refusal without the cache runs), right after each run.\n"
    );
    println!(
        "| round | run | refusals | refusals/s | scripts per refusal | redis-benchmark EVALSHA/s | ÷ redis-benchmark |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let rate = |refused: u64, elapsed: Duration| refused as f64 / elapsed.as_secs_f64();
    for &(round, label, refused, elapsed, scripts, baseline) in &rows {
        println!(
            "| {round} | {label} | {refused} | {:.0} | {:.6} | {baseline:.0} | {:.2}× |",
            rate(refused, elapsed),
            scripts as f64 / refused.max(1) as f64,
            rate(refused, elapsed) / baseline
        );
    }
    let ratios = |of: usize| -> String {
        rows.chunks(3)
            .map(|round| {
                format!(
                    "{:.1}×",
                    rate(round[2].2, round[2].3) / rate(round[of].2, round[of].3)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\nThe defaults' refusals/s per round, against the path before the local tier: **{}**; \
         against coalescing alone: {}.",
        ratios(0),
        ratios(1)
    );
    Ok(())
}

/// The abused limit: 100 a minute, GCRA.
fn abused() -> BenchResult<Limit> {
    Ok(Limit::new("abused", Algorithm::Gcra, Quota::per_minute(100)?)?.keyed_by(["user"])?)
}

/// Uses up the key, then refuses it from `TASKS` tasks for `secs`; returns the refusals, the
/// time taken and the scripts Redis ran meanwhile.
async fn run(
    server: &RedisServer,
    (cache, coalesce): (usize, bool),
    secs: u64,
    round: usize,
) -> BenchResult<(u64, Duration, u64)> {
    let mut builder = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .coalesce(coalesce)
        // The path before the local tier also had Nagle on (examples/bench, "before").
        .nagle(!coalesce);
    if !coalesce {
        // And its own script, which reads the key's value too (`GET`) where today's does not.
        server.cmd(&["SCRIPT", "LOAD", BEFORE_GCRA]);
        builder = builder.old_gcra_script(redis::Script::new(BEFORE_GCRA).get_hash());
    }
    let store = builder.build().await?;
    let limiter = Arc::new(
        Limiter::builder(store)
            .namespace(tollgate::Namespace::new(format!(
                "bench{round}-{cache}-{coalesce}"
            ))?)
            .deny_cache(cache)
            .limit(abused()?)
            .build()?,
    );
    let key = [("user", "abuser")];
    while limiter.check("abused", &key).await?.outcome() == Outcome::Allowed {}
    let before = server.command_stats("evalsha").calls;
    let gets = server.command_stats("get").calls;
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (limiter, stop, refused) = (limiter.clone(), stop.clone(), refused.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let v = limiter.check("abused", &[("user", "abuser")]).await;
                    if let Ok(v) = v
                        && let Outcome::Limited { .. } = v.outcome()
                    {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed();
    let scripts = server.command_stats("evalsha").calls - before;
    // The old script reads a spent key's value; today's does not (T = 600 ms is whole).
    if !coalesce && server.command_stats("get").calls == gets {
        return Err("the before row ran today's script, not the old one".into());
    }
    Ok((refused.load(Ordering::Relaxed), elapsed, scripts))
}
