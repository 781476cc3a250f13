//! Reservations across processes on Redis's clock: 4 OS processes (this test binary, re-run
//! in a child role) × 50 tasks each acquire one slot of one GCRA key and one token bucket
//! key, 50 per second with a burst of 1. Every slot handed out is the limit's schedule: the
//! slots, sorted, are exactly one emission interval apart (none given twice, none skipped:
//! 0 over the limit in any window, 100 % of the rate used while callers wait), and each
//! acquire made exactly one store call.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, Namespace, OnStoreError, Outcome, Quota};
use tollgate_redis::RedisStore;

use crate::common::{server, unique_namespace};

const PROCESSES: usize = 4;
const TASKS: usize = 50;
const ROLE: &str = "TOLLGATE_IT_PACING_CHILD";
/// 50 per second: T = 20 ms, a whole number of ms (the common case on Redis's clock).
const RATE: u64 = 50;
const T_MICROS: u64 = 1_000_000 / RATE;

fn limits() -> Vec<Limit> {
    [Algorithm::Gcra, Algorithm::TokenBucket]
        .into_iter()
        .map(|a| {
            let quota = Quota::new(RATE, Duration::from_secs(1))
                .and_then(|q| q.with_burst(1))
                .expect("valid");
            Limit::new(a.name(), a, quota)
                .expect("valid")
                .on_store_error(OnStoreError::Deny)
        })
        .collect()
}

#[test]
fn acquires_across_processes_follow_the_schedule_exactly() {
    if std::env::var(ROLE).is_ok() {
        child();
        return;
    }
    let server = server();
    let ns = unique_namespace("pacing");
    let go = format!("{}:go", ns.prefix());
    let ready = format!("{}:ready", ns.prefix());
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "pacing_processes::acquires_across_processes_follow_the_schedule_exactly",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, "1")
                .env("TOLLGATE_IT_URL", server.url())
                .env("TOLLGATE_IT_NS", ns.prefix())
                .env("TOLLGATE_IT_GO", &go)
                .env("TOLLGATE_IT_READY", &ready)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn child process")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = server.cmd(&["GET", &ready]);
        if n.contains(&format!("\r\n{PROCESSES}\r\n")) {
            break;
        }
        assert!(Instant::now() < deadline, "children not ready: {n:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut push = vec!["RPUSH", go.as_str()];
    push.extend((0..PROCESSES).map(|_| "go"));
    server.cmd(&push);
    let mut slots = std::collections::HashMap::<String, Vec<u64>>::new();
    let mut calls = 0u64;
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
            if let Some((alg, ticket)) = line
                .split_once("SLOT ")
                .and_then(|(_, r)| r.split_once(' '))
            {
                slots
                    .entry(alg.to_owned())
                    .or_default()
                    .push(ticket.parse().expect("µs"));
            }
            if let Some(n) = line.split_once("CALLS ").map(|(_, r)| r) {
                calls += n.trim().parse::<u64>().expect("count");
            }
        }
    }
    let admitted = (PROCESSES * TASKS) as u64;
    for a in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let mut got = slots.remove(a.name()).unwrap_or_default();
        assert_eq!(
            got.len() as u64,
            admitted,
            "{a}: every acquire got a slot\n{outputs}"
        );
        got.sort_unstable();
        let gaps: Vec<u64> = got.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|&g| g == T_MICROS),
            "{a}: slots not exactly {T_MICROS} µs apart: {gaps:?}"
        );
    }
    assert_eq!(calls, 2 * admitted, "one store call per acquire\n{outputs}");
}

/// The child role: connect, report ready, wait for the start, acquire, print the slots.
fn child() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let (url, ns, go, ready) = (
        var("TOLLGATE_IT_URL"),
        var("TOLLGATE_IT_NS"),
        var("TOLLGATE_IT_GO"),
        var("TOLLGATE_IT_READY"),
    );
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
        let counted = tollgate_testkit::CountingStore::new(store);
        let limiter = std::sync::Arc::new(
            Limiter::builder(counted.clone())
                .namespace(Namespace::new(ns).expect("valid"))
                .limits(limits())
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
        // Each algorithm's tasks on their own, so each key has all its callers waiting
        // from the start (a gap in the slots is then a slot lost, not a lull in demand).
        let mut tasks = Vec::new();
        for a in [Algorithm::Gcra, Algorithm::TokenBucket] {
            for _ in 0..TASKS {
                let limiter = limiter.clone();
                tasks.push(tokio::spawn(async move {
                    let none: [(&str, &str); 0] = [];
                    let r = limiter
                        .acquire(a.name(), &none, 1, Duration::from_secs(60))
                        .await
                        .expect("valid");
                    assert_eq!(r.outcome(), Outcome::Allowed, "{a}: {r:?}");
                    (a.name(), r.slot().expect("a slot").ticket())
                }));
            }
        }
        for t in tasks {
            let (name, ticket) = t.await.expect("task");
            println!("SLOT {name} {ticket}");
        }
        println!("CALLS {}", counted.calls());
    });
}
