//! Deadlines (`src/deadline.rs`): a check that Redis runs after its caller gave up charges
//! nothing. Redis is frozen (SIGSTOP) while many tasks check one key: the calls queued on the
//! connection time out and are refused by the `deny` policy, and Redis runs them when it
//! thaws. Afterwards the key still admits its whole limit, in exact mode for every algorithm
//! and in lease mode: a refused call cost nothing. Without deadlines, every timed-out check
//! was charged (the limit was reached that many requests early) and a lease take that timed
//! out took units no one handed out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Lease, Limit, Limiter, OnStoreError, Outcome, Quota, StoreErrorKind};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

use crate::common::unique_namespace;
use crate::failover::HEAVY;

const TASKS: usize = 16;
/// A day: no unit comes back while a test runs (GCRA's and the token bucket's emission
/// interval is minutes).
const DAY: Duration = Duration::from_secs(86_400);
const FREEZE: Duration = Duration::from_millis(400);

/// What a run saw: requests admitted, refused by the limit, answered by the failure policy.
#[derive(Debug, Default)]
struct Tally {
    admitted: AtomicU64,
    limited: AtomicU64,
    timed_out: AtomicU64,
}

/// `TASKS` tasks check one key of `limit` until the limit refuses them; Redis is frozen for
/// [`FREEZE`] once `freeze_after` requests were admitted.
async fn run(redis: &RedisServer, limit: Limit, freeze_after: u64) -> (Arc<Tally>, (u64, u64)) {
    let name = limit.name().to_owned();
    let store = RedisStore::builder(redis.url())
        .timeout(Duration::from_millis(50))
        // Never open: every queued call meets Redis's silence itself.
        .circuit_breaker(u32::MAX, Duration::from_millis(100))
        .build()
        .await
        .expect("connect");
    let limiter = Arc::new(
        Limiter::builder(store.clone())
            .namespace(unique_namespace("deadline"))
            .limit(limit.on_store_error(OnStoreError::Deny))
            .build()
            .expect("limiter"),
    );
    let tally = Arc::new(Tally::default());
    let done = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (limiter, tally, done) =
                (Arc::clone(&limiter), Arc::clone(&tally), Arc::clone(&done));
            let name = name.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "the limit never refused"
                    );
                    let v = limiter.check(&name, &[("user", "1")]).await.expect("check");
                    match (v.outcome(), v.store_error()) {
                        (Outcome::Allowed, _) => tally.admitted.fetch_add(1, Ordering::Relaxed),
                        (Outcome::Limited { .. }, _) => {
                            done.store(true, Ordering::Relaxed);
                            tally.limited.fetch_add(1, Ordering::Relaxed)
                        }
                        (Outcome::Unavailable { .. }, Some(StoreErrorKind::Timeout)) => {
                            tally.timed_out.fetch_add(1, Ordering::Relaxed)
                        }
                        other => panic!("unexpected answer {other:?}: {v:?}"),
                    };
                }
            })
        })
        .collect();
    // Freeze once enough were admitted (bounded wait), then thaw.
    let waiting = Instant::now();
    while tally.admitted.load(Ordering::Relaxed) < freeze_after {
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "never admitted {freeze_after}: {tally:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    redis.pause();
    tokio::time::sleep(FREEZE).await;
    redis.resume();
    for t in tasks {
        t.await.expect("task");
    }
    (tally, store.late_and_unanswered())
}

/// Exact mode, every algorithm: the calls that timed out during the freeze were run by Redis
/// after it (their bytes were queued) and charged nothing; the key admits exactly its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_redis_runs_after_their_callers_gave_up_charge_nothing() {
    let _heavy = HEAVY.lock().await;
    let redis = RedisServer::start();
    const LIMIT: u64 = 600;
    for algorithm in Algorithm::ALL {
        let limit = Limit::new(
            algorithm.name(),
            algorithm,
            Quota::new(LIMIT, DAY).expect("valid"),
        )
        .expect("valid")
        .keyed_by(["user"])
        .expect("valid");
        let (tally, (late, given_back)) = run(&redis, limit, 100).await;
        assert!(
            tally.timed_out.load(Ordering::Relaxed) > 0,
            "{algorithm}: nothing timed out, the freeze tested nothing: {tally:?}"
        );
        // The calls that piled up during the freeze carried deadlines and ran late.
        assert!(
            late > 0,
            "{algorithm}: no script ran late ({given_back} given back): {tally:?}"
        );
        assert_eq!(
            tally.admitted.load(Ordering::Relaxed),
            LIMIT,
            "{algorithm}: refused calls were charged: {tally:?}"
        );
    }
}

/// Lease mode: Redis frozen at the start of the window, before any unit was handed out. The
/// takes that timed out, run by Redis after the thaw, took nothing: the key still admits its
/// whole limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_takes_redis_runs_after_their_callers_gave_up_take_nothing() {
    let _heavy = HEAVY.lock().await;
    let redis = RedisServer::start();
    const LIMIT: u64 = 2_000;
    let limit = Limit::new(
        "leased",
        Algorithm::FixedWindow,
        Quota::new(LIMIT, DAY).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .and_then(|l| l.lease(Lease::new().units(50)))
    .expect("valid");
    let (tally, (late, _)) = run(&redis, limit, 0).await;
    assert!(late > 0, "no lease take ran late");
    assert!(
        tally.timed_out.load(Ordering::Relaxed) > 0,
        "nothing timed out, the freeze tested nothing: {tally:?}"
    );
    assert_eq!(
        tally.admitted.load(Ordering::Relaxed),
        LIMIT,
        "timed-out takes kept units: {tally:?}"
    );
}

/// Each algorithm's single-entry script, called by hand with a deadline where the op goes
/// (`lua/one.lua`, `lua/one_gcra.lua`): one already past answers `late <now>` and writes
/// nothing; one ahead decides and charges as a plain check does.
#[test]
fn a_script_past_its_deadline_writes_nothing() {
    let redis = crate::common::server();
    for algorithm in Algorithm::ALL {
        let limit = Limit::new(
            algorithm.name(),
            algorithm,
            Quota::new(10, DAY).expect("valid"),
        )
        .expect("valid");
        let call = tollgate_redis::ScriptCall::check(&limit, 1);
        let sha = redis.cmd(&["SCRIPT", "LOAD", call.source]);
        let sha = sha.trim().trim_start_matches(['$', '+']);
        let sha = sha.lines().last().expect("a SHA");
        let time = redis.array(&["TIME"]);
        let now: u64 =
            time[0].parse::<u64>().expect("s") * 1_000_000 + time[1].parse::<u64>().expect("µs");
        let key = format!("deadline-test:{}", algorithm.name());
        let run = |deadline: u64| {
            let deadline = deadline.to_string();
            let mut args = vec!["EVALSHA", sha, "1", key.as_str()];
            args.extend(call.args.iter().map(String::as_str));
            args.push(deadline.as_str());
            redis.cmd(&args)
        };
        let past = run(now - 1_000_000);
        assert!(past.contains("late "), "{algorithm}: {past:?}");
        assert!(
            redis.cmd(&["EXISTS", &key]).contains(":0"),
            "{algorithm}: a late script wrote its key"
        );
        let ahead = run(now + 60_000_000);
        assert!(!ahead.contains("late"), "{algorithm}: {ahead:?}");
        assert!(
            redis.cmd(&["EXISTS", &key]).contains(":1"),
            "{algorithm}: a check in time wrote no key ({ahead:?})"
        );
        redis.cmd(&["DEL", &key]);
    }
}
