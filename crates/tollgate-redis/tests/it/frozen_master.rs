//! A cluster master frozen (`SIGSTOP`, as a paused VM or a stalled host): its connections
//! stay open and nothing is answered, so the `redis` crate never learns from it that its
//! slots moved. The cluster fails it over; the store must follow while it is still frozen
//! (`src/store/slot_watch.rs`), not only once it thaws and answers `MOVED`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Lease, Limit, Limiter, OnStoreError, Outcome, Quota, Source};
use tollgate_redis::RedisStore;
use tollgate_testkit::{RedisCluster, RedisServer};

use crate::common::unique_namespace;
use crate::failover::HEAVY;

/// How long after the cluster promoted the replica a check may still be answered by the
/// failure policy. Generous for a debug build on two loaded cores; measured about 1–2 s.
const DECIDED_WITHIN: Duration = Duration::from_secs(10);

/// Thaws the frozen node when the test ends, however it ends (before the cluster kills it).
struct Thaw<'a>(&'a RedisServer);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// A limiter on `cluster` (50 ms store timeout) with a GCRA limit `gcra` and a lease-mode
/// fixed window `fw`, both keyed by `user`, far above any load, whose checks are refused by
/// policy (`deny`) when the store fails; its namespace unique to `name`.
async fn limiter(cluster: &RedisCluster, name: &str) -> Arc<Limiter<RedisStore>> {
    let store = RedisStore::cluster_builder(cluster.urls())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to the cluster: {e:?}\n{}", cluster.logs()));
    let limit = Limit::new(
        "gcra",
        Algorithm::Gcra,
        Quota::per_second(1_000_000).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("valid")
    .on_store_error(OnStoreError::Deny);
    let leased = Limit::new(
        "fw",
        Algorithm::FixedWindow,
        Quota::per_second(1_000_000).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .and_then(|l| l.lease(Lease::new().units(1).ttl(Duration::from_millis(500))))
    .expect("valid")
    .on_store_error(OnStoreError::Deny);
    Arc::new(
        Limiter::builder(store)
            .namespace(unique_namespace(name))
            .limit(limit)
            .limit(leased)
            .build()
            .expect("valid"),
    )
}

/// One check: when it started and ended, and whether the store decided it.
type Sample = (Instant, Instant, bool);

/// The master of a checked key's slot is frozen; once its replica is promoted, checks on the
/// key are decided by the store again, on the new master, while the old one stays frozen.
/// Before the fix, every check on the key failed (by policy) until the old master thawed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_is_failed_over_from_while_still_frozen() {
    let _alone = HEAVY.lock().await;
    let cluster = RedisCluster::start_with_replicas();
    let limiter = limiter(&cluster, "frozen").await;
    let key = limiter
        .prepare(&["gcra"], &[("user", "f")], 1)
        .expect("valid")
        .entries()[0]
        .key()
        .as_str()
        .to_owned();
    let frozen = cluster.master_for_slot(cluster.slot_of(&key));
    let port = frozen.port();
    let first = limiter
        .check("gcra", &[("user", "f")])
        .await
        .expect("known");
    assert_eq!(first.outcome(), Outcome::Allowed, "{first:?}");

    // Check the key, one check after another, until told to stop.
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let (limiter, samples, stop) = (
            Arc::clone(&limiter),
            Arc::clone(&samples),
            Arc::clone(&stop),
        );
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                let v = limiter
                    .check("gcra", &[("user", "f")])
                    .await
                    .expect("known");
                let decided = match v.outcome() {
                    Outcome::Allowed => v.decisions()[0].source == Source::Store,
                    Outcome::Unavailable { .. } => false,
                    other => panic!("refused by a limit no load reaches: {other:?}"),
                };
                samples
                    .lock()
                    .expect("samples")
                    .push((started, Instant::now(), decided));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    frozen.pause();
    let frozen_at = Instant::now();
    let _thaw = Thaw(frozen);
    // The cluster marks the node failed and promotes its replica (CLUSTER NODES on the others).
    let new_master =
        tokio::task::block_in_place(|| cluster.wait_for_failover(port, Duration::from_secs(30)));
    let promoted_at = Instant::now();
    assert_ne!(new_master, port);

    // Within the bound, a check that started after the promotion is decided by the store.
    let deadline = promoted_at + DECIDED_WITHIN;
    let decided_at = loop {
        let first_decided = samples
            .lock()
            .expect("samples")
            .iter()
            .find(|(at, _, decided)| *at > promoted_at && *decided)
            .map(|(_, end, _)| *end);
        if let Some(end) = first_decided {
            break Some(end);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    checker.await.expect("checker");
    let samples = samples.lock().expect("samples").clone();
    let failed_while_frozen = samples
        .iter()
        .filter(|(at, _, decided)| *at > frozen_at && *at < promoted_at && !decided)
        .count();
    let decided_at = decided_at.unwrap_or_else(|| {
        panic!(
            "no check on the frozen master's slot was decided by the store within \
             {DECIDED_WITHIN:?} of its replica's promotion, the old master still frozen \
             ({} checks since the freeze, none decided after the promotion; frozen → \
             promoted {:?})",
            samples.iter().filter(|(at, _, _)| *at > frozen_at).count(),
            promoted_at - frozen_at
        )
    });
    let slowest_failure = samples
        .iter()
        .filter(|(_, _, decided)| !decided)
        .map(|(at, end, _)| *end - *at)
        .max()
        .unwrap_or_default();
    eprintln!(
        "frozen master: frozen → promoted {:?}, promoted → first decided check {:?}; \
         {failed_while_frozen} checks failed before the promotion, the slowest failure took {:?}",
        promoted_at - frozen_at,
        decided_at - promoted_at,
        slowest_failure
    );
    assert!(
        failed_while_frozen > 0,
        "the freeze must have been felt: no check failed between the freeze and the promotion"
    );
    // The decisions are the new master's, the old one still frozen.
    let v = limiter
        .check("gcra", &[("user", "f")])
        .await
        .expect("known");
    assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
    assert_eq!(v.decisions()[0].source, Source::Store, "{v:?}");
}

/// A master frozen while the others answer: checks on its slot fail after about the store's
/// timeout (50 ms), as on a silent single Redis, and so do reservations, lease-mode checks and
/// resets. Replies were counted for the whole cluster, so the other masters' answers kept
/// each such call waiting a whole second more (`src/store/node_replies.rs`): every check
/// took over a second, and the other calls still did after checks were fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_masters_checks_fail_within_the_timeout_while_others_answer() {
    let _alone = HEAVY.lock().await;
    let cluster = RedisCluster::start();
    let limiter = limiter(&cluster, "frozen-others").await;
    let master_of_in = |limit: &str, user: &str| {
        let request = limiter
            .prepare(&[limit], &[("user", user)], 1)
            .expect("valid");
        let key = request.entries()[0].key().as_str().to_owned();
        cluster.master_for_slot(cluster.slot_of(&key)).port()
    };
    let master_of = |user: &str| master_of_in("gcra", user);
    let frozen = master_of("f");
    // A user whose lease-mode key is on the frozen master.
    let leaser = (0..1000)
        .map(|i| format!("l{i}"))
        .find(|u| master_of_in("fw", u) == frozen)
        .expect("a lease key on the frozen master");
    // Users whose keys are on the other masters, checked without pause during the freeze.
    let others: Vec<String> = (0..200)
        .map(|i| format!("o{i}"))
        .filter(|u| master_of(u) != frozen)
        .take(4)
        .collect();
    assert_eq!(others.len(), 4, "keys on the other masters");
    let first = limiter
        .check("gcra", &[("user", "f")])
        .await
        .expect("known");
    assert_eq!(first.outcome(), Outcome::Allowed, "{first:?}");

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let decided_elsewhere = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let load: Vec<_> = others
        .into_iter()
        .map(|user| {
            let (limiter, stop, decided) = (
                Arc::clone(&limiter),
                Arc::clone(&stop),
                Arc::clone(&decided_elsewhere),
            );
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let v = limiter
                        .check("gcra", &[("user", &user)])
                        .await
                        .expect("known");
                    if v.decisions()[0].source == Source::Store {
                        decided.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    let node = cluster
        .nodes()
        .iter()
        .find(|n| n.port() == frozen)
        .expect("the frozen master");
    node.pause();
    let _thaw = Thaw(node);
    let decided_before = decided_elsewhere.load(std::sync::atomic::Ordering::Relaxed);
    let mut took = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let v = limiter
            .check("gcra", &[("user", "f")])
            .await
            .expect("known");
        took.push(started.elapsed());
        assert!(
            matches!(v.outcome(), Outcome::Unavailable { .. }),
            "a check on the frozen master was decided: {v:?}"
        );
    }
    // Reservations, lease-mode checks and resets: three of each.
    let (mut reserves, mut leases, mut resets) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let started = Instant::now();
        let reserved = limiter
            .reserve("gcra", &[("user", "f")], 1, Duration::from_secs(5))
            .await
            .expect("known");
        reserves.push(started.elapsed());
        assert!(reserved.slot().is_none(), "reserved on a frozen master");
        let started = Instant::now();
        let v = limiter
            .check("fw", &[("user", leaser.as_str())])
            .await
            .expect("known");
        leases.push(started.elapsed());
        assert!(
            matches!(v.outcome(), Outcome::Unavailable { .. }),
            "a lease-mode check on the frozen master was decided: {v:?}"
        );
        let started = Instant::now();
        let request = limiter
            .prepare(&["gcra"], &[("user", "f")], 1)
            .expect("valid");
        let reset = limiter.reset(&request).await;
        resets.push(started.elapsed());
        assert!(reset.is_err(), "a reset on a frozen master succeeded");
    }
    let decided_during =
        decided_elsewhere.load(std::sync::atomic::Ordering::Relaxed) - decided_before;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in load {
        task.await.expect("load task");
    }
    assert!(
        decided_during > 0,
        "the other masters must have answered meanwhile"
    );
    took.sort();
    let median = took[took.len() / 2];
    eprintln!("frozen master, others answering ({decided_during} checks): failures took {took:?}");
    assert!(
        median < Duration::from_millis(500),
        "checks on a frozen master waited on the other masters' answers: {took:?}"
    );
    for (what, mut took) in [("reserve", reserves), ("lease", leases), ("reset", resets)] {
        took.sort();
        eprintln!("frozen master, others answering: {what} took {took:?}");
        assert!(
            took[1] < Duration::from_millis(500),
            "{what} calls on a frozen master waited on the other masters' answers: {took:?}"
        );
    }
}
