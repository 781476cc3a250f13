//! Exactness under real concurrency: several OS processes (this test binary, re-executed in
//! a child role), each with many tasks on its own connection, race on one key per algorithm.
//! A race-free store admits exactly the limit. The store coalesces calls (its default), so
//! the race also runs through batch calls: the children say how many they made.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, Namespace, OnStoreError, Outcome, Quota, Timestamp};
use tollgate_redis::RedisStore;

use crate::common::{server, unique_namespace};

const PROCESSES: usize = 4;
const TASKS: usize = 50;
const CALLS_PER_TASK: usize = 2;
const LIMIT: u64 = 100;
const ROLE: &str = "TOLLGATE_IT_CHILD";

fn limits() -> Vec<Limit> {
    // A day per 100 units: nothing replenishes during the test.
    Algorithm::ALL
        .into_iter()
        .map(|a| {
            Limit::new(
                a.name(),
                a,
                Quota::new(LIMIT, Duration::from_secs(86_400)).expect("valid"),
            )
            .expect("valid")
            .on_store_error(OnStoreError::Deny)
        })
        .collect()
}

/// 4 processes × 50 tasks × 2 calls on one key, every algorithm, limit 100: exactly 100 pass.
#[test]
fn processes_racing_on_one_key_admit_exactly_the_limit() {
    if let Ok(role) = std::env::var(ROLE) {
        if role == "race" {
            child_race();
        }
        return;
    }
    let server = server();
    let ns = unique_namespace("race");
    let go = format!("{}:go", ns.prefix());
    let ready = format!("{}:ready", ns.prefix());
    // Fixed window: every process decides at one explicit instant inside one window (the
    // others use Redis's clock).
    let fixed_now = 1_893_456_000_000_000_u64 + 3_600_000_000;
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "concurrency::processes_racing_on_one_key_admit_exactly_the_limit",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, "race")
                .env("TOLLGATE_IT_URL", server.url())
                .env("TOLLGATE_IT_NS", ns.prefix())
                .env("TOLLGATE_IT_GO", &go)
                .env("TOLLGATE_IT_READY", &ready)
                .env("TOLLGATE_IT_FIXED_NOW", fixed_now.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn child process")
        })
        .collect();
    // Start line: wait until every child is connected, then release them together.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = server.cmd(&["GET", &ready]);
        if n.contains(&format!("\r\n{PROCESSES}\r\n")) {
            break;
        }
        assert!(Instant::now() < deadline, "children not ready: {n:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let tokens: Vec<&str> = (0..PROCESSES).map(|_| "go").collect();
    let mut push = vec!["RPUSH", go.as_str()];
    push.extend(tokens);
    server.cmd(&push);
    let mut admitted = std::collections::HashMap::<String, u64>::new();
    let mut batches = 0;
    let mut outputs = String::new();
    for child in children {
        let out = child.wait_with_output().expect("child output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push_str(&stdout);
        for line in stdout.lines() {
            // The test harness may print its own text before ours on the same line.
            if let Some(rest) = line.split_once("ADMITTED ").map(|(_, r)| r) {
                let (alg, n) = rest.split_once(' ').expect("alg and count");
                *admitted.entry(alg.to_owned()).or_default() += n.parse::<u64>().expect("count");
            }
            if let Some(n) = line.split_once("BATCHES ").map(|(_, r)| r) {
                batches += n.trim().parse::<u64>().expect("count");
            }
        }
    }
    assert!(
        batches > 0,
        "50 tasks per process made no batch call: coalescing never happened\n{outputs}"
    );
    for a in Algorithm::ALL {
        assert_eq!(
            admitted.get(a.name()).copied(),
            Some(LIMIT),
            "{a}: {PROCESSES} processes × {TASKS} tasks × {CALLS_PER_TASK} calls, limit {LIMIT}\n{outputs}"
        );
    }
}

/// The child role: connect, report ready, wait for the start, race, print counts.
fn child_race() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let (url, ns, go, ready) = (
        var("TOLLGATE_IT_URL"),
        var("TOLLGATE_IT_NS"),
        var("TOLLGATE_IT_GO"),
        var("TOLLGATE_IT_READY"),
    );
    let fixed_now: u64 = var("TOLLGATE_IT_FIXED_NOW").parse().expect("number");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let store = RedisStore::builder(url.as_str())
            .timeout(Duration::from_secs(10))
            .build()
            .await
            .expect("connect");
        let counted = store.clone();
        let ns = Namespace::new(ns).expect("valid");
        let limiter = std::sync::Arc::new(
            Limiter::builder(store.clone())
                .namespace(ns.clone())
                .limits(
                    limits()
                        .into_iter()
                        .filter(|l| l.algorithm() != Algorithm::FixedWindow),
                )
                .build()
                .expect("limiter"),
        );
        let fixed = std::sync::Arc::new(
            Limiter::builder(store)
                .namespace(ns)
                .limits(
                    limits()
                        .into_iter()
                        .filter(|l| l.algorithm() == Algorithm::FixedWindow),
                )
                .clock(tollgate::FakeClock::new(Timestamp::from_micros(fixed_now)))
                .build()
                .expect("limiter"),
        );
        let mut con = redis::Client::open(url.as_str())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let _: i64 = redis::cmd("INCR")
            .arg(&ready)
            .query_async(&mut con)
            .await
            .expect("incr");
        let started: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&go)
            .arg(30)
            .query_async(&mut con)
            .await
            .expect("blpop");
        assert!(started.is_some(), "no start signal within 30 s");
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let limiter = limiter.clone();
            let fixed = fixed.clone();
            tasks.push(tokio::spawn(async move {
                let mut won = Vec::new();
                for _ in 0..CALLS_PER_TASK {
                    for a in Algorithm::ALL {
                        let l = if a == Algorithm::FixedWindow {
                            &fixed
                        } else {
                            &limiter
                        };
                        let v = l.check(a.name(), &[("k", "one")]).await.expect("check");
                        assert!(v.store_error().is_none(), "{a}: store failed: {v:?}");
                        if v.outcome() == Outcome::Allowed {
                            won.push(a.name());
                        }
                    }
                }
                won
            }));
        }
        let mut counts = std::collections::HashMap::<&str, u64>::new();
        for t in tasks {
            for name in t.await.expect("task") {
                *counts.entry(name).or_default() += 1;
            }
        }
        for a in Algorithm::ALL {
            println!(
                "ADMITTED {} {}",
                a.name(),
                counts.get(a.name()).copied().unwrap_or(0)
            );
        }
        println!("BATCHES {}", counted.batches());
    });
}
