//! Resharding under load: the slot of a hot key moves to another master (`SETSLOT
//! IMPORTING/MIGRATING`, `MIGRATE` one key at a time, `SETSLOT NODE`) while 32 tasks check it,
//! through coalesced batches and through single scripts. Between the two keys' migrations a
//! batch carrying both meets `TRYAGAIN`, a script whose key moved meets `ASK`, and after the
//! move every node answers `MOVED`. Asserted: no check fails, and exactly the limit is
//! admitted per limit — counting what the old node admitted before the move (so nothing was
//! decided twice, which would charge twice and admit fewer, and nothing lost its count, which
//! would admit more).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Limiter, Outcome};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisCluster;

use crate::common::{day_limits, unique_namespace};

const LIMIT: u64 = 3000;
const TASKS: usize = 32;

/// Loads `user` on `store` while its slot moves to another master; returns what each
/// limit admitted.
async fn move_under_load(cluster: &Arc<RedisCluster>, store: RedisStore, user: &str) -> [u64; 2] {
    let mut builder = Limiter::builder(store).namespace(unique_namespace("reshard"));
    for l in day_limits(LIMIT) {
        builder = builder.limit(l);
    }
    let limiter = Arc::new(builder.build().expect("valid"));
    let key = limiter
        .prepare(&["gcra", "fixed_window"], &[("user", user)], 1)
        .expect("valid");
    let keys: Vec<String> = key
        .entries()
        .iter()
        .map(|e| e.key().as_str().to_owned())
        .collect();
    let slot = cluster.slot_of(&keys[0]);
    assert_eq!(slot, cluster.slot_of(&keys[1]), "one hash tag, one slot");
    let source = cluster.master_for_slot(slot).port();
    let target = cluster
        .nodes()
        .iter()
        .map(|n| n.port())
        .find(|&p| p != source)
        .expect("another master");

    let admitted = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (limiter, admitted, stop, user) = (
            Arc::clone(&limiter),
            Arc::clone(&admitted),
            Arc::clone(&stop),
            user.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for (i, name) in ["gcra", "fixed_window"].into_iter().enumerate() {
                    let v = limiter
                        .check(name, &[("user", user.as_str())])
                        .await
                        .expect("known");
                    match v.outcome() {
                        Outcome::Allowed => {
                            admitted[i].fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Limited { .. } => {}
                        other => panic!("{name}: a check failed during the move: {other:?}"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }));
    }
    let mover = {
        let (cluster, admitted) = (Arc::clone(cluster), Arc::clone(&admitted));
        tokio::task::spawn_blocking(move || {
            // Start once the old node has admitted a good share, so that the count it
            // carries matters; bounded.
            let deadline = Instant::now() + Duration::from_secs(30);
            while admitted[0].load(Ordering::Relaxed) < LIMIT / 4 {
                assert!(Instant::now() < deadline, "the load did not start");
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut moving = cluster.begin_slot_move(slot, target);
            // One key at a time, with traffic in between: a batch with both keys meets
            // TRYAGAIN, a script on the moved key ASK.
            while moving.keys_left() > 0 {
                moving.migrate_some(1);
                std::thread::sleep(Duration::from_millis(100));
            }
            moving.finish();
            cluster.master_for_slot(slot).port()
        })
    };
    let owner = mover.await.expect("the slot moved");
    assert_eq!(owner, target, "the slot now lives on the target");
    // Go on until both limits are spent (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spent = admitted.iter().all(|a| a.load(Ordering::Relaxed) >= LIMIT);
        if spent || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A few more rounds past the limit: none of them may be admitted.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("load task");
    }
    for k in &keys {
        let on_target = cluster.node_by_port(target).integer(&["EXISTS", k]);
        assert_eq!(on_target, 1, "{k} lives on the target after the move");
    }
    [
        admitted[0].load(Ordering::SeqCst),
        admitted[1].load(Ordering::SeqCst),
    ]
}

/// Coalesced batches (the default) and single scripts (coalescing off), each through a
/// live slot move: exactly the limit admitted, no check failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_moves_between_masters_under_load() {
    let _alone = crate::failover::HEAVY.lock().await;
    let cluster = Arc::new(RedisCluster::start());
    for (coalesce, user) in [(true, "hot-batched"), (false, "hot-single")] {
        let store = RedisStore::cluster_builder(cluster.urls())
            .coalesce(coalesce)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap_or_else(|e| panic!("connect: {e:?}\n{}", cluster.logs()));
        let admitted = move_under_load(&cluster, store.clone(), user).await;
        assert_eq!(
            admitted,
            [LIMIT, LIMIT],
            "coalesce {coalesce}: gcra, fixed_window"
        );
        if coalesce {
            assert!(store.batches() > 0, "batches were part of the race");
        }
    }
}

