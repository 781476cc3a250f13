//! Lease mode through the real binary: four `tollgate serve` processes on one Redis,
//! hammering one key, stay within instances × k of the limit; leases go back to Redis on
//! reload and on SIGTERM, read from Redis itself.

use std::time::Duration;

use bytes::Bytes;
use tollgate_testkit::RedisServer;

use crate::binary::{Process, config_file};
use crate::support::{eventually, request};

const K: u64 = 10;

/// A fixed window of 300 days (windows are aligned to the epoch: no window ends during a
/// test), in lease mode, leases held an hour (until given back).
fn config(url: &str, limit: u64) -> String {
    format!(
        r#"
[server]
http = "127.0.0.1:0"

[store]
redis = "{url}"
timeout = "2s"

[[limits]]
name = "hot"
algorithm = "fixed_window"
limit = {limit}
period = "300d"
on_store_error = "deny"
mode = "lease"
lease = {K}
lease_ttl = "1h"
"#
    )
}

/// The lines of a RESP reply that are values (not `*n` / `$n` headers).
fn values(reply: &str) -> Vec<String> {
    reply
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_owned)
        .collect()
}

/// The one key on `redis`, the units its window counts, and its TTL (ms).
fn redis_state(redis: &RedisServer) -> (u64, i64) {
    let keys = crate::support::checked_keys(redis);
    assert_eq!(keys.len(), 1, "one key expected: {keys:?}");
    let value = values(&redis.cmd(&["GET", &keys[0]]));
    let count = value
        .first()
        .and_then(|v| v.split(':').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a fixed window state: {value:?}"));
    let ttl = redis.integer(&["PTTL", &keys[0]]);
    (count, ttl)
}

/// Sends `n` checks of the key to `addr`, `concurrency` at a time; returns how many passed.
async fn hammer(addr: std::net::SocketAddr, n: usize, concurrency: usize) -> u64 {
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            tokio::spawn(async move {
                let mut allowed = 0;
                for _ in (c..n).step_by(concurrency) {
                    let body = Bytes::from_static(br#"{"limit": "hot"}"#);
                    match request(addr, "POST", "/v1/check", body, &[]).await.status {
                        200 => allowed += 1,
                        429 => {}
                        other => panic!("unexpected status {other}"),
                    }
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.expect("task");
    }
    allowed
}

/// 4 processes × 8 concurrent clients on one key, limit 400, k = 10: Redis never counts
/// more than the limit, admissions are within 4 × k of it, and once every process has been
/// refused (holding nothing) exactly the limit has passed; Redis counts exactly that, before
/// and after a clean SIGTERM of each. (Give-back of units still held: the next test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_on_one_key_stay_within_the_bound() {
    let redis = RedisServer::start();
    let limit = 400;
    let (_dir, path) = config_file(&config(&redis.url(), limit));
    let mut processes: Vec<Process> = (0..4).map(|_| Process::serve(&path)).collect();
    let hammered: Vec<_> = processes
        .iter()
        .map(|p| tokio::spawn(hammer(p.addr, 200, 8)))
        .collect();
    let mut admitted = 0;
    for h in hammered {
        admitted += h.await.expect("hammer");
    }
    let (count, ttl) = redis_state(&redis);
    assert!(count <= limit, "Redis counts {count} > {limit}");
    assert!(ttl > 0, "the key has no TTL: {ttl}");
    assert!(admitted <= limit + 4 * K, "{admitted} admitted");
    assert!(
        admitted + 4 * K >= count,
        "{admitted} admitted of {count} counted"
    );
    // Until each process is refused: it then holds nothing, and what the others held is
    // spent.
    for p in &processes {
        loop {
            let body = Bytes::from_static(br#"{"limit": "hot"}"#);
            match request(p.addr, "POST", "/v1/check", body, &[]).await.status {
                200 => admitted += 1,
                429 => break,
                other => panic!("unexpected status {other}; log:\n{}", p.log()),
            }
            assert!(admitted <= limit + 4 * K, "{admitted} admitted");
        }
    }
    // A process refused holds nothing; one refused earlier may have been handed units back
    // since (none here: nothing was given back), so every unit counted was admitted.
    assert_eq!(
        admitted, limit,
        "exactly the limit once every lease is spent"
    );
    assert_eq!(redis_state(&redis).0, limit);
    for p in &mut processes {
        p.terminate();
    }
    assert_eq!(redis_state(&redis).0, admitted);
}

/// A process holding a lease gives it back when a reload replaces its limit, and again on
/// SIGTERM: Redis's count drops to exactly what was admitted.
#[tokio::test]
async fn reload_and_sigterm_give_leases_back() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(&config(&redis.url(), 100));
    let mut process = Process::serve(&path);
    assert_eq!(hammer(process.addr, 3, 1).await, 3);
    // One take of k + 1 units: 1 spent, then 2 more from the lease.
    assert_eq!(redis_state(&redis).0, K + 1);

    std::fs::write(&path, config(&redis.url(), 200)).expect("write");
    let given_back = eventually(Duration::from_secs(10), || async {
        redis_state(&redis).0 == 3
    })
    .await;
    assert!(
        given_back,
        "Redis counts {:?} after the reload; log:\n{}",
        redis_state(&redis),
        process.log()
    );
    // The line is logged once Redis has answered the give-back, so a moment after the
    // count drops.
    assert!(
        process.logged("leases given back").await,
        "{}",
        process.log()
    );

    assert_eq!(hammer(process.addr, 2, 1).await, 2);
    assert_eq!(redis_state(&redis).0, 3 + K + 1);
    let (_, ttl) = redis_state(&redis);
    assert!(ttl > 0, "the key has no TTL: {ttl}");
    process.terminate();
    assert_eq!(redis_state(&redis).0, 5, "log:\n{}", process.log());
}

/// On the memory store too (one instance: a lease there saves nothing, but the limit works
/// the same), and `GET /v1/limits` shows the mode.
#[tokio::test]
async fn lease_mode_on_the_memory_store_and_in_the_listing() {
    let server = crate::support::TestServer::start(
        r#"
[[limits]]
name = "hot"
algorithm = "fixed_window"
limit = 25
period = "300d"
on_store_error = "deny"
mode = "lease"
lease = 4
lease_ttl = "2s"
"#,
    )
    .await;
    let listed = server.get("/v1/limits").await;
    let hot = &listed.json["limits"][0];
    assert_eq!(hot["mode"], "lease", "{listed:?}");
    assert_eq!(hot["lease"], 4);
    assert_eq!(hot["lease_ttl"], "2s");
    let mut allowed = 0;
    for _ in 0..40 {
        match server.post("/v1/check", r#"{"limit": "hot"}"#).await.status {
            200 => allowed += 1,
            429 => {}
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(allowed, 25);
    server.stop().await;
}
