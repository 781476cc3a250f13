//! A frozen Redis (SIGSTOP) under load, through a spawned `tollgate serve`: the checks that
//! time out are answered 503 by the `deny` policy, and although Redis runs them when it
//! thaws (their bytes were queued), they cost nothing: afterwards the key still admits its
//! whole limit, in exact mode and in lease mode frozen at the window's start (issue #27,
//! items 3 and 4; `tollgate-redis`'s `deadline.rs` and `unanswered.rs`).

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate_testkit::RedisServer;

use crate::binary::Process;

const TASKS: usize = 16;

#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    limited: AtomicU64,
    unavailable: AtomicU64,
}

fn config(url: &str, limit: u64, lease: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    write!(
        file,
        r#"
[store]
redis = "{url}"
timeout = "50ms"

[[limits]]
name = "frozen"
algorithm = "fixed_window"
limit = {limit}
period = "1d"
key = ["user"]
on_store_error = "deny"
{lease}
"#
    )
    .expect("write config");
    file
}

/// `TASKS` clients check one key until it answers 429; Redis is frozen for 400 ms once
/// `freeze_after` checks were admitted.
async fn run(redis: &RedisServer, process: Arc<Process>, freeze_after: u64) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let done = Arc::new(AtomicBool::new(false));
    let body = r#"{"limit": "frozen", "key": {"user": "1"}}"#;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (process, tally, done) =
                (Arc::clone(&process), Arc::clone(&tally), Arc::clone(&done));
            tokio::spawn(async move {
                let started = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "the limit never refused"
                    );
                    let reply = process.post("/v1/check", body).await;
                    match reply.status {
                        200 => tally.ok.fetch_add(1, Ordering::Relaxed),
                        429 => {
                            done.store(true, Ordering::Relaxed);
                            tally.limited.fetch_add(1, Ordering::Relaxed)
                        }
                        503 => tally.unavailable.fetch_add(1, Ordering::Relaxed),
                        _ => panic!("unexpected reply {reply:?}"),
                    };
                }
            })
        })
        .collect();
    let waiting = Instant::now();
    while tally.ok.load(Ordering::Relaxed) < freeze_after {
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "never admitted {freeze_after}: {tally:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    redis.pause();
    tokio::time::sleep(Duration::from_millis(400)).await;
    redis.resume();
    for t in tasks {
        t.await.expect("task");
    }
    tally
}

/// A service on its own Redis with one fixed window of `limit` (`extra`: more of its fields),
/// frozen once `freeze_after` checks were admitted: some checks are answered 503, and the
/// key still admits exactly `limit`.
async fn freeze_admits_the_whole_limit(limit: u64, extra: &str, freeze_after: u64, what: &str) {
    let redis = RedisServer::start();
    let file = config(&redis.url(), limit, extra);
    let process = Arc::new(Process::serve(file.path()));
    let tally = run(&redis, Arc::clone(&process), freeze_after).await;
    assert!(
        tally.unavailable.load(Ordering::Relaxed) > 0,
        "no 503: the freeze tested nothing: {tally:?}"
    );
    assert_eq!(
        tally.ok.load(Ordering::Relaxed),
        limit,
        "{what}: {tally:?}\n{}",
        process.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_answered_503_during_a_freeze_are_not_charged() {
    freeze_admits_the_whole_limit(400, "", 50, "checks answered 503 were charged").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_takes_that_timed_out_keep_no_units() {
    freeze_admits_the_whole_limit(
        1_000,
        "mode = \"lease\"\nlease = 50",
        0,
        "lease takes that timed out kept units",
    )
    .await;
}
