//! Fail-overs under load: a Sentinel group's master and a cluster master are SIGKILLed while
//! 16 tasks check GCRA and fixed window limits (deny policy) through one store; their
//! replica is promoted, and checks resume on it without a restart.
//!
//! Each test measures, and prints for docs/benchmarks.md: the share of failed checks, the
//! time from the kill to the first decided check, and that time against when the new master
//! became reachable (polled every 100 ms, so a late bound). It asserts the goals:
//! the first decided check within 1 s of the new master answering, and no failed check once
//! the new master answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, OnStoreError, Outcome, Quota};
use tollgate_redis::RedisStore;
use tollgate_testkit::{RedisCluster, SentinelGroup};

use crate::common::unique_namespace;

const TASKS: usize = 16;
/// Pause between two checks of one task: enough load to see every moment of the failover,
/// little enough to leave the two cores to the failover itself.
const PACE: Duration = Duration::from_millis(2);

/// Limits no load reaches, refusing when the store fails: every check decided by the store
/// is admitted, every failure is a refusal by policy.
fn limits() -> Vec<Limit> {
    [Algorithm::Gcra, Algorithm::FixedWindow]
        .into_iter()
        .map(|a| {
            Limit::new(a.name(), a, Quota::per_second(1_000_000).expect("valid"))
                .expect("valid")
                .keyed_by(["user"])
                .expect("valid")
                .on_store_error(OnStoreError::Deny)
        })
        .collect()
}

/// How long after the harness saw the new master answering a check may still fail: the
/// harness polls every 100 ms, and behind Sentinel the store looks for the master every
/// 100 ms at most while calls fail (`src/sentinel.rs`).
const SETTLE: Duration = Duration::from_millis(200);

/// Only one topology test of this file and `resharding.rs` runs at a time: each starts
/// several Redis processes and loads them, and on two cores, run together, they measure the
/// machine's starvation rather than the store.
pub(crate) static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One check: when it started, when it ended, and whether the store decided it.
type Sample = (Instant, Instant, bool);

/// Checks `user` with every limit from [`TASKS`] tasks until `stop`.
fn load(
    limiter: &Arc<Limiter<RedisStore>>,
    user: &str,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Sample>>> {
    (0..TASKS)
        .map(|_| {
            let (limiter, stop, user) = (Arc::clone(limiter), Arc::clone(stop), user.to_owned());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for name in ["gcra", "fixed_window"] {
                        let started = Instant::now();
                        let v = limiter
                            .check(name, &[("user", user.as_str())])
                            .await
                            .expect("known");
                        let decided = match v.outcome() {
                            Outcome::Allowed => true,
                            Outcome::Unavailable { .. } => false,
                            other => {
                                panic!("{name}: refused by a limit no load reaches: {other:?}")
                            }
                        };
                        samples.push((started, Instant::now(), decided));
                    }
                    tokio::time::sleep(PACE).await;
                }
                samples
            })
        })
        .collect()
}

/// What a failover cost the load.
#[derive(Debug)]
struct Measured {
    checks: usize,
    failed: usize,
    /// From the kill to the first check started after it and decided.
    kill_to_first_decided: Duration,
    /// From the kill until the new master was seen answering (polled).
    kill_to_promoted: Duration,
    /// Failed checks started after the first decided one.
    failed_after_first_decided: usize,
    /// Failed checks started after the new master was seen answering, give or take the
    /// harness's poll and the store's look interval ([`SETTLE`]).
    failed_after_recovery: usize,
    /// The whole run.
    run: Duration,
}

/// Runs the load on `limiter` for `user`, calls `kill` (which returns when the old master is
/// dead), then `promoted` (which returns once the new master answers), and goes on until
/// checks have been decided again for 2 s.
async fn measure(
    limiter: Arc<Limiter<RedisStore>>,
    user: &str,
    kill: impl FnOnce() + Send + 'static,
    promoted: impl FnOnce() + Send + 'static,
) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles = load(&limiter, user, &stop);
    // Let the load settle on the old master.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = tokio::task::spawn_blocking(move || {
        kill();
        Instant::now()
    })
    .await
    .expect("kill");
    let promoted_at = tokio::task::spawn_blocking(move || {
        promoted();
        Instant::now()
    })
    .await
    .expect("wait for the new master");
    // Keep loading for 3 s after the new master answered (bounded: the failover is over).
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples: Vec<Sample> = Vec::new();
    for h in handles {
        samples.extend(h.await.expect("load task"));
    }
    samples.sort_by_key(|(at, _, _)| *at);
    // The first check decided after the kill: the earliest end of a decided check that
    // started after it (a call may also wait for the new master rather than fail).
    let first_decided = samples
        .iter()
        .filter(|(at, _, ok)| *at > killed_at && *ok)
        .map(|(_, end, _)| *end)
        .min()
        .unwrap_or_else(|| {
            panic!(
                "no check was decided after the failover ({} checks)",
                samples.len()
            )
        });
    Measured {
        checks: samples.len(),
        failed: samples.iter().filter(|(_, _, ok)| !ok).count(),
        kill_to_first_decided: first_decided - killed_at,
        kill_to_promoted: promoted_at - killed_at,
        failed_after_first_decided: samples
            .iter()
            .filter(|(at, _, ok)| *at > first_decided && !ok)
            .count(),
        failed_after_recovery: samples
            .iter()
            .filter(|(at, _, ok)| *at > promoted_at + SETTLE && !ok)
            .count(),
        run: promoted_at + Duration::from_secs(3) - t0,
    }
}

