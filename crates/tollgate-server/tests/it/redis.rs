//! The service on a spawned Redis: the API, store failure, and two processes sharing one limit.

use std::time::Duration;

use tollgate_testkit::RedisServer;

use crate::binary::Process;
use crate::support::{TestServer, eventually};

fn config(url: &str, prefix: &str, http: &str) -> String {
    format!(
        r#"
[server]
http = "{http}"
admin_token = "redis-admin-token"

[store]
redis = "{url}"
prefix = "{prefix}"
timeout = "2s"

[[limits]]
name = "redis_user"
algorithm = "sliding_log"
limit = 3
period = "1h"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "redis_open"
algorithm = "gcra"
limit = 3
period = "1h"
key = ["user"]
on_store_error = "allow"

[[limits]]
name = "redis_shared"
algorithm = "sliding_log"
limit = 50
period = "1h"
on_store_error = "deny"
"#
    )
}

/// Checks, peeks and resets on Redis; when Redis dies, `deny` answers 503, `allow` 200, and
/// readiness fails.
#[tokio::test]
async fn api_on_redis_and_store_failure() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&config(&redis.url(), "api", "127.0.0.1:0")).await;
    assert_eq!(server.get("/readyz").await.status, 200);
    assert_eq!(server.get("/v1/limits").await.json["store"], "redis");
    let body = r#"{"limit": "redis_user", "key": {"user": "1"}}"#;
    for _ in 0..3 {
        let reply = server.post("/v1/check", body).await;
        assert_eq!(reply.status, 200, "{reply:?}\n{}", redis.log());
    }
    assert_eq!(server.post("/v1/check", body).await.status, 429);
    assert_eq!(server.remaining("redis_user", r#"{"user": "2"}"#).await, 3);
    let reset = server
        .post_with(
            "/v1/reset",
            body,
            &[("authorization", "Bearer redis-admin-token")],
        )
        .await;
    assert_eq!(reset.status, 200, "{reset:?}");
    assert_eq!(server.post("/v1/check", body).await.status, 200);

    redis.kill();
    let denied = server
        .post(
            "/v1/check",
            r#"{"limit": "redis_user", "key": {"user": "3"}}"#,
        )
        .await;
    assert_eq!(denied.status, 503, "{denied:?}");
    assert!(
        denied.json["decisions"][0]["store_error"].is_string(),
        "{denied:?}"
    );
    let allowed = server
        .post(
            "/v1/check",
            r#"{"limit": "redis_open", "key": {"user": "3"}}"#,
        )
        .await;
    assert_eq!(allowed.status, 200, "{allowed:?}");
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert_eq!(
        ready.error(),
        "store unavailable (connection)",
        "the kind of failure, no details: {ready:?}"
    );
}

/// A reset the store could not carry out answers 503 and is logged as failed, naming the
/// limit, the key's digest and who asked (only the generic "store unavailable" was logged, so
/// an operator could not tell that a reset they asked for had not happened).
#[tokio::test]
async fn a_failed_reset_is_logged_as_failed() {
    let mut redis = RedisServer::start();
    let (_dir, path) = crate::binary::config_file(&config(&redis.url(), "rf", "127.0.0.1:0"));
    let process = Process::serve(&path);
    let body = r#"{"limit": "redis_user", "key": {"user": "7"}}"#;
    let auth = [("authorization", "Bearer redis-admin-token")];
    let reset = crate::support::request(process.addr, "POST", "/v1/reset", body.into(), &auth);
    assert_eq!(reset.await.status, 200, "{}", process.log());
    redis.kill();
    let reset = crate::support::request(process.addr, "POST", "/v1/reset", body.into(), &auth);
    assert_eq!(reset.await.status, 503, "{}", process.log());
    assert!(process.logged("reset failed").await, "{}", process.log());
    let log = process.log();
    let line = log
        .lines()
        .find(|l| l.contains("reset failed"))
        .unwrap_or_default();
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains(r#"limits=["redis_user"]"#), "{line}");
    assert!(line.contains("key=") && line.contains("client="), "{line}");
}

/// Two `tollgate` processes on one Redis admit exactly the limit between them, under
/// concurrent load split across both.
#[tokio::test]
async fn two_processes_share_one_limit_exactly() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config(&redis.url(), "shared", "127.0.0.1:0")).expect("write");
    let a = Process::serve(&path);
    let b = Process::serve(&path);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let addr = if i % 2 == 0 { a.addr } else { b.addr };
        tasks.push(tokio::spawn(async move {
            let body = bytes::Bytes::from_static(br#"{"limit": "redis_shared"}"#);
            crate::support::request(addr, "POST", "/v1/check", body, &[])
                .await
                .status
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        match task.await.expect("task") {
            200 => allowed += 1,
            429 => {}
            other => panic!("unexpected status {other}; logs:\n{}\n{}", a.log(), b.log()),
        }
    }
    assert_eq!(
        allowed,
        50,
        "logs:\n{}\n{}\nredis:\n{}",
        a.log(),
        b.log(),
        redis.log()
    );
}

/// On a Redis Cluster: limits keyed by different parts live in different slots, and a check
/// over both is still all or nothing (a refusal by one gives back the other's units).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_on_redis_cluster() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let toml = format!(
        r#"
[store]
cluster = [{}]
timeout = "500ms"

[[limits]]
name = "cl_user"
algorithm = "gcra"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "cl_ip"
algorithm = "fixed_window"
limit = 1
period = "1h"
key = ["ip"]
on_store_error = "deny"
"#,
        urls.join(", ")
    );
    let server = TestServer::start(&toml).await;
    assert_eq!(
        server.get("/v1/limits").await.json["store"],
        "redis_cluster"
    );
    let first = r#"{"limits": ["cl_user", "cl_ip"], "key": {"user": "1", "ip": "10.0.0.1"}}"#;
    let reply = server.post("/v1/check", first).await;
    assert_eq!(reply.status, 200, "{reply:?}\n{}", cluster.logs());
    let second = r#"{"limits": ["cl_user", "cl_ip"], "key": {"user": "2", "ip": "10.0.0.1"}}"#;
    let refused = server.post("/v1/check", second).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(
        server.remaining("cl_user", r#"{"user": "2"}"#).await,
        5,
        "user 2 was given back"
    );
    assert_eq!(server.get("/readyz").await.status, 200);
}

/// On Redis the deny cache is on by default: a refused key costs no script (counted in
/// `tollgate_deny_cache_hits_total`), and a reset on another instance reaches this one's
/// cache through pub/sub, so the key is admitted again here.
#[tokio::test]
async fn deny_cache_on_redis_hears_resets_from_other_instances() {
    let redis = RedisServer::start();
    let toml = format!(
        r#"
[server]
admin_token = "dc-token"

[store]
redis = "{}"
prefix = "dc"
timeout = "2s"

[[limits]]
name = "dc_user"
algorithm = "fixed_window"
limit = 1
period = "1h"
key = ["user"]
on_store_error = "deny"
"#,
        redis.url()
    );
    let (a, b) = (
        TestServer::start(&toml).await,
        TestServer::start(&toml).await,
    );
    let body = r#"{"limit": "dc_user", "key": {"user": "1"}}"#;
    assert_eq!(a.post("/v1/check", body).await.status, 200);
    for _ in 0..3 {
        assert_eq!(a.post("/v1/check", body).await.status, 429);
    }
    let metrics = a.get("/metrics").await.text;
    assert!(
        metrics.contains(r#"tollgate_deny_cache_hits_total{limit="dc_user"} 2"#),
        "{metrics}"
    );
    // B resets the key; A hears of it (the subscription may take a moment to be in place,
    // so B resets until A admits).
    let heard = eventually(Duration::from_secs(5), || async {
        let reset = b
            .post_with("/v1/reset", body, &[("authorization", "Bearer dc-token")])
            .await;
        assert_eq!(reset.status, 200, "{reset:?}");
        a.post("/v1/peek", body).await.status == 200
    })
    .await;
    assert!(heard, "A never heard of B's reset");
    assert_eq!(a.post("/v1/check", body).await.status, 200);
}

/// The value of counter `name` in a Prometheus exposition (0 when absent).
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A `tollgate serve` process on Redis coalesces concurrent checks (on by default) and says so
/// in `/metrics`; the limit is still exact: bursts of 100 concurrent checks, past the limit
/// and until a batch is counted (at most 20 bursts), admit exactly the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_calls_are_exact_and_counted() {
    const LIMIT: usize = 1000;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config(&redis.url(), "coalesce", "127.0.0.1:0")).expect("write");
    let text = std::fs::read_to_string(&path)
        .expect("read")
        .replace("limit = 50\n", &format!("limit = {LIMIT}\n"));
    std::fs::write(&path, text).expect("write");
    let server = Process::serve(&path);
    let (mut sent, mut allowed, mut batches, mut batched) = (0, 0, 0, 0);
    for _ in 0..20 {
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let addr = server.addr;
                tokio::spawn(async move {
                    let body = bytes::Bytes::from_static(br#"{"limit": "redis_shared"}"#);
                    crate::support::request(addr, "POST", "/v1/check", body, &[])
                        .await
                        .status
                })
            })
            .collect();
        for task in tasks {
            sent += 1;
            match task.await.expect("task") {
                200 => allowed += 1,
                429 => {}
                other => panic!("status {other}; log:\n{}", server.log()),
            }
        }
        let metrics =
            crate::support::request(server.addr, "GET", "/metrics", bytes::Bytes::new(), &[])
                .await
                .text;
        batches = counter(&metrics, "tollgate_redis_batches_total");
        batched = counter(&metrics, "tollgate_redis_batched_requests_total");
        if batches > 0 && sent > LIMIT {
            break;
        }
    }
    assert!(batches > 0, "{sent} concurrent checks made no batch call");
    assert!(
        batched >= 2 * batches,
        "{batched} requests in {batches} batches"
    );
    assert_eq!(allowed, sent.min(LIMIT), "log:\n{}", server.log());
}
