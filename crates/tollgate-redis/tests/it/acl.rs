//! The least-privilege ACL (`docs/redis.md`, [`least_privilege_acl`]): a store whose Redis
//! user has exactly it decides with every algorithm, resets, and hears resets, on one node
//! and on a cluster; a user missing one command is refused at start with that command named.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Limiter, Namespace, OnStoreError, Outcome, Quota, StoreError};
use tollgate_redis::{RedisStore, least_privilege_acl};
use tollgate_testkit::RedisServer;

use crate::common::{RACE_LIMIT, TEST_TIMEOUT, cluster, eventually, race, unique_namespace};

/// Creates `user` with password `pw` and `rules` on `server`.
fn set_user(server: &RedisServer, user: &str, rules: &str) {
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
    args.extend(rules.split_whitespace());
    let reply = server.cmd(&args);
    assert!(reply.starts_with("+OK"), "ACL SETUSER {rules}: {reply}");
}

/// A limit of each algorithm, 10 an hour (a slot past the burst is 6 minutes away: within
/// the hour a reservation may wait), keyed by `user`.
fn every_algorithm() -> Vec<Limit> {
    Algorithm::ALL
        .into_iter()
        .map(|a| {
            Limit::new(
                a.name(),
                a,
                Quota::new(10, Duration::from_secs(3_600)).expect("valid"),
            )
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid")
            .on_store_error(OnStoreError::Deny)
        })
        .collect()
}

/// A store on `server` as the user `tollgate`, made with exactly the documented ACL for
/// `ns`, its permissions checked at start-up.
async fn as_documented_user(server: &RedisServer, ns: &Namespace) -> RedisStore {
    set_user(
        server,
        "tollgate",
        &least_privilege_acl(ns.prefix(), false, false),
    );
    RedisStore::builder(server.url())
        .username("tollgate")
        .password("pw")
        .check_permissions(ns.prefix())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect as the least-privileged user: {e:?}\n{}",
                server.log()
            )
        })
}

/// With exactly the documented ACL on a single Redis: every algorithm decides, a reset
/// deletes and is heard, and the GCRA / fixed window race stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_is_enough() {
    let server = RedisServer::start();
    let ns = unique_namespace("acl");
    let store = as_documented_user(&server, &ns).await;

    let heard = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = {
        let heard = std::sync::Arc::clone(&heard);
        store.listen_for_resets(ns.prefix(), move |_| {
            heard.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut builder = Limiter::builder(store.clone()).namespace(ns.clone());
    for l in every_algorithm() {
        builder = builder.limit(l);
    }
    let limiter = builder.build().expect("valid");
    for a in Algorithm::ALL {
        for _ in 0..10 {
            let v = limiter
                .check(a.name(), &[("user", "u")])
                .await
                .expect("known");
            assert_eq!(v.outcome(), Outcome::Allowed, "{a:?}");
        }
        let v = limiter
            .check(a.name(), &[("user", "u")])
            .await
            .expect("known");
        assert!(
            matches!(v.outcome(), Outcome::Limited { .. }),
            "{a:?}: {:?}",
            v.outcome()
        );
    }
    // Wait until the listener is subscribed, then reset: deleted, and heard.
    assert!(
        eventually(Duration::from_secs(5), || server
            .cmd(&[
                "PUBSUB",
                "NUMSUB",
                &tollgate_redis::reset_channel(ns.prefix())
            ])
            .contains(":1"))
        .await,
        "the listener subscribed as the least-privileged user"
    );
    let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
    let request = limiter.prepare(&names, &[("user", "u")], 1).expect("valid");
    limiter
        .reset(&request)
        .await
        .expect("reset as the least-privileged user");
    let v = limiter
        .check("gcra", &[("user", "u")])
        .await
        .expect("known");
    assert_eq!(v.outcome(), Outcome::Allowed, "the reset deleted the key");
    assert!(
        eventually(Duration::from_secs(5), || heard
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 5)
        .await,
        "the reset was heard"
    );
    listener.abort();

    let admitted = race(store, &ns, "racer", 32, 2).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT]);
}

/// A user that lacks one command of the ACL (here `HSET`, which only the token bucket
/// sends) is refused at start, with the command named, although most calls would work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_named_at_start() {
    let server = RedisServer::start();
    let ns = unique_namespace("acl-missing");
    let rules = least_privilege_acl(ns.prefix(), false, false).replace(" +hset", "");
    set_user(&server, "short", &rules);
    let result = RedisStore::builder(server.url())
        .username("short")
        .password("pw")
        .check_permissions(ns.prefix())
        .build()
        .await;
    let error = result.expect_err("refused at start");
    let text = std::error::Error::source(&error)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(matches!(error, StoreError::Auth(_)), "{error:?}");
    assert!(text.contains("HSET"), "{text}");
    assert!(
        !text.contains("EVALSHA"),
        "only the missing command is named: {text}"
    );

    // Keys outside the prefix are refused too: the same user checked for another prefix.
    let error = RedisStore::builder(server.url())
        .username("short")
        .password("pw")
        .check_permissions("elsewhere")
        .build()
        .await
        .expect_err("refused");
    let text = std::error::Error::source(&error)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        text.contains("EVALSHA") && text.contains("elsewhere:*"),
        "{text}"
    );
}

