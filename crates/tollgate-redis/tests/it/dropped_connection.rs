//! One dropped connection is not an outage: `CLIENT KILL TYPE normal` five times under load
//! fails only the calls in flight at each kill; the circuit breaker counts each burst once and
//! stays closed, so every other caller keeps being decided by Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Limiter, Op, Outcome};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

use crate::common::unreachable_gcra;

/// What [`under_kills`] saw.
struct Kills {
    /// Calls made.
    total: u64,
    /// Calls not decided by Redis.
    failed: u64,
    /// Connections killed.
    killed: u64,
    /// How the failed calls were answered: the first few outcomes, for a failure's message.
    seen: Vec<String>,
}

/// Runs 32 callers of `op` for ~1.8 s while the connection is killed five times.
async fn under_kills(op: Op) -> Kills {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let limit = unreachable_gcra("kills");
    let limiter = Arc::new(Limiter::builder(store).limit(limit).build().expect("valid"));
    let (stop, total, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    // Each task's calls so far.
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..32).map(|_| AtomicU64::new(0)).collect());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..32u64)
        .map(|t| {
            let (limiter, stop, total, failed, done, seen) = (
                limiter.clone(),
                stop.clone(),
                total.clone(),
                failed.clone(),
                done.clone(),
                seen.clone(),
            );
            tokio::spawn(async move {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    i += 32;
                    let user = (i % 10_000).to_string();
                    let request = limiter
                        .prepare(&["kills"], &[("user", user.as_str())], 1)
                        .expect("valid");
                    let v = limiter.decide(&request, op).await;
                    total.fetch_add(1, Ordering::Relaxed);
                    done[t as usize].fetch_add(1, Ordering::Relaxed);
                    match v.outcome() {
                        Outcome::Allowed => {}
                        other => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let mut seen = seen.lock().expect("seen");
                            if seen.len() < 8 {
                                seen.push(format!("{other:?} ({:?})", v.decisions()));
                            }
                        }
                    }
                    // An open breaker answers without awaiting anything: yield, so that a
                    // failing run still lets the rest of the test run.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let mut killed = 0;
    for _ in 0..5 {
        // Pacing of the fault injection, not a wait for a window: load runs meanwhile.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // And our connection is back (a loaded machine may take longer than the pacing to
        // reconnect): a kill that finds no connection of ours tests nothing.
        let back = tokio::time::Instant::now() + Duration::from_secs(10);
        while server
            .cmd(&["CLIENT", "LIST", "TYPE", "normal"])
            .matches("id=")
            .count()
            < 2
        {
            assert!(
                tokio::time::Instant::now() < back,
                "the store never reconnected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // And every caller has had a call answered since: calls that were waiting for the
        // reconnection (a peek's one resend among them) are over, so this kill meets only
        // calls made on a working connection (on a loaded machine the reconnection can end
        // just before the kill, which then caught the resent peeks in flight).
        let before: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
        while done
            .iter()
            .zip(&before)
            .any(|(d, b)| d.load(Ordering::Relaxed) <= *b)
        {
            assert!(
                tokio::time::Instant::now() < back,
                "callers stalled after the reconnection"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let reply = server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
        killed += reply
            .trim()
            .trim_start_matches(':')
            .parse::<u64>()
            .unwrap_or(0);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("task");
    }
    let seen = seen.lock().expect("seen").clone();
    Kills {
        total: total.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        killed,
        seen,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kills_under_load_fail_only_the_calls_in_flight() {
    let Kills {
        total,
        failed,
        killed,
        ..
    } = under_kills(Op::Check).await;
    assert!(killed >= 5, "each kill dropped our connection: {killed}");
    assert!(total > 1_000, "load ran: {total}");
    // At most the 32 callers' calls in flight at each kill: not a share of the load, which
    // depends on how fast a shared machine runs it.
    assert!(
        failed <= killed * 32,
        "{failed} of {total} checks failed over {killed} kills (more than the 32 in flight at each)"
    );
}

/// A peek writes nothing, so one whose connection was lost is sent again: the kills cost
/// peeks nothing at all.
///
/// That includes a peek whose request the `redis` crate stranded as the connection closed
/// (pushed into the connection's channel just after its driver ended: no reply and no error
/// ever come). In one to five runs of a hundred, such a call waited out the store's patience
/// while Redis answered the others, and a peek ended `Overloaded` (seen twice in CI). The
/// patience now cuts a call that waited across a lost connection at its timeout, and the
/// peek is sent again (`patience.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peeks_survive_kills() {
    let Kills {
        total,
        failed,
        killed,
        seen,
    } = under_kills(Op::Peek).await;
    assert!(killed >= 5, "each kill dropped our connection: {killed}");
    assert!(total > 1_000, "load ran: {total}");
    assert_eq!(
        failed, 0,
        "{failed} of {total} peeks failed over {killed} kills: {seen:?}"
    );
}
