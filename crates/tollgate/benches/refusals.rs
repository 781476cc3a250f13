//! Library decisions/s of a [`Limiter`] over the [`MemoryStore`] when most checks are refused
//! (issue #33: "watching must cost nothing"): every refusal also counts in the limit's
//! top-refused-keys sketch, so this is the path an abusive client floods.
//!
//! Only the public `Limiter` API of every release since the memory store is used, so that the
//! same file runs unchanged in an older tree (copy it there, with its `[[bench]]` entry) and
//! the rates of two builds can be compared in one sitting, alternating.
//!
//! Cases, each with 2 and 8 tokio tasks on a 2-worker runtime:
//! - `hot73`: 73 % of the checks go to 16 hot keys, spent before timing (so refused), 27 % to
//!   100 000 cold keys (admitted): a few abusers among many users;
//! - `hot1`: the same with 0.5 % hot checks (under 1 % refused);
//! - `flood73`: 73 % of the checks go to 200 000 keys of a one-per-hour limit, each spent
//!   before timing and visited in turn, so that every refusal is of a key the sketch does not
//!   hold (an attacker rotating keys), 27 % to the cold keys.
//!
//! Each task loops over its own pseudo-random plan of checks and yields to the runtime every
//! 32 checks (as a server's task waits for its next request), until the deadline. The rate is
//! all tasks' decisions over the wall time; the refused share actually seen is printed with
//! it.
//!
//! Usage: `cargo bench -p tollgate --bench refusals -- [filter…]`; `REFUSALS_SECS` (default
//! 3) sets each case's time. Output: one line per case,
//! `refusals/<case>/t<tasks> <decisions/s> decisions/s <refused %> refused <n> decisions/cpu-s`.
//!
//! The last figure divides the decisions by the CPU time the process's threads spent in the
//! timed part (Linux: `/proc/self/task/*/schedstat`, nanoseconds on a CPU). On a machine
//! busy with other work the wall-clock rate moves with what the scheduler grants; decisions
//! per CPU second move far less, so two builds compare better by it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Outcome, Quota};

/// Keys checked and admitted.
const COLD_KEYS: usize = 100_000;
/// Keys checked and refused in the `hot` cases.
const HOT_KEYS: usize = 16;
/// Keys refused once each in turn in the `flood` case.
const FLOOD_KEYS: usize = 200_000;
/// Checks per task plan (cycled).
const PLAN: usize = 1 << 16;
/// Checks between yields.
const BATCH: usize = 32;
/// The quota of cold and hot keys, per hour: far above what a cold key sees in a run.
const API_PER_HOUR: u64 = 10_000;

#[derive(Clone, Copy)]
enum Kind {
    /// Refusals on a few hot keys.
    Hot,
    /// Each refusal on a key not refused for a long time.
    Flood,
}

struct Case {
    name: &'static str,
    kind: Kind,
    /// Share of checks that go to refused keys, per 10 000.
    refused_bp: u64,
}

const CASES: [Case; 3] = [
    Case {
        name: "hot73",
        kind: Kind::Hot,
        refused_bp: 7_300,
    },
    Case {
        name: "hot1",
        kind: Kind::Hot,
        refused_bp: 50,
    },
    Case {
        name: "flood73",
        kind: Kind::Flood,
        refused_bp: 7_300,
    },
];

const TASKS: [usize; 2] = [2, 8];

/// One planned check: which limit, which key value.
#[derive(Clone, Copy)]
enum Step {
    Cold(u32),
    Hot(u32),
    /// The next flood key of this task.
    Flood,
}

