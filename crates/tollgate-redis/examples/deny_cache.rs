//! Benchmark of the exact deny cache — not a test: it measures and prints a Markdown section
//! for `docs/benchmarks.md`.
//!
//! `cargo run --release -p tollgate-redis --example deny_cache` spawns its own `redis-server`
//! and, in one run so that the figures compare, hammers **one abusive key** (a limit of
//! 100/min, GCRA, already used up) from 64 concurrent tasks through a `Limiter` on
//! `RedisStore`, once without the deny cache (every refusal is a script) and once with it.
//! It reports refusals/s, their ratio, and the scripts Redis ran per refusal (`INFO
//! commandstats`, `cmdstat_evalsha` calls, before and after each run).
//!
//! `TOLLGATE_BENCH_SECS` sets the seconds per run (default 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, Outcome, Quota};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TASKS: usize = 64;

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
    let mut rows = Vec::new();
    for (label, cache) in [
        ("without the deny cache", 0),
        ("with the deny cache", 10_000),
    ] {
        let (refused, elapsed, scripts) = rt.block_on(run(&server, cache, secs))?;
        rows.push((label, refused, elapsed, scripts));
    }
    let rate = |r: &(&str, u64, Duration, u64)| r.1 as f64 / r.2.as_secs_f64();
    println!("## Deny cache\n");
    println!(
        "Measured by `cargo run --release -p tollgate-redis --example deny_cache`: one key \
         over its limit (100/min, GCRA), {TASKS} concurrent tasks on one tokio worker thread, \
         {secs} s per run, one run each, in the same process against the same \
         `redis-server`. Scripts counted from `INFO commandstats`.\n"
    );
    println!("| run | refusals | refusals/s | scripts run | scripts per refusal |");
    println!("|---|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {} | {:.6} |",
            r.0,
            r.1,
            rate(r),
            r.3,
            r.3 as f64 / r.1.max(1) as f64
        );
    }
    println!(
        "\nRatio, with / without: **{:.1}×** refusals/s.",
        rate(&rows[1]) / rate(&rows[0])
    );
    Ok(())
}

/// Uses up the key, then refuses it from `TASKS` tasks for `secs`; returns the refusals, the
/// time taken and the scripts Redis ran meanwhile.
async fn run(server: &RedisServer, cache: usize, secs: u64) -> BenchResult<(u64, Duration, u64)> {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await?;
    let limit =
        Limit::new("abused", Algorithm::Gcra, Quota::per_minute(100)?)?.keyed_by(["user"])?;
    let limiter = Arc::new(
        Limiter::builder(store)
            .namespace(tollgate::Namespace::new(format!("bench{cache}"))?)
            .deny_cache(cache)
            .limit(limit)
            .build()?,
    );
    let key = [("user", "abuser")];
    while limiter.check("abused", &key).await?.outcome() == Outcome::Allowed {}
    let before = evalsha_calls(server)?;
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
    let scripts = evalsha_calls(server)? - before;
    Ok((refused.load(Ordering::Relaxed), elapsed, scripts))
}

/// `cmdstat_evalsha:calls=N,...` from `INFO commandstats`.
fn evalsha_calls(server: &RedisServer) -> BenchResult<u64> {
    let info = server.cmd(&["INFO", "commandstats"]);
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .ok_or("no cmdstat_evalsha in INFO commandstats")?;
    let calls = line
        .split(['=', ','])
        .nth(1)
        .ok_or("malformed cmdstat line")?
        .parse()?;
    Ok(calls)
}
