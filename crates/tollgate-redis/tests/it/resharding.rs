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
