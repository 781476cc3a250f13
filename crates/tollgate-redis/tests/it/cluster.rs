//! Redis Cluster specifics: keys spread over every master without CROSSSLOT errors, and a
//! request whose keys span slots gives back what it took when a later slot denies.

use std::time::Duration;

use tollgate::{Algorithm, Entry, Key, Limit, Limiter, Op, Outcome, Quota, Request, Store};
use tollgate_redis::slot_of;

use crate::common::{cluster, cluster_store, scan, unique_namespace};

/// Many clients' keys land on all three masters; every call succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_master() {
    let ns = unique_namespace("spread");
    let limiter = Limiter::builder(cluster_store().await)
        .namespace(ns.clone())
        .limits(Algorithm::ALL.into_iter().map(|a| {
            Limit::new(a.name(), a, Quota::per_minute(10).expect("valid"))
                .expect("valid")
                .keyed_by(["user"])
                .expect("valid")
        }))
        .build()
        .expect("limiter");
    let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
    for u in 0..200 {
        let user = format!("u{u}");
        // Five limits keyed alike: one slot, one script.
        let v = limiter
            .check_all_n(&names, &[("user", user.as_str())], 2)
            .await
            .expect("check");
        assert!(
            v.outcome() == Outcome::Allowed && v.store_error().is_none(),
            "user {user}: {v:?}"
        );
    }
    let pattern = format!("{}:*", ns.prefix());
    let per_node: Vec<usize> = cluster()
        .nodes()
        .iter()
        .map(|n| scan(n, &pattern).len())
        .collect();
    assert_eq!(
        per_node.iter().sum::<usize>(),
        200 * 5,
        "keys per node: {per_node:?}"
    );
    assert!(
        per_node.iter().all(|&n| n > 0),
        "a master holds no key: {per_node:?}"
    );
}

/// Entries in two slots: the first slot is charged, the second denies, the first is given
/// back — for every algorithm in the first slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_slot_check_gives_back_what_it_took() {
    let store = cluster_store().await;
    let ns = unique_namespace("xslot");
    let blocker = Limit::new("ip", Algorithm::Gcra, Quota::per_hour(2).expect("valid"))
        .expect("valid")
        .keyed_by(["ip"])
        .expect("valid");
    let blocker_key = Key::new(&ns, &blocker, &[("ip", "10.0.0.1")]);
    let exhaust = Request::new([Entry::new(&blocker, blocker_key.clone())], 2).expect("valid");
    let d = store
        .decide(&exhaust, Op::Check, None)
        .await
        .expect("check");
    assert!(d[0].is_allowed(), "{d:?}");
    for alg in Algorithm::ALL {
        let limit = Limit::new(alg.name(), alg, Quota::per_hour(5).expect("valid"))
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid");
        // A user whose key is in another slot than the blocker's.
        let key = (0..)
            .map(|i| Key::new(&ns, &limit, &[("user", format!("u{i}"))]))
            .find(|k| slot_of(k.as_str()) != slot_of(blocker_key.as_str()))
            .expect("some user in another slot");
        let both = Request::new(
            [
                Entry::new(&limit, key.clone()),
                Entry::new(&blocker, blocker_key.clone()),
            ],
            1,
        )
        .expect("valid");
        for round in 0..3 {
            let d = store
                .decide(&both, Op::Check, None)
                .await
                .expect("cross-slot check");
            assert!(
                d[0].is_allowed() && !d[1].is_allowed(),
                "{alg} round {round}: {d:?}"
            );
            assert!(
                d[1].retry_after().is_some_and(|r| r > Duration::ZERO),
                "{d:?}"
            );
        }
        // Given back: at once, but for GCRA and the token bucket on the server's clock,
        // which keep back the time since the charge (ms here; `lua/gcra.lua`, `at`), so
        // their fifth unit shows again within a few ms rather than after its 12 minutes.
        let alone = Request::new([Entry::new(&limit, key)], 1).expect("valid");
        let start = std::time::Instant::now();
        let mut d = store.decide(&alone, Op::Peek, None).await.expect("peek");
        while d[0].remaining < 5 && start.elapsed() < Duration::from_millis(200) {
            d = store.decide(&alone, Op::Peek, None).await.expect("peek");
        }
        assert_eq!(d[0].remaining, 5, "{alg}: units were not given back: {d:?}");
    }
}

/// A cluster store that is dropped closes its connections: the task that keeps its map of
/// slots to masters current (`src/store/node_replies.rs`) stops with it. It held the map,
/// and a clone of the cluster connection, across its five-second wait: every node kept the
/// dropped store's connection that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_cluster_store_closes_its_connections() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let clients = |cluster: &tollgate_testkit::RedisCluster| -> Vec<i64> {
        cluster
            .nodes()
            .iter()
            .map(|n| {
                let info = n.cmd(&["INFO", "clients"]);
                info.lines()
                    .find_map(|l| l.strip_prefix("connected_clients:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(-1)
            })
            .collect()
    };
    let before = clients(&cluster);
    let store = tollgate_redis::RedisStore::cluster_builder(cluster.urls())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("connect");
    // The map's first read, on connections of the store's own.
    let connected = eventually(Duration::from_secs(5), || clients(&cluster) != before).await;
    assert!(
        connected,
        "the store never connected: {:?}",
        clients(&cluster)
    );
    drop(store);
    let closed = eventually(Duration::from_secs(3), || clients(&cluster) == before).await;
    assert!(
        closed,
        "a dropped store's connections stayed open: {before:?} before, {:?} now",
        clients(&cluster)
    );
}

/// Polls `condition` every 50 ms until it holds or `within` passes.
async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