fn report(what: &str, m: &Measured) {
    let share = m.failed as f64 / m.checks as f64;
    let window = (m.kill_to_first_decided.as_secs_f64() / m.run.as_secs_f64()).min(1.0);
    eprintln!(
        "{what}: {} checks, {} failed ({:.1} % of the run; the failover window is {:.1} % of it); \
         kill → new master answering {:?}, kill → first decided check {:?}; failed after the first \
         decided check: {}, after the new master answered: {}",
        m.checks,
        m.failed,
        share * 100.0,
        window * 100.0,
        m.kill_to_promoted,
        m.kill_to_first_decided,
        m.failed_after_first_decided,
        m.failed_after_recovery
    );
}

/// Asserts the goals on `m`.
fn assert_goals(what: &str, m: &Measured) {
    report(what, m);
    assert!(
        m.kill_to_first_decided >= Duration::from_millis(100),
        "{what}: the kill must have been felt (no check decided within 100 ms of it): {m:?}"
    );
    assert!(
        m.kill_to_first_decided <= m.kill_to_promoted + Duration::from_secs(1),
        "{what}: first decided check more than 1 s after the new master answered: {m:?}"
    );
    assert_eq!(
        m.failed_after_recovery, 0,
        "{what}: checks failed after recovery: {m:?}"
    );
    let window = m.kill_to_first_decided.as_secs_f64() / m.run.as_secs_f64();
    let share = m.failed as f64 / m.checks as f64;
    assert!(
        share <= window + 0.02,
        "{what}: {share:.3} of checks failed, more than the failover window's share {window:.3}: {m:?}"
    );
}

fn limiter(store: RedisStore) -> Arc<Limiter<RedisStore>> {
    let mut builder = Limiter::builder(store).namespace(unique_namespace("failover"));
    for l in limits() {
        builder = builder.limit(l);
    }
    Arc::new(builder.build().expect("valid"))
}

/// Sentinel: the master is SIGKILLed under load; the sentinels promote the replica; the
/// store follows it without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    let _alone = HEAVY.lock().await;
    let group = Arc::new(std::sync::Mutex::new(SentinelGroup::start()));
    let (urls, name) = {
        let g = group.lock().expect("group");
        (g.sentinel_urls(), g.master_name().to_owned())
    };
    let store = RedisStore::sentinel_builder(urls, name)
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect through the sentinels: {e:?}\n{}",
                group.lock().expect("g").logs()
            )
        });
    let old = Arc::new(std::sync::atomic::AtomicU16::new(0));
    let (g1, g2, o1, o2) = (
        Arc::clone(&group),
        Arc::clone(&group),
        Arc::clone(&old),
        Arc::clone(&old),
    );
    let m = measure(
        limiter(store.clone()),
        "s",
        move || o1.store(g1.lock().expect("g").kill_master(), Ordering::SeqCst),
        move || {
            g2.lock()
                .expect("g")
                .wait_for_new_master(o2.load(Ordering::SeqCst), Duration::from_secs(30));
        },
    )
    .await;
    assert_goals("sentinel failover", &m);
    assert!(!store.circuit_open());
}

/// Cluster: the master of the loaded key's slot is SIGKILLed; its replica is promoted; the
/// store follows the new slot map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_under_load() {
    let _alone = HEAVY.lock().await;
    let cluster = RedisCluster::start_with_replicas();
    let store = RedisStore::cluster_builder(cluster.urls())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to the cluster: {e:?}\n{}", cluster.logs()));
    let limiter = limiter(store);
    let key = limiter
        .prepare(&["gcra"], &[("user", "c")], 1)
        .expect("valid")
        .entries()[0]
        .key()
        .as_str()
        .to_owned();
    let port = cluster.master_for_slot(cluster.slot_of(&key)).port();
    let cluster = Arc::new(std::sync::Mutex::new(cluster));
    let (c1, c2) = (Arc::clone(&cluster), Arc::clone(&cluster));
    let m = measure(
        limiter,
        "c",
        move || c1.lock().expect("c").kill_node(port),
        move || {
            c2.lock()
                .expect("c")
                .wait_for_failover(port, Duration::from_secs(30));
        },
    )
    .await;
    assert_goals("cluster failover", &m);
}

