//! Benchmark of lease mode — not a test: it measures and prints a Markdown section for
//! `docs/benchmarks.md`.
//!
//! `cargo run --release -p tollgate-redis --example lease` spawns its own `redis-server` and,
//! in one run so that the figures compare, hammers **one hot key** from 4 limiter instances in
//! this process (4 `Limiter`s, each on its own `RedisStore` and connection: what 4 service
//! instances would be, minus HTTP), 16 tasks each, on one fixed-window limit:
//! - exact mode (one script per decision: today's code path),
//! - lease mode with k = 100,
//! - lease mode with k chosen from the observed rate (the default).
//!
//! Throughput: a limit never reached; decisions/s and scripts per decision (`INFO
//! commandstats`, `cmdstat_evalsha` calls before and after each run), and for scale the same
//! key under Redis's own client right after each run: `redis-benchmark -P 16 -c 50` on the
//! single-entry fixed-window script, what the exact path runs per decision. Overshoot: a
//! limit of 100 000 hammered until every instance is refused; admitted vs the limit, and the
//! units still held (given back afterwards). Two rounds, the modes alternating.
//!
//! `TOLLGATE_BENCH_SECS` sets the seconds per throughput run (default 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Lease, Limit, Limiter, Namespace, Outcome, Quota};
use tollgate_redis::{RedisStore, ScriptCall};
use tollgate_testkit::{RedisBenchmark, RedisServer};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const INSTANCES: usize = 4;
const TASKS: usize = 16;
/// Windows are aligned to the epoch: 300 days never end during a run.
const PERIOD: Duration = Duration::from_secs(300 * 86_400);
const OVERSHOOT_LIMIT: u64 = 100_000;
const ROUNDS: usize = 2;

#[derive(Clone, Copy)]
enum Mode {
    Exact,
    Lease(Option<u64>),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::Exact => "exact (today's path)".to_owned(),
            Mode::Lease(Some(k)) => format!("lease, k = {k}"),
            Mode::Lease(None) => "lease, k from the rate".to_owned(),
        }
    }
}

fn main() -> BenchResult<()> {
    let secs: u64 = std::env::var("TOLLGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let server = RedisServer::start();
    // One worker thread, as in the other Redis benchmarks: Redis keeps the other core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let modes = [Mode::Exact, Mode::Lease(Some(100)), Mode::Lease(None)];
    let call = ScriptCall::check(&limit(Mode::Exact, 1_000_000_000)?, 1);
    let args = RedisBenchmark::evalsha(&server, call.source, call.sha, "rb:hot", call.args);
    let mut rows = Vec::new();
    for round in 1..=ROUNDS {
        for (i, mode) in modes.into_iter().enumerate() {
            let run = round * modes.len() + i;
            let speed = rt.block_on(throughput(&server, mode, secs, run))?;
            let (baseline, _) = RedisBenchmark::default().run(&server, &args, 1)?;
            let over = rt.block_on(overshoot(&server, mode, run))?;
            rows.push((round, mode, speed, baseline, over));
        }
    }
    println!("## Leases (one hot key, 4 instances)\n");
    println!(
        "Measured by `cargo run --release -p tollgate-redis --example lease`: {INSTANCES} \
         `Limiter` + `RedisStore` instances in one process (each its own connection), \
         {TASKS} tasks each, one tokio worker thread, one fixed-window key; {secs} s per \
         throughput run, {ROUNDS} rounds; scripts counted from `INFO commandstats`; \
         `redis-benchmark -P 16 -c 50` on the single-entry fixed-window script and one key \
         right after each run. Overshoot: a limit of {OVERSHOOT_LIMIT} hammered until every \
         instance is refused.\n"
    );
    println!(
        "| round | mode | decisions/s | vs exact | scripts per decision | redis-benchmark EVALSHA/s | ÷ redis-benchmark | admitted of {OVERSHOOT_LIMIT} | overshoot | held at the end |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (round, mode, (rate, per), baseline, (admitted, held))) in rows.iter().enumerate() {
        let exact_rate = rows[i - i % modes.len()].2.0;
        println!(
            "| {round} | {} | {:.0} | {:.2}× | {:.6} | {baseline:.0} | {:.2}× | {} | {} | {} |",
            mode.label(),
            rate,
            rate / exact_rate,
            per,
            rate / baseline,
            admitted,
            *admitted as i64 - OVERSHOOT_LIMIT as i64,
            held
        );
    }
    Ok(())
}

fn limit(mode: Mode, units: u64) -> BenchResult<Limit> {
    let limit = Limit::new("hot", Algorithm::FixedWindow, Quota::new(units, PERIOD)?)?;
    Ok(match mode {
        Mode::Exact => limit,
        Mode::Lease(k) => {
            let mut lease = Lease::new();
            if let Some(k) = k {
                lease = lease.units(k);
            }
            limit.lease(lease)?
        }
    })
}

async fn instances(
    server: &RedisServer,
    mode: Mode,
    units: u64,
    ns: &str,
) -> BenchResult<Vec<Arc<Limiter<RedisStore>>>> {
    let mut out = Vec::new();
    for _ in 0..INSTANCES {
        let store = RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .await?;
        out.push(Arc::new(
            Limiter::builder(store)
                .namespace(Namespace::new(ns)?)
                .limit(limit(mode, units)?)
                .build()?,
        ));
    }
    Ok(out)
}

/// Decisions/s and scripts per decision on a limit never reached.
async fn throughput(
    server: &RedisServer,
    mode: Mode,
    secs: u64,
    run: usize,
) -> BenchResult<(f64, f64)> {
    let limiters = instances(server, mode, 1_000_000_000, &format!("speed{run}")).await?;
    let before = server.command_stats("evalsha").calls;
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..INSTANCES * TASKS)
        .map(|i| {
            let (limiter, stop, decided) = (
                Arc::clone(&limiters[i % INSTANCES]),
                Arc::clone(&stop),
                Arc::clone(&decided),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(v) = limiter.check::<&str>("hot", &[]).await
                        && v.outcome() == Outcome::Allowed
                    {
                        decided.fetch_add(1, Ordering::Relaxed);
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
    let decided = decided.load(Ordering::Relaxed);
    for l in &limiters {
        l.return_leases().await?;
    }
    Ok((
        decided as f64 / elapsed.as_secs_f64(),
        scripts as f64 / decided.max(1) as f64,
    ))
}

/// Admitted of [`OVERSHOOT_LIMIT`] once every instance refuses, and the units held then.
async fn overshoot(server: &RedisServer, mode: Mode, run: usize) -> BenchResult<(u64, u64)> {
    let limiters = instances(server, mode, OVERSHOOT_LIMIT, &format!("over{run}")).await?;
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..INSTANCES * TASKS)
        .map(|i| {
            let (limiter, admitted) = (Arc::clone(&limiters[i % INSTANCES]), Arc::clone(&admitted));
            tokio::spawn(async move {
                // Until this task's instance refuses (it then holds nothing).
                while let Ok(v) = limiter.check::<&str>("hot", &[]).await
                    && v.outcome() == Outcome::Allowed
                {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let held = limiters.iter().map(|l| l.leased_units()).sum();
    for l in &limiters {
        l.return_leases().await?;
    }
    Ok((admitted.load(Ordering::Relaxed), held))
}