/// On a cluster, the documented cluster ACL (which adds `CLUSTER SLOTS` and `ASKING`) on
/// every node is enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_cluster_acl_is_enough() {
    let cluster = cluster();
    let ns = unique_namespace("aclc");
    let user = format!("tg-{}", ns.prefix());
    for node in cluster.nodes() {
        set_user(node, &user, &least_privilege_acl(ns.prefix(), true, false));
    }
    let store = RedisStore::cluster_builder(cluster.urls())
        .username(user.as_str())
        .password("pw")
        .check_permissions(ns.prefix())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect as the least-privileged user: {e:?}\n{}",
                cluster.logs()
            )
        });
    for u in ["a", "b", "c"] {
        assert_eq!(
            race(store.clone(), &ns, u, 16, 4).await,
            vec![RACE_LIMIT, RACE_LIMIT]
        );
    }
}

/// Pacing (`lua/pace.lua`) as a user with exactly the documented ACL, on the server's clock:
/// GCRA and token bucket reservations, one taken on a key already spent (its state read from
/// the key's expiry) and cancelled, and a charge and a refund of every algorithm — a sliding
/// log's refund finds its newest members. Each call is checked to have reached Redis and
/// succeeded: a permission the ACL lacks fails the script with `NOPERM`, which a reservation
/// would turn into its limit's policy (here a refusal with a store error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_is_enough_to_pace() {
    let server = RedisServer::start();
    let ns = unique_namespace("acl-pace");
    let store = as_documented_user(&server, &ns).await;
    let mut builder = Limiter::builder(store).namespace(ns.clone());
    for l in every_algorithm() {
        builder = builder.limit(l);
    }
    let limiter = builder.build().expect("valid");
    let key = [("user", "u")];
    // The longest a reservation may wait.
    let hour = Duration::from_secs(3_600);

    for a in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let first = limiter
            .reserve(a.name(), &key, 1, hour)
            .await
            .expect("valid");
        assert_eq!(first.store_error(), None, "{a:?}: {:?}", first.outcome());
        assert_eq!(first.wait(), Some(Duration::ZERO), "{a:?}");
        // The key now holds state: this reservation reads it (GCRA: from the key's expiry).
        let second = limiter
            .reserve(a.name(), &key, 9, hour)
            .await
            .expect("valid");
        assert_eq!(second.store_error(), None, "{a:?}: {:?}", second.outcome());
        // (On the server's clock, GCRA's state is rounded up to the ms.)
        assert!(
            second.wait().is_some_and(|w| w < Duration::from_millis(10)),
            "{a:?}: {:?}",
            second.wait()
        );
        let third = limiter
            .reserve(a.name(), &key, 1, hour)
            .await
            .expect("valid");
        assert_eq!(third.store_error(), None, "{a:?}: {:?}", third.outcome());
        assert!(third.wait().is_some_and(|w| w > Duration::ZERO), "{a:?}");
        assert!(
            limiter.cancel(&third).await.expect("cancel as the user"),
            "{a:?}: the last slot given back"
        );
    }
    let other = [("user", "v")];
    for a in Algorithm::ALL {
        let charged = limiter
            .adjust(a.name(), &other, 4)
            .await
            .unwrap_or_else(|e| panic!("{a:?}: charge as the user: {e:?}"));
        let refunded = limiter
            .adjust(a.name(), &other, -3)
            .await
            .unwrap_or_else(|e| panic!("{a:?}: refund as the user: {e:?}"));
        // (GCRA on the server's clock rounds its state up to the ms: 6 may read as 5.)
        assert!(
            charged.remaining <= 6 && refunded.remaining >= charged.remaining + 2,
            "{a:?}: charged {charged:?}, refunded {refunded:?}"
        );
    }
}