/// Checks `user` on `limiter` `n` times from each of `tasks` tasks; panics on any check not
/// decided `Allowed` (a limit's failure policy answering is a failure here).
async fn all_allowed(limiter: &Arc<Limiter<RedisStore>>, user: &str, tasks: usize, n: usize) {
    let mut running = Vec::new();
    for _ in 0..tasks {
        let (limiter, user) = (Arc::clone(limiter), user.to_owned());
        running.push(tokio::spawn(async move {
            for _ in 0..n {
                let v = limiter
                    .check("fixed_window", &[("user", user.as_str())])
                    .await
                    .expect("known");
                assert!(
                    v.outcome() == Outcome::Allowed && v.store_error().is_none(),
                    "a check on a key moved to the new master was not decided: {v:?}"
                );
            }
        }));
    }
    for t in running {
        t.await.expect("check task");
    }
}

/// Scaling out: a master is added with no slot (`redis-cli --cluster add-node`), and its
/// first slot moves to it. While it owns none, `CLUSTER SLOTS` leaves it out, so the `redis`
/// crate has no connection to it, yet the source answers `ASK` naming it for every key
/// already moved. Proves that the store follows that `ASK` on a connection of its own, made
/// once for the whole move, loads its scripts there (the node has none), and counts exactly:
/// every check on the moved key is decided (none answered by the failure policy), and the
/// counter on the new master, once it owns the slot, holds every check made.
///
/// Before the fix every check on the moved key failed with `store_error: cluster`
/// (`ClusterConnectionNotFound: Requested connection not found`) for the whole move, and the
/// breaker opened when that key carried the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moving_to_a_new_master_without_slots_is_followed() {
    const TASKS: usize = 8;
    const PER_TASK: usize = 10;
    let _alone = crate::failover::HEAVY.lock().await;
    let mut cluster = RedisCluster::start();
    // Built before the new master exists, as a running service would be: it knows the
    // cluster from these nodes and their `CLUSTER SLOTS` only.
    let store = RedisStore::cluster_builder(cluster.urls())
        .timeout(crate::common::TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect: {e:?}\n{}", cluster.logs()));
    let limit = day_limits(1_000_000)
        .into_iter()
        .find(|l| l.name() == "fixed_window")
        .expect("a fixed window limit");
    let limiter = Arc::new(
        Limiter::builder(store.clone())
            .namespace(unique_namespace("new-master"))
            .limit(limit)
            .build()
            .expect("valid"),
    );
    let user = "scale-out";
    let key = limiter
        .prepare(&["fixed_window"], &[("user", user)], 1)
        .expect("valid")
        .entries()[0]
        .key()
        .as_str()
        .to_owned();
    // The key exists on its master before the move.
    all_allowed(&limiter, user, 1, 1).await;

    let slot = cluster.slot_of(&key);
    let new_master = tokio::task::block_in_place(|| cluster.add_master());
    let mut moving = tokio::task::block_in_place(|| {
        let mut moving = cluster.begin_slot_move(slot, new_master);
        while moving.migrate_some(100) > 0 {}
        moving
    });
    assert_eq!(moving.keys_left(), 0, "{key} moved: the source answers ASK");
    assert_eq!(
        store.direct_connections(),
        0,
        "no connection of its own yet"
    );

    all_allowed(&limiter, user, 1, 1).await;
    all_allowed(&limiter, user, TASKS, PER_TASK).await;
    assert_eq!(
        store.direct_connections(),
        1,
        "one connection to the new master for the whole move"
    );
    let target = cluster.node_by_port(new_master);
    assert!(
        target.command_stats("script|load").calls > 0,
        "the scripts were loaded on the new master"
    );

    // The move ends: the new master owns the slot, and the crate routes to it.
    tokio::task::block_in_place(|| {
        moving.migrate_some(100);
        moving.finish();
    });
    all_allowed(&limiter, user, 1, 1).await;
    let checks = 1 + 1 + TASKS * PER_TASK + 1;
    let value = target.cmd(&["GET", &key]);
    let count = value
        .lines()
        .nth(1)
        .and_then(|v| v.split_once(':'))
        .and_then(|(_, c)| c.parse::<usize>().ok());
    assert_eq!(
        count,
        Some(checks),
        "{key} on the new master counts every check once: {value:?}"
    );
}