struct Keys {
    cold: Vec<String>,
    hot: Vec<String>,
    flood: Vec<String>,
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn plan(case: &Case, task: usize) -> Vec<Step> {
    let mut x = 0x9E37_79B9_7F4A_7C15 ^ (task as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..PLAN)
        .map(|_| {
            let r = xorshift(&mut x);
            if r % 10_000 < case.refused_bp {
                match case.kind {
                    Kind::Hot => Step::Hot(((r >> 20) % HOT_KEYS as u64) as u32),
                    Kind::Flood => Step::Flood,
                }
            } else {
                Step::Cold(((r >> 20) % COLD_KEYS as u64) as u32)
            }
        })
        .collect()
}

fn limiter() -> Limiter<MemoryStore> {
    let api = Limit::new(
        "api",
        Algorithm::Gcra,
        Quota::per_hour(API_PER_HOUR).expect("quota"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("limit");
    let tight = Limit::new("tight", Algorithm::Gcra, Quota::per_hour(1).expect("quota"))
        .and_then(|l| l.keyed_by(["user"]))
        .expect("limit");
    Limiter::builder(MemoryStore::new())
        .limit(api)
        .limit(tight)
        .build()
        .expect("limiter")
}

async fn check(limiter: &Limiter<MemoryStore>, limit: &str, user: &str) -> bool {
    let verdict = limiter
        .check(limit, &[("user", user)])
        .await
        .expect("valid check");
    matches!(verdict.outcome(), Outcome::Allowed)
}

/// Touches every key, untimed: cold keys once, hot keys until refused, flood keys once
/// (spending their one unit).
async fn prefill(limiter: &Limiter<MemoryStore>, keys: &Keys, kind: Kind) {
    for k in &keys.cold {
        assert!(check(limiter, "api", k).await, "a cold key is admitted");
    }
    match kind {
        Kind::Hot => {
            for k in &keys.hot {
                while check(limiter, "api", k).await {}
            }
        }
        Kind::Flood => {
            for k in &keys.flood {
                check(limiter, "tight", k).await;
            }
        }
    }
}

/// Decisions/s, the refused share and decisions per CPU second of `case` with `tasks` tasks
/// for `secs`.
fn run_case(case: &Case, tasks: usize, secs: f64, keys: &Arc<Keys>) -> (f64, f64, f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let limiter = Arc::new(limiter());
        prefill(&limiter, keys, case.kind).await;
        let decisions = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let cpu_before = cpu_nanos();
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(secs);
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let (limiter, keys) = (Arc::clone(&limiter), Arc::clone(keys));
                let (decisions, refused) = (Arc::clone(&decisions), Arc::clone(&refused));
                let plan = plan(case, t);
                tokio::spawn(async move {
                    // Each task walks the flood keys from its own place.
                    let mut flood = t * (FLOOD_KEYS / tasks);
                    let (mut done, mut no) = (0u64, 0u64);
                    let mut i = 0;
                    while Instant::now() < deadline {
                        for _ in 0..BATCH {
                            let allowed = match plan[i] {
                                Step::Cold(k) => {
                                    check(&limiter, "api", &keys.cold[k as usize]).await
                                }
                                Step::Hot(k) => check(&limiter, "api", &keys.hot[k as usize]).await,
                                Step::Flood => {
                                    flood = (flood + 1) % FLOOD_KEYS;
                                    check(&limiter, "tight", &keys.flood[flood]).await
                                }
                            };
                            no += u64::from(!allowed);
                            done += 1;
                            i = (i + 1) % PLAN;
                        }
                        tokio::task::yield_now().await;
                    }
                    decisions.fetch_add(done, Ordering::Relaxed);
                    refused.fetch_add(no, Ordering::Relaxed);
                })
            })
            .collect();
        for h in handles {
            h.await.expect("task");
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = cpu_nanos().saturating_sub(cpu_before) as f64 / 1e9;
        let (d, r) = (
            decisions.load(Ordering::Relaxed) as f64,
            refused.load(Ordering::Relaxed) as f64,
        );
        (d / elapsed, 100.0 * r / d.max(1.0), d / cpu.max(1e-9))
    })
}

/// Nanoseconds the process's live threads have spent on a CPU (0 where `/proc` is missing).
fn cpu_nanos() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let secs: f64 = std::env::var("REFUSALS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let keys = Arc::new(Keys {
        cold: (0..COLD_KEYS).map(|i| format!("c{i}")).collect(),
        hot: (0..HOT_KEYS).map(|i| format!("h{i}")).collect(),
        flood: (0..FLOOD_KEYS).map(|i| format!("f{i}")).collect(),
    });
    for case in &CASES {
        for tasks in TASKS {
            let id = format!("refusals/{}/t{tasks}", case.name);
            if !filters.is_empty() && !filters.iter().any(|f| id.contains(f.as_str())) {
                continue;
            }
            let (rate, refused, per_cpu) = run_case(case, tasks, secs, &keys);
            println!(
                "{id} {rate:.0} decisions/s {refused:.1} % refused {per_cpu:.0} decisions/cpu-s"
            );
        }
    }
}
