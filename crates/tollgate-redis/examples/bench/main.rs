//! Benchmark of the Redis store — not a test: it asserts nothing about speed, it measures and
//! prints a Markdown section for `docs/benchmarks.md`.
//!
//! `cargo run --release -p tollgate-redis --features bench --example bench` spawns its own `redis-server` and
//! measures, in one run so that figures compare:
//! 1. per algorithm, decisions/s and p50/p99 latency through [`RedisStore`] at 1, 64, 256 and
//!    1024 concurrent tasks (one multiplexed connection; 10 000 keys, quota never exhausted);
//! 2. the same (single-entry) script run by `redis-benchmark -P 16 -c 50` with `EVALSHA` (loaded first;
//!    a reply checked by hand with `redis-cli`, and Redis's `total_error_replies` checked to be
//!    unchanged, since `redis-benchmark` counts error replies as successes), and the ratio of
//!    the store's best figure to it;
//! 3. a textbook floating-point GCRA script (`textbook_gcra.lua`) under the same
//!    `redis-benchmark` load, against ours;
//! 4. Redis memory per key per algorithm: 100 000 keys, change in `used_memory`, and the mean
//!    `MEMORY USAGE` of sampled keys;
//! 5. coalesced calls: GCRA, 10 000 keys, 256 tasks and 1 task, coalescing off vs on in
//!    alternating rounds (decisions/s, p50/p99, Redis CPU per decision from `/proc` and from
//!    `INFO commandstats`, mean batch size), against `redis-benchmark` on the same script,
//!    and the floor of any such batch (`batch_floor.lua`: the two commands an admitted GCRA
//!    decision needs, per key, and nothing else);
//! 6. TLS ÷ plaintext (`tls.rs`): GCRA through the store, coalescing on, 64 and 256 tasks, on
//!    one `redis-server` listening on both, in alternating rounds (decisions/s, Redis and
//!    client CPU per decision, each round's ratio and their median).
//!
//! `TOLLGATE_BENCH_SECS` sets the seconds per throughput cell (default 2);
//! `TOLLGATE_BENCH_TASKS` the task counts of section 5 (default `256,64,16,4,1`) and
//! `TOLLGATE_BENCH_ROUNDS` its rounds (default 3);
//! `TOLLGATE_BENCH_TLS_TASKS` those of section 6 (default `64,256`);
//! `TOLLGATE_BENCH_ONLY=coalesce` runs section 5 alone, `TOLLGATE_BENCH_ONLY=tls` section 6.

mod tls;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Entry, Key, Limit, Namespace, Op, Quota, Request, Store};
use tollgate_redis::{RedisStore, ScriptCall};
use tollgate_testkit::{RedisBenchmark, RedisServer, process_cpu_time};

