//! Cold start: the scripts are loaded once when the store connects, and once after Redis
//! lost them (`SCRIPT FLUSH`, a restart), however many calls were in flight; never once per
//! call.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Limit, Limiter, Outcome, Quota};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

/// `SCRIPT LOAD` calls so far (`cmdstat_script|load` in `INFO commandstats`).
fn script_loads(server: &RedisServer) -> u64 {
    server.command_stats("script|load").calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_load_once_per_connection_and_once_per_loss() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let per_load = script_loads(&server);
    assert!(
        per_load >= 2,
        "the store loaded its scripts when it connected: {per_load}"
    );
    let limiter = Arc::new(
        Limiter::builder(store)
            .limits(Algorithm::ALL.into_iter().map(|a| {
                Limit::new(a.name(), a, Quota::per_minute(1_000).expect("valid"))
                    .expect("valid")
                    .keyed_by(["user"])
                    .expect("valid")
            }))
            .build()
            .expect("valid"),
    );
    let burst = |tag: &'static str| {
        let limiter = Arc::clone(&limiter);
        async move {
            let calls: Vec<_> = (0..64)
                .map(|i| {
                    let limiter = Arc::clone(&limiter);
                    tokio::spawn(async move {
                        let a = Algorithm::ALL[i % 5];
                        let user = format!("{tag}-{i}");
                        limiter
                            .check(a.name(), &[("user", user.as_str())])
                            .await
                            .expect("valid")
                            .outcome()
                    })
                })
                .collect();
            for call in calls {
                assert_eq!(call.await.expect("task"), Outcome::Allowed);
            }
        }
    };
    burst("warm").await;
    assert_eq!(
        script_loads(&server),
        per_load,
        "no load while the scripts are there"
    );
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).contains("OK"));
    burst("cold").await;
    assert_eq!(
        script_loads(&server),
        2 * per_load,
        "64 calls meeting NOSCRIPT loaded the scripts once"
    );
}