/// The local tiers through a Sentinel failover: a key the deny cache holds as refused stays
/// refused throughout, answered locally (no store call, so no failure); a lease-mode limit
/// admits during the failover only what its lease still holds, and over the whole run no
/// more than the limit plus one lease. Replication is waited for (`WAIT`) before the kill:
/// what an asynchronous replica loses is Redis's bound, not tollgate's (docs/redis.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_and_leases_hold_through_a_sentinel_failover() {
    const LEASED: u64 = 200;
    const K: u64 = 10;
    let _alone = HEAVY.lock().await;
    let mut group = SentinelGroup::start();
    let store = RedisStore::sentinel_builder(group.sentinel_urls(), group.master_name())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect through the sentinels: {e:?}\n{}", group.logs()));
    let day = Duration::from_secs(86_400);
    let spent = Limit::new("spent", Algorithm::Gcra, Quota::new(5, day).expect("valid"))
        .and_then(|l| l.keyed_by(["user"]))
        .expect("valid")
        .on_store_error(OnStoreError::Deny);
    let leased = Limit::new(
        "leased",
        Algorithm::FixedWindow,
        Quota::new(LEASED, day).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .and_then(|l| l.lease(tollgate::Lease::new().units(K)))
    .expect("valid")
    .on_store_error(OnStoreError::Deny);
    let limiter = Limiter::builder(store)
        .namespace(unique_namespace("tiers"))
        .deny_cache(100)
        .limit(spent)
        .limit(leased)
        .build()
        .expect("valid");
    let key = [("user", "u")];
    for _ in 0..5 {
        let v = limiter.check("spent", &key).await.expect("known");
        assert_eq!(v.outcome(), Outcome::Allowed);
    }
    let v = limiter.check("spent", &key).await.expect("known");
    assert!(matches!(v.outcome(), Outcome::Limited { .. }), "{v:?}");
    let mut admitted = 0u64;
    for _ in 0..(LEASED / 2 + 3) {
        if limiter
            .check("leased", &key)
            .await
            .expect("known")
            .outcome()
            == Outcome::Allowed
        {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted,
        LEASED / 2 + 3,
        "under the limit, every check is admitted"
    );
    let master = group.master_port();
    let replicated = group.node_by_port(master).integer(&["WAIT", "1", "2000"]);
    assert_eq!(replicated, 1, "the replica has every write before the kill");

    let old = group.kill_master();
    // During the failover: the refused key is refused from the cache; the lease admits what
    // it still holds, then the deny policy answers.
    let mut during = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failed_over = false;
    while Instant::now() < deadline {
        let v = limiter.check("spent", &key).await.expect("known");
        assert!(
            matches!(v.outcome(), Outcome::Limited { .. }),
            "a cached refusal holds through the failover: {v:?}"
        );
        assert_eq!(
            v.decisions()[0].source,
            tollgate::Source::DenyCache,
            "{v:?}"
        );
        let v = limiter.check("leased", &key).await.expect("known");
        match v.outcome() {
            Outcome::Allowed => during += 1,
            Outcome::Unavailable { .. } => {}
            other => panic!("leased: {other:?}"),
        }
        if v.decisions()[0].source == tollgate::Source::Store && v.outcome() == Outcome::Allowed {
            failed_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new = group.wait_for_new_master(old, Duration::from_secs(30));
    assert_ne!(new, old);
    // Spend the rest: the whole run admits at most the limit plus the one lease.
    let mut after = 0u64;
    for _ in 0..(2 * LEASED) {
        if limiter
            .check("leased", &key)
            .await
            .expect("known")
            .outcome()
            == Outcome::Allowed
        {
            after += 1;
        }
    }
    let total = admitted + during + after;
    eprintln!(
        "tiers through a sentinel failover: {admitted} admitted before, {during} during \
         (failed over by the loop: {failed_over}), {after} after; total {total} for a limit \
         of {LEASED} with leases of {K}"
    );
    assert!(
        total <= LEASED + K,
        "over the bound: {total} > {LEASED} + {K}"
    );
    assert!(total >= LEASED - K, "quota lost: {total} < {LEASED} - {K}");
    let v = limiter.check("spent", &key).await.expect("known");
    assert!(
        matches!(v.outcome(), Outcome::Limited { .. }),
        "still spent on the new master: {v:?}"
    );
}