const KEYS: u64 = 10_000;
const MEMORY_KEYS: u64 = 100_000;
const CONCURRENCY: [usize; 4] = [1, 64, 256, 1024];
const TEXTBOOK: &str = include_str!("textbook_gcra.lua");
const FLOOR: &str = include_str!("floor.lua");
const BATCH_FLOOR: &str = include_str!("batch_floor.lua");
const BEFORE_GCRA: &str = include_str!("before_gcra.lua");

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> BenchResult<()> {
    let secs: u64 = std::env::var("TOLLGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let server = RedisServer::start();
    // One worker thread, as `redis-benchmark` is one thread: on two cores Redis then keeps one
    // for itself. With two workers the client's threads and Redis preempt each other (measured:
    // the store's best figures 20–50 % lower, 40 % of the client's CPU samples in the kernel).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut out = String::new();
    if std::env::var("TOLLGATE_BENCH_ONLY").as_deref() == Ok("tls") {
        out.push_str(&format!(
            "## TLS to Redis (issue #26)\n\n\
             Measured by `TOLLGATE_BENCH_ONLY=tls TOLLGATE_BENCH_SECS={secs} cargo run --release \
             -p tollgate-redis --example bench` (redis-server {}; 2 cores shared by client and \
             server, the client on one tokio worker thread; loopback).\n\n",
            redis_version(&server)
        ));
        out.push_str(&tls::tls_section(&rt, Duration::from_secs(secs))?);
        println!("{out}");
        return Ok(());
    }
    if std::env::var("TOLLGATE_BENCH_ONLY").as_deref() == Ok("coalesce") {
        out.push_str(&format!(
            "Measured by `TOLLGATE_BENCH_ONLY=coalesce cargo run --release -p tollgate-redis \
             --example bench` (redis-server {}, {secs} s per cell).\n\n",
            redis_version(&server)
        ));
        out.push_str(&rt.block_on(coalesce_section(&server, Duration::from_secs(secs)))?);
        println!("{out}");
        return Ok(());
    }
    out.push_str("## Redis store\n\n");
    out.push_str(&format!(
        "Measured by `cargo run --release -p tollgate-redis --features bench --example bench` on this project's \
         machine (2 cores shared by client and server; the client on one tokio worker thread, \
         like `redis-benchmark`; loopback, redis-server {}), one run. \
         Absolute figures drift ±15–25 % between runs; compare within one run.\n\n",
        redis_version(&server)
    ));

    // 1. Through the store.
    out.push_str(&format!(
        "### Through `RedisStore` (one multiplexed connection, {KEYS} keys, {secs} s per cell)\n\n"
    ));
    out.push_str("| algorithm | tasks | decisions/s | p50 | p99 |\n|---|---:|---:|---:|---:|\n");
    let mut best = Vec::new();
    for algorithm in Algorithm::ALL {
        let mut top = 0.0_f64;
        for tasks in CONCURRENCY {
            let r = rt.block_on(store_run(
                &server,
                algorithm,
                tasks,
                Duration::from_secs(secs),
                Path::On,
            ))?;
            eprintln!(
                "{algorithm} × {tasks}: {:.0}/s p50 {:?} p99 {:?}",
                r.rate, r.p50, r.p99
            );
            out.push_str(&format!(
                "| {algorithm} | {tasks} | {:.0} | {} | {} |\n",
                r.rate,
                micros(r.p50),
                micros(r.p99)
            ));
            top = top.max(r.rate);
        }
        best.push((algorithm, top));
    }

    // 2. and 3. The script alone, under redis-benchmark.
    out.push_str(
        "\n### The script alone under `redis-benchmark -P 16 -c 50 -r 10000` (EVALSHA of the single-entry script, server time)\n\n",
    );
    out.push_str("| algorithm | redis-benchmark EVALSHA/s | Redis CPU per call | store's best decisions/s | store ÷ script |\n|---|---:|---:|---:|---:|\n");
    let mut gcra_args = Vec::new();
    for (algorithm, top) in &best {
        let limit = bench_limit(*algorithm);
        let key = format!(
            "rb:{}:{{__rand_int__}}:{}",
            algorithm.name(),
            algorithm.key_tag()
        );
        // What a one-limit request runs.
        let call = ScriptCall::check(&limit, 1);
        let args = RedisBenchmark::evalsha(&server, call.source, call.sha, &key, call.args);
        // GCRA's script answers one integer, the others an array of five.
        let items = if *algorithm == Algorithm::Gcra { 1 } else { 5 };
        check_by_hand(&server, &args, items)?;
        let (rate, cpu) = RedisBenchmark::default().run(&server, &args, KEYS)?;
        eprintln!("redis-benchmark {algorithm}: {rate:.0}/s, {cpu:.1} µs CPU per call");
        if *algorithm == Algorithm::Gcra {
            gcra_args = args.clone();
        }
        out.push_str(&format!(
            "| {algorithm} | {rate:.0} | {cpu:.1} µs | {top:.0} | {:.2} |\n",
            top / rate
        ));
    }
    let sha = load(&server, TEXTBOOK)?;
    let args: Vec<String> = [
        "EVALSHA",
        &sha,
        "1",
        "tb:{__rand_int__}",
        "1000",
        "1000",
        "1",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    check_by_hand(&server, &args, 4)?;
    // The floor of a GCRA that reads `TIME`: TIME, GET, SET with an expiry, constant
    // arguments, no arithmetic. Ours reads no `TIME` (the key's expiry is its state).
    let floor_sha = load(&server, FLOOR)?;
    let floor_args: Vec<String> = ["EVALSHA", &floor_sha, "1", "fl:{__rand_int__}"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    check_by_hand(&server, &floor_args, 1)?;
    out.push_str(
        "\nGCRA, ours (`lua/one_gcra.lua` + `lua/gcra.lua`: PTTL, GET when the key is not yet full \
         and T is not a whole number of ms; when admitted PEXPIRE, or SET … PX for a new key or such a T) \
         vs a textbook floating-point script \
         (`examples/bench/textbook_gcra.lua`: TIME, GET, SET … EX), same quota (1000/s, burst \
         1000), same load, medians of 3 alternating runs. With 10 000 keys a key is full again \
         between its calls (PTTL, PEXPIRE); with 100 keys every call finds it spent (PTTL, PEXPIRE: T = 1 ms is whole, \
         so no GET), \
         and about half are refused.\n\n\
         | keys | ours EVALSHA/s | textbook EVALSHA/s | ratio | Redis CPU per call, ours | textbook | ratio | TIME+GET+SET floor |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for keys in [10_000_u64, 100] {
        // Alternate, three rounds, and take medians: the machine's load drifts.
        let (mut ours, mut theirs, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..3 {
            ours.push(RedisBenchmark::default().run(&server, &gcra_args, keys)?);
            theirs.push(RedisBenchmark::default().run(&server, &args, keys)?);
            floor.push(RedisBenchmark::default().run(&server, &floor_args, keys)?);
        }
        let median = |v: &mut Vec<(f64, f64)>| {
            let mut rates: Vec<f64> = v.iter().map(|x| x.0).collect();
            let mut cpus: Vec<f64> = v.iter().map(|x| x.1).collect();
            rates.sort_by(f64::total_cmp);
            cpus.sort_by(f64::total_cmp);
            (rates[rates.len() / 2], cpus[cpus.len() / 2])
        };
        let (ours_rate, ours_cpu) = median(&mut ours);
        let (tb_rate, tb_cpu) = median(&mut theirs);
        let (_, floor_cpu) = median(&mut floor);
        eprintln!("GCRA {keys} keys: ours {ours:?} textbook {theirs:?} floor {floor:?}");
        out.push_str(&format!(
            "| {keys} | {ours_rate:.0} | {tb_rate:.0} | **{:.2}×** | {ours_cpu:.1} µs | {tb_cpu:.1} µs | **{:.2}×** | {floor_cpu:.1} µs |\n",
            ours_rate / tb_rate,
            tb_cpu / ours_cpu
        ));
    }
    out.push_str("\nTarget: ≥ 1.5× the textbook script.\n");

    // 4. Memory.
    out.push_str(&format!(
        "\n### Redis memory per key ({MEMORY_KEYS} keys, one check each)\n\n\
         `used_memory` change divided by the key count (what Redis really spends, key name \
         included), and the mean `MEMORY USAGE` of 200 sampled keys (which under-reports). \
         Key names are like `m:<algorithm>:{{user=12345}}:<tag>`.\n\n"
    ));
    out.push_str("| algorithm | units recorded per key | used_memory / key (B) | MEMORY USAGE (B) |\n|---|---:|---:|---:|\n");
    for algorithm in Algorithm::ALL {
        for cost in [1_u64, 50] {
            let (per_key, usage) = rt.block_on(memory_run(&server, algorithm, cost))?;
            eprintln!("memory {algorithm} cost {cost}: {per_key:.0} B, MEMORY USAGE {usage:.0} B");
            out.push_str(&format!(
                "| {algorithm} | {cost} | {per_key:.0} | {usage:.0} |\n"
            ));
        }
    }
    out.push_str(&rt.block_on(coalesce_section(&server, Duration::from_secs(secs)))?);
    out.push_str("\n### TLS to Redis (issue #26)\n\n");
    out.push_str(&tls::tls_section(&rt, Duration::from_secs(secs))?);
    println!("{out}");
    Ok(())
}

/// Section 5: GCRA through the store with coalescing off and on, and the code before it,
/// alternating, three rounds each (by default), medians; the same script under `redis-benchmark` for scale.
async fn coalesce_section(server: &RedisServer, duration: Duration) -> BenchResult<String> {
    let tasks_list: Vec<usize> = std::env::var("TOLLGATE_BENCH_TASKS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![256, 64, 16, 4, 1]);
    let rounds: usize = std::env::var("TOLLGATE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut out = String::new();
    out.push_str(&format!(
        "### Coalesced calls (GCRA, {KEYS} keys, one multiplexed connection, medians of \
         {rounds} alternating rounds)\n\n\
         Redis CPU per decision: the server process's CPU time (`/proc`) over the run ÷ \
         decisions; `commandstats`: `INFO commandstats` EVALSHA usec ÷ decisions (the script's \
         own run time, without reading and answering the command); client CPU: this \
         process's (the store and the harness's tasks, on one tokio worker) the same way.\n\n\
         | tasks | coalescing | decisions/s | p50 | p99 | Redis CPU / decision | commandstats µs / decision | requests per EVALSHA | client CPU / decision |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
    ));
    let limit = bench_limit(Algorithm::Gcra);
    let call = ScriptCall::check(&limit, 1);
    let args = RedisBenchmark::evalsha(
        server,
        call.source,
        call.sha,
        "rb:gcra:{__rand_int__}:gcra",
        call.args,
    );
    check_by_hand(server, &args, 1)?;
    let mut summary = Vec::new();
    let paths = [Path::Before, Path::Off, Path::On];
    for tasks in tasks_list {
        let mut runs: [Vec<RunResult>; 3] = Default::default();
        for _ in 0..rounds {
            for (path, runs) in paths.iter().zip(&mut runs) {
                runs.push(store_run(server, Algorithm::Gcra, tasks, duration, *path).await?);
            }
        }
        let mut rows = Vec::new();
        for (path, runs) in paths.iter().zip(&runs) {
            let med = |f: &dyn Fn(&RunResult) -> f64| {
                let mut v: Vec<f64> = runs.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let row = (
                med(&|r| r.rate),
                med(&|r| r.p50.as_secs_f64()),
                med(&|r| r.p99.as_secs_f64()),
                med(&|r| r.cpu_per_decision),
                med(&|r| r.script_per_decision),
                med(&|r| r.per_call),
                med(&|r| r.client_cpu_per_decision),
            );
            let name = path.name();
            eprintln!("coalescing {name} × {tasks}: {row:?}");
            out.push_str(&format!(
                "| {tasks} | {name} | {:.0} | {} | {} | {:.2} µs | {:.2} µs | {:.1} | {:.2} µs |\n",
                row.0,
                micros(Duration::from_secs_f64(row.1)),
                micros(Duration::from_secs_f64(row.2)),
                row.3,
                row.4,
                row.5,
                row.6
            ));
            rows.push(row);
        }
        // Each round's on ÷ before, the two runs seconds apart: a drift of the machine over the
        // whole run cancels out of these, not out of the ratio of medians.
        let paired: Vec<(f64, f64)> = runs[2]
            .iter()
            .zip(&runs[0])
            .map(|(on, before)| {
                (
                    on.rate / before.rate,
                    on.cpu_per_decision / before.cpu_per_decision,
                )
            })
            .collect();
        summary.push((tasks, rows[0], rows[1], rows[2], paired));
    }
    let (rb_rate, rb_cpu) = RedisBenchmark::default().run(server, &args, KEYS)?;
    eprintln!("redis-benchmark gcra: {rb_rate:.0}/s, {rb_cpu:.1} µs CPU per call");
    // The floor: PTTL and PEXPIRE (SET … PX for a new key) per key, 64 keys per call.
    const FLOOR_KEYS: usize = 64;
    let mut floor_args: Vec<String> = vec![
        "EVALSHA".into(),
        load(server, BATCH_FLOOR)?,
        FLOOR_KEYS.to_string(),
    ];
    floor_args.extend((0..FLOOR_KEYS).map(|_| "bf:{__rand_int__}".to_owned()));
    check_by_hand(server, &floor_args, 1)?;
    let (_, floor_cpu) = RedisBenchmark {
        pipeline: 1,
        clients: 4,
        requests: 8_000,
    }
    .run(server, &floor_args, KEYS)?;
    let floor_cpu = floor_cpu / FLOOR_KEYS as f64;
    let before_cpu = summary
        .first()
        .map_or(f64::NAN, |(_, before, _, _, _)| before.3);
    eprintln!("batch floor: {floor_cpu:.2} µs CPU per key");
    out.push_str(&format!(
        "\n`redis-benchmark -P 16 -c 50` on the same single-entry GCRA script: {rb_rate:.0} \
         EVALSHA/s, {rb_cpu:.2} µs Redis CPU per call.\n\n\
         The floor of any batch of admitted GCRA decisions on the server's clock \
         (`examples/bench/batch_floor.lua`: `PTTL` and `PEXPIRE`, or `SET … PX` for a new key, \
         per key, 64 keys per call, \
         no arithmetic; `redis-benchmark -P 1 -c 4`): {floor_cpu:.2} µs Redis CPU per key, \
         **{:.2}×** of a decision on the path before the local tier at 256 tasks.\n\n\
         | ratio (same run) | on ÷ before | on ÷ off |\n|---|---:|---:|\n",
        floor_cpu / before_cpu
    ));
    for (tasks, before, off, on, paired) in summary {
        let pair = |what: &str, bold: bool, f: &dyn Fn(&Row) -> f64| {
            let (b, o) = (f(&on) / f(&before), f(&on) / f(&off));
            if bold {
                format!("| {tasks} tasks: {what} | **{b:.2}×** | **{o:.2}×** |\n")
            } else {
                format!("| {tasks} tasks: {what} | {b:.2}× | {o:.2}× |\n")
            }
        };
        out.push_str(&pair("decisions/s", true, &|r| r.0));
        out.push_str(&pair("p50 latency", false, &|r| r.1));
        out.push_str(&pair("Redis CPU per decision", true, &|r| r.3));
        out.push_str(&pair("commandstats µs per decision", false, &|r| r.4));
        out.push_str(&pair("client CPU per decision", false, &|r| r.6));
        out.push_str(&format!(
            "| {tasks} tasks: on ÷ before within each round, decisions/s; Redis CPU | {}; {} | |\n",
            spread(paired.iter().map(|p| p.0)),
            spread(paired.iter().map(|p| p.1)),
        ));
        out.push_str(&format!(
            "| {tasks} tasks: decisions/s ÷ redis-benchmark (before, off, on) | {:.2}×, {:.2}×, {:.2}× | |\n",
            before.0 / rb_rate,
            off.0 / rb_rate,
            on.0 / rb_rate,
        ));
    }
    Ok(out)
}

/// The median of `ratios` and their range: `1.23× (1.10–1.30×)`.
fn spread(ratios: impl Iterator<Item = f64>) -> String {
    let mut v: Vec<f64> = ratios.collect();
    v.sort_by(f64::total_cmp);
    match (v.first(), v.last()) {
        (Some(lo), Some(hi)) => format!("{:.2}× ({lo:.2}–{hi:.2}×)", v[v.len() / 2]),
        _ => "–".to_owned(),
    }
}

/// A quota no benchmark exhausts: 1000 per second per key (burst 1000).
fn bench_limit(algorithm: Algorithm) -> Limit {
    let quota = Quota::per_second(1_000).unwrap_or_else(|e| panic!("{e}"));
    Limit::new(algorithm.name(), algorithm, quota).unwrap_or_else(|e| panic!("{e}"))
}

/// One row of the coalescing table: decisions/s, p50 and p99 (s), Redis CPU and commandstats
/// µs per decision, decisions per EVALSHA, client CPU µs per decision.
type Row = (f64, f64, f64, f64, f64, f64, f64);

/// The store's path to Redis in a coalescing run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The path before the local tier: one `EVALSHA` per decision of that code's single-entry
    /// GCRA script (`before_gcra.lua`, `RedisStoreBuilder::old_gcra_script`), with Nagle's
    /// algorithm on (the `redis` crate's default, which tollgate kept until it set
    /// `TCP_NODELAY`), through this store's client code.
    Before,
    /// This code without coalescing: one `EVALSHA` per decision, `TCP_NODELAY`.
    Off,
    /// The defaults: coalesced calls, `TCP_NODELAY`.
    On,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Before => "before (the old script, Nagle)",
            Path::Off => "off",
            Path::On => "on",
        }
    }
}

struct RunResult {
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// Redis's CPU time (`/proc`) over the run ÷ decisions, µs.
    cpu_per_decision: f64,
    /// EVALSHA time in `INFO commandstats` ÷ decisions, µs.
    script_per_decision: f64,
    /// Decisions ÷ EVALSHA calls.
    per_call: f64,
    /// This process's CPU time (`/proc`) over the run ÷ decisions, µs: the client's.
    client_cpu_per_decision: f64,
}

async fn store_run(
    server: &RedisServer,
    algorithm: Algorithm,
    tasks: usize,
    duration: Duration,
    path: Path,
) -> BenchResult<RunResult> {
    let mut builder = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .coalesce(path == Path::On)
        .nagle(path == Path::Before);
    if path == Path::Before {
        builder = builder.old_gcra_script(load(server, BEFORE_GCRA)?);
    }
    let store = builder.build().await?;
    // Each path its own keys: the old script's keys keep a second of slack, not 999 ms.
    let ns = Namespace::new(format!("b{tasks}{path:?}"))?;
    let result = drive(server, &store, algorithm, tasks, duration, &ns).await?;
    // The old script never moves an expiry alone (today's does, on keys that exist).
    let pexpires = server.command_stats("pexpire").calls;
    if path == Path::Before && pexpires > 0 {
        return Err(format!("{pexpires} PEXPIREs: the before row ran today's script").into());
    }
    Ok(result)
}

/// Runs `tasks` tasks deciding one-limit checks of `algorithm` on `store` over [`KEYS`] keys
/// of `ns` for `duration`, and measures them (Redis's statistics reset first; `server` is
/// the Redis `store` talks to, over whichever port).
async fn drive(
    server: &RedisServer,
    store: &RedisStore,
    algorithm: Algorithm,
    tasks: usize,
    duration: Duration,
    ns: &Namespace,
) -> BenchResult<RunResult> {
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let cpu_before = server.cpu_time();
    let client_before = process_cpu_time(std::process::id());
    let limit = Arc::new(bench_limit(algorithm));
    let keys: Arc<Vec<Key>> = Arc::new(
        (0..KEYS)
            .map(|i| Key::new(ns, &limit, &[("user", i.to_string())]))
            .collect(),
    );
    let started = Instant::now();
    let deadline = started + duration;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, limit, keys) = (store.clone(), limit.clone(), keys.clone());
            tokio::spawn(async move {
                let mut rng = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut latencies = Vec::with_capacity(4096);
                let mut errors = 0_u64;
                // One clock read per decision: its end is the next one's start and the
                // deadline's check (the harness shares the cores with Redis and the store,
                // and a read costs ~0.1 µs on this VM; the latency then also counts choosing
                // the key, well under a µs).
                let mut t0 = Instant::now();
                while t0 < deadline {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = keys[(rng % KEYS) as usize].clone();
                    let request = Request::new([Entry::new(&limit, key)], 1).expect("valid");
                    if store.decide(&request, Op::Check, None).await.is_err() {
                        errors += 1;
                    }
                    let t1 = Instant::now();
                    latencies.push(t1 - t0);
                    t0 = t1;
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (l, e) = h.await?;
        all.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = (server.cpu_time() - cpu_before).as_secs_f64() * 1e6;
    let client_cpu = (process_cpu_time(std::process::id()) - client_before).as_secs_f64() * 1e6;
    let stats = server.command_stats("evalsha");
    let (calls, usec) = (stats.calls as f64, stats.usec as f64);
    if errors > 0 {
        return Err(format!("{errors} store errors during the run").into());
    }
    let decisions = all.len() as f64;
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    Ok(RunResult {
        rate: decisions / elapsed,
        p50: at(0.50),
        p99: at(0.99),
        cpu_per_decision: cpu / decisions,
        script_per_decision: usec / decisions,
        per_call: decisions / calls.max(1.0),
        client_cpu_per_decision: client_cpu / decisions,
    })
}

async fn memory_run(
    server: &RedisServer,
    algorithm: Algorithm,
    cost: u64,
) -> BenchResult<(f64, f64)> {
    let mut con = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await?;
    let before = used_memory(&mut con).await?;
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await?;
    let ns = Namespace::new("m")?;
    let limit = Arc::new(Limit::new(
        algorithm.name(),
        algorithm,
        Quota::per_hour(100)?,
    )?);
    let workers = 256_u64;
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (store, limit, ns) = (store.clone(), limit.clone(), ns.clone());
            tokio::spawn(async move {
                let mut i = w;
                while i < MEMORY_KEYS {
                    let key = Key::new(&ns, &limit, &[("user", i.to_string())]);
                    let request =
                        Request::new([Entry::new(&limit, key)], cost).map_err(|e| e.to_string())?;
                    store
                        .decide(&request, Op::Check, None)
                        .await
                        .map_err(|e| e.to_string())?;
                    i += workers;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for h in handles {
        h.await??;
    }
    let after = used_memory(&mut con).await?;
    let mut usage = 0_u64;
    let samples = 200_u64;
    for i in 0..samples {
        let key = Key::new(
            &ns,
            &limit,
            &[("user", (i * 397 % MEMORY_KEYS).to_string())],
        );
        let u: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key.as_str())
            .query_async(&mut con)
            .await?;
        usage += u.ok_or("sampled key missing")?;
    }
    let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await?;
    Ok((
        (after as f64 - before as f64) / MEMORY_KEYS as f64,
        usage as f64 / samples as f64,
    ))
}

async fn used_memory(con: &mut redis::aio::MultiplexedConnection) -> BenchResult<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(con).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no used_memory in INFO".into())
}

fn redis_version(server: &RedisServer) -> String {
    let info = server.cmd(&["INFO", "server"]);
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

/// `SCRIPT LOAD` of the exact text (final newline included), returning the SHA.
fn load(server: &RedisServer, source: &str) -> BenchResult<String> {
    let mut con = redis::Client::open(server.url())?.get_connection()?;
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query(&mut con)?)
}

/// Runs the benchmark's command once with `redis-cli` (random key fixed) and checks the reply
/// has `items` lines (an array of that many, or one integer), not an error such as NOSCRIPT.
fn check_by_hand(server: &RedisServer, args: &[String], items: usize) -> BenchResult<()> {
    let fixed: Vec<String> = args
        .iter()
        .map(|a| a.replace("__rand_int__", "000000000042"))
        .collect();
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(server.port().to_string())
        .args(&fixed)
        .output()?;
    let reply = String::from_utf8_lossy(&out.stdout);
    let lines = reply.lines().count();
    if !out.status.success()
        || reply.contains("ERR")
        || reply.contains("NOSCRIPT")
        || lines != items
    {
        return Err(format!("unexpected reply to {fixed:?}: {reply:?}").into());
    }
    eprintln!(
        "checked by hand: {:?} -> {:?}",
        fixed.get(4..),
        reply.lines().collect::<Vec<_>>()
    );
    Ok(())
}

fn micros(d: Duration) -> String {
    if d >= Duration::from_millis(10) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{} µs", d.as_micros())
    }
}