/// Checks `limit` for user `u` until one is allowed (or, `allowed` false, one is not), for at
/// most `within`; whether one was.
async fn until_answered<S: tollgate::Store>(
    limiter: &Limiter<S>,
    limit: &str,
    allowed: bool,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        let v = limiter.check(limit, &[("user", "u")]).await.expect("known");
        if (v.outcome() == Outcome::Allowed) == allowed {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The store's user deleted (which closes its connections) and made again: the store
/// connects again by itself, on one node and behind the same address. (A reconnection
/// refused for its credentials stayed the connection for good: redis-rs's connection
/// manager connects again only after an I/O error, and every later call got the refusal,
/// without a round trip, until the process restarted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_deleted_and_made_again_is_connected_again() {
    let server = RedisServer::start();
    let ns = unique_namespace("acl-again");
    let store = as_documented_user(&server, &ns).await;
    let limit = Limit::new(
        "fw",
        Algorithm::FixedWindow,
        Quota::new(1_000_000, Duration::from_secs(3_600)).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("valid")
    .on_store_error(OnStoreError::Deny);
    let limiter = Limiter::builder(store)
        .namespace(ns.clone())
        .limit(limit)
        .build()
        .expect("valid");
    assert!(until_answered(&limiter, "fw", true, TEST_TIMEOUT).await);
    for round in 0..2 {
        let reply = server.cmd(&["ACL", "DELUSER", "tollgate"]);
        assert!(reply.starts_with(":1"), "ACL DELUSER: {reply}");
        assert!(
            until_answered(&limiter, "fw", false, TEST_TIMEOUT).await,
            "round {round}: the deleted user still decides"
        );
        // Long enough for the reconnection to be refused, and its refusal answered.
        for _ in 0..20 {
            let v = limiter.check("fw", &[("user", "u")]).await.expect("known");
            assert_ne!(v.outcome(), Outcome::Allowed, "round {round}: no user");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        set_user(
            &server,
            "tollgate",
            &least_privilege_acl(ns.prefix(), false, false),
        );
        assert!(
            until_answered(&limiter, "fw", true, Duration::from_secs(10)).await,
            "round {round}: never connected again; log:\n{}",
            server.log()
        );
    }
}

/// `PEXPIRE` taken away from the store's user while it runs (the start-up check passed):
/// a script that writes a key with `HSET`, `HINCRBY` or `ZADD` and sets its expiry after
/// fails before it writes anything, so that no key is left without an expiry, and a request
/// answered by its limit's policy charges nothing, on a new key and on one that exists. (The
/// sliding log, the sliding window and the token bucket wrote first: their new keys lived for
/// ever, and they kept the units of requests answered 503.) Checks and settlements
/// (`adjust`, pace.lua) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_its_expiry_leaves_no_key() {
    let server = RedisServer::start();
    let ns = unique_namespace("acl-pexpire");
    let store = as_documented_user(&server, &ns).await;
    let mut builder = Limiter::builder(store).namespace(ns.clone());
    for l in every_algorithm() {
        builder = builder.limit(l);
    }
    let limiter = builder.build().expect("valid");
    let rules = least_privilege_acl(ns.prefix(), false, false).replace(" +pexpire", " -pexpire");
    assert_ne!(
        rules,
        least_privilege_acl(ns.prefix(), false, false),
        "the documented ACL grants PEXPIRE"
    );
    // A key that exists already: one unit charged before.
    for a in Algorithm::ALL {
        let v = limiter
            .check(a.name(), &[("user", "existing")])
            .await
            .expect("known");
        assert_eq!(v.outcome(), Outcome::Allowed, "{a:?}");
    }
    set_user(&server, "tollgate", &rules);
    let received = || {
        let info = server.cmd(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .expect("INFO stats")
    };
    let before = received();
    for a in Algorithm::ALL {
        let _ = limiter
            .check(a.name(), &[("user", "check")])
            .await
            .expect("known");
        let _ = limiter.adjust(a.name(), &[("user", "adjust")], 3).await;
        // With a sliding log in the same request, decided after it: nothing of it kept.
        let both = [a.name(), "sliding_log"];
        let _ = limiter.check_all(&both, &[("user", "multi")]).await;
        for _ in 0..3 {
            let _ = limiter
                .check(a.name(), &[("user", "existing")])
                .await
                .expect("known");
        }
    }
    // A command the user may not run is no refused connection: none is made again for it
    // (one a second was, each logged as connected again), over more than a second of them.
    let until = tokio::time::Instant::now() + Duration::from_millis(1_500);
    while tokio::time::Instant::now() < until {
        let _ = limiter
            .check("sliding_log", &[("user", "existing")])
            .await
            .expect("known");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        received() - before,
        1,
        "only the second INFO's own connection"
    );
    let keys = server.array(&["KEYS", &format!("{}*", ns.prefix())]);
    let immortal: Vec<&String> = keys
        .iter()
        .filter(|k| server.integer(&["PTTL", k]) == -1)
        .collect();
    assert!(
        immortal.is_empty(),
        "keys without an expiry: {immortal:?} (of {keys:?})"
    );
    // Back: every algorithm decides again, and a first check finds a full quota.
    set_user(
        &server,
        "tollgate",
        &least_privilege_acl(ns.prefix(), false, false),
    );
    for a in Algorithm::ALL {
        let v = limiter
            .check(a.name(), &[("user", "after")])
            .await
            .expect("known");
        assert_eq!(v.outcome(), Outcome::Allowed, "{a:?}: {v:?}");
        assert_eq!(v.decision().remaining, 9, "{a:?}: {v:?}");
    }
    for a in ["fixed_window", "gcra"] {
        let v = limiter.check(a, &[("user", "multi")]).await.expect("known");
        assert_eq!(
            v.decision().remaining,
            9,
            "{a}: charged for a request its policy answered: {v:?}"
        );
    }
    for (user, left) in [("check", 9), ("existing", 8)] {
        for a in ["sliding_log", "sliding_window", "token_bucket"] {
            let v = limiter.check(a, &[("user", user)]).await.expect("known");
            assert_eq!(
                v.decision().remaining,
                left,
                "{a} {user}: the refused requests' units were not kept: {v:?}"
            );
        }
    }
}
