//! Started while Redis is down, the service serves anyway: `/healthz` 200, `/readyz` 503
//! with the reason, every limit by its failure policy; once Redis is up it connects in the
//! background and `/readyz` turns 200. A wrong password still refuses to start.

use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use tollgate_testkit::RedisServer;

use crate::binary::{Process, serve_refused};
use crate::support::{eventually, request};

fn config(url: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    write!(
        file,
        r#"
[store]
redis = "{url}"
timeout = "500ms"

[[limits]]
name = "down_closed"
algorithm = "gcra"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "down_open"
algorithm = "gcra"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "allow"
"#
    )
    .expect("write config");
    file
}

/// Redis unreachable at start: the process serves by policy and connects when Redis comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_and_serves_by_policy_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let file = config(&redis.url());
    redis.kill();
    let process = Process::serve(file.path());
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);

    assert_eq!(get("/healthz").await.status, 200);
    let ready = get("/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert_eq!(
        ready.error(),
        "store unavailable (connection)",
        "the reason is given, its details only in the log: {ready:?}"
    );
    assert!(
        process.log().contains("redis is unreachable at start"),
        "{}",
        process.log()
    );
    let closed = r#"{"limit": "down_closed", "key": {"user": "1"}}"#;
    let open = r#"{"limit": "down_open", "key": {"user": "1"}}"#;
    let reply = process.post("/v1/check", closed).await;
    assert_eq!(reply.status, 503, "deny policy: {reply:?}");
    assert_eq!(reply.json["decisions"][0]["store_error"], "connection");
    let reply = process.post("/v1/check", open).await;
    assert_eq!(reply.status, 200, "allow policy: {reply:?}");
    // Not connected, no breaker open: said so, on the page and in the scrape (the gauge and
    // `circuit_open` were missing until the first connection).
    let status = get("/v1/status").await.json;
    assert_eq!(
        (
            &status["store"]["connected"],
            &status["store"]["circuit_open"]
        ),
        (&serde_json::json!(false), &serde_json::json!(false)),
        "{status}"
    );
    let scrape = get("/metrics").await.text;
    assert_eq!(
        crate::support::sample(&scrape, "tollgate_store_circuit_open").as_deref(),
        Some("0"),
        "{scrape}"
    );

    redis.restart();
    let connected = eventually(Duration::from_secs(20), || async {
        get("/readyz").await.status == 200
    })
    .await;
    assert!(connected, "never connected; log:\n{}", process.log());
    let reply = process.post("/v1/check", closed).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json["remaining"], 4, "decided by Redis: {reply:?}");
    assert_eq!(
        crate::support::checked_keys(&redis).len(),
        1,
        "the check wrote its key to Redis"
    );
    assert!(
        process.logged("connected to redis").await,
        "{}",
        process.log()
    );
}

/// A wrong password is not an outage: the process refuses to start and says why.
#[test]
fn wrong_password_refuses_to_start() {
    let redis = RedisServer::start();
    assert_eq!(
        redis.cmd(&["CONFIG", "SET", "requirepass", "right-one"]),
        "+OK\r\n"
    );
    let url = format!("redis://:wrong-one@127.0.0.1:{}/", redis.port());
    let file = config(&url);
    let (status, stderr) = serve_refused(file.path());
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("wrongpass") || stderr.contains("credentials"),
        "the reason is given: {stderr}"
    );
    assert!(
        !stderr.contains("wrong-one"),
        "the password is not logged: {stderr}"
    );
}

/// The sum of every sample of `name` (all label sets) in a scrape.
fn sum_of(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Redis killed: once the breaker opens, its instant refusals are not store calls. The store
/// latency histogram counts only the calls that went to Redis (and failed after their
/// timeout), so an outage does not show as a store answering in a microsecond; the refusals
/// are `tollgate_store_errors_total{kind="circuit_open"}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_refusals_are_not_store_latency() {
    let mut redis = RedisServer::start();
    let file = config(&redis.url());
    let process = Process::serve(file.path());
    let closed = r#"{"limit": "down_closed", "key": {"user": "1"}}"#;
    assert_eq!(process.post("/v1/check", closed).await.status, 200);
    redis.kill();
    let scrape = |p: &Process| {
        let addr = p.addr;
        async move {
            request(addr, "GET", "/metrics", Bytes::new(), &[])
                .await
                .text
        }
    };
    let before = scrape(&process).await;
    let calls = 40;
    for _ in 0..calls {
        assert_eq!(process.post("/v1/check", closed).await.status, 503);
    }
    let after = scrape(&process).await;
    let open = r#"tollgate_store_errors_total{kind="circuit_open"}"#;
    let refused = sum_of(&after, open) - sum_of(&before, open);
    assert!(refused > 0.0, "the breaker never opened:\n{after}");
    let timed = sum_of(&after, "tollgate_store_latency_seconds_count")
        - sum_of(&before, "tollgate_store_latency_seconds_count");
    assert_eq!(
        timed + refused,
        f64::from(calls),
        "{timed} timed calls + {refused} breaker refusals for {calls} checks"
    );
    // The status says why the breaker is open, not only that it is.
    let status = request(process.addr, "GET", "/v1/status", Bytes::new(), &[]).await;
    let store = &status.json["store"];
    assert_eq!(store["circuit_open"], true, "{status:?}");
    assert_eq!(
        store["up"], false,
        "never up beside an open breaker: {status:?}"
    );
    let cause = store["circuit_cause"].as_str().unwrap_or_default();
    assert!(cause.starts_with("connection: "), "{status:?}");
}

/// A Redis that answers but refuses writes is not "up": out of memory (`maxmemory` with
/// `noeviction`), a read-only replica, a user whose write permission was taken away. Each
/// turns `/readyz` 503 with its kind, `tollgate_store_up` 0, and is counted by kind in
/// `tollgate_store_errors_total`; each clears when Redis is put right. (The probe used to be
/// a read, which all three answer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_writes_is_down_by_kind() {
    let redis = RedisServer::start();
    assert!(
        redis
            .cmd(&["ACL", "SETUSER", "tg", "on", ">tg-pw", "~*", "&*", "+@all"])
            .starts_with("+OK")
    );
    assert!(
        redis
            .cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
            .starts_with("+OK")
    );
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    write!(
        file,
        r#"
[store]
redis = "{url}"
username = "tg"
password = "tg-pw"
timeout = "500ms"

[[limits]]
name = "writes"
algorithm = "fixed_window"
limit = 1000
period = "1h"
key = ["user"]
on_store_error = "deny"
"#,
        url = redis.url()
    )
    .expect("write config");
    let process = Process::serve(file.path());
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);
    let check = r#"{"limit": "writes", "key": {"user": "1"}}"#;
    let up = |scrape: &str| crate::support::sample(scrape, "tollgate_store_up");
    assert_eq!(get("/readyz").await.status, 200);
    assert_eq!(process.post("/v1/check", check).await.status, 200);

    let cases: [(&[&str], &str, &[&str]); 3] = [
        (
            &["CONFIG", "SET", "maxmemory", "1"],
            "oom",
            &["CONFIG", "SET", "maxmemory", "0"],
        ),
        (
            &["REPLICAOF", "127.0.0.1", "1"],
            "readonly",
            &["REPLICAOF", "NO", "ONE"],
        ),
        (
            &["ACL", "SETUSER", "tg", "-set"],
            "auth",
            &["ACL", "SETUSER", "tg", "+set"],
        ),
    ];
    for (break_it, kind, mend) in cases {
        assert!(redis.cmd(break_it).starts_with("+OK"), "{break_it:?}");
        let ready = get("/readyz").await;
        assert_eq!(ready.status, 503, "{kind}: {ready:?}");
        assert!(
            ready.error().contains(kind) || ready.error().contains("circuit_open"),
            "{kind}: {ready:?}"
        );
        let reply = process.post("/v1/check", check).await;
        assert_eq!(reply.status, 503, "{kind}: deny policy: {reply:?}");
        // The scrape's probe result is at most a second old: poll (bounded).
        let down = eventually(Duration::from_secs(5), || async {
            up(&get("/metrics").await.text).as_deref() == Some("0")
        })
        .await;
        assert!(down, "{kind}: tollgate_store_up stayed 1");
        let scrape = get("/metrics").await.text;
        let counted = format!(r#"tollgate_store_errors_total{{kind="{kind}"}}"#);
        assert!(
            scrape.lines().any(|l| l.starts_with(&counted)),
            "{kind}: not counted by kind:\n{scrape}"
        );
        assert!(redis.cmd(mend).starts_with("+OK"), "{mend:?}");
        let mended = eventually(Duration::from_secs(20), || async {
            get("/readyz").await.status == 200
        })
        .await;
        assert!(mended, "{kind}: never ready again; log:\n{}", process.log());
        assert_eq!(process.post("/v1/check", check).await.status, 200, "{kind}");
    }
}

/// Redis killed, and the breaker finds it first: the traffic's failures open the breaker
/// before any probe runs, so the page's probe is refused by the breaker (`circuit_open`).
/// The outage in the history (`/v1/history`, the page's "last outage") is recorded as the
/// failure that opened the breaker, `connection`, not as `circuit_open` (which says only
/// that calls are skipped, not why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_the_breaker_found_first_is_recorded_by_its_cause() {
    let mut redis = RedisServer::start();
    let mut file = config(&redis.url());
    // No sample (and so no probe) after the first, at start, while Redis answers.
    write!(file, "\n[server]\nhistory_interval = \"10m\"\n").expect("write config");
    let process = Process::serve(file.path());
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);
    assert_eq!(get("/readyz").await.status, 200);
    redis.kill();
    let closed = r#"{"limit": "down_closed", "key": {"user": "1"}}"#;
    let mut opened = false;
    for _ in 0..50 {
        let reply = process.post("/v1/check", closed).await;
        assert_eq!(reply.status, 503, "{reply:?}");
        if reply.json["decisions"][0]["store_error"] == "circuit_open" {
            opened = true;
            break;
        }
    }
    assert!(opened, "the breaker never opened; log:\n{}", process.log());
    // The first probe since Redis died: the breaker refuses it.
    let status = get("/v1/status").await.json;
    assert_eq!(status["store"]["up"], false, "{status}");
    let history = get("/v1/history").await.json;
    let outage = &history["outage"];
    assert_eq!(
        outage["to_ms"],
        serde_json::Value::Null,
        "ongoing: {history}"
    );
    assert_eq!(
        outage["error"], "connection",
        "the breaker's cause ({}), not circuit_open: {history}",
        status["store"]["circuit_cause"]
    );
}

/// `/readyz` asked over and over while Redis is down (no authentication guards it) writes at
/// most a log line a second, not one per request: it wrote a `store unavailable` line for
/// each, thousands a second under a flood. Each still answers 503 with its kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_asked_in_a_loop_while_redis_is_down_logs_a_line_a_second() {
    let mut redis = RedisServer::start();
    let file = config(&redis.url());
    let process = Process::serve(file.path());
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);
    assert_eq!(get("/readyz").await.status, 200);
    redis.kill();
    let lines = |log: &str| {
        log.lines()
            .filter(|l| l.contains("store unavailable") || l.contains("probe failed"))
            .count()
    };
    let before = lines(&process.log());
    let started = std::time::Instant::now();
    for _ in 0..200 {
        let ready = get("/readyz").await;
        assert_eq!(ready.status, 503, "{ready:?}");
        // `connection`, then `circuit_open` once the breaker opens.
        assert!(
            ready.error().starts_with("store unavailable ("),
            "{ready:?}"
        );
    }
    let took = started.elapsed();
    // Let the last lines reach the log.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logged = lines(&process.log()) - before;
    let most = usize::try_from(took.as_secs()).expect("small") + 2;
    assert!(
        logged <= most,
        "{logged} lines for 200 requests in {took:?}:\n{}",
        process.log()
    );
    assert!(logged >= 1, "the failure is logged:\n{}", process.log());
}

/// Concurrent `/readyz` probe one at a time: a caller that arrives while a probe is in
/// flight waits for it and takes the next one's result, so a burst shares a few probes (a
/// flood of `/readyz` was as many scripts run on Redis as requests). Here
/// Redis is frozen, so all twenty arrive while the first probe hangs; the probes' scripts
/// run when it thaws.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_readyz_probes_redis_a_few_times() {
    let redis = RedisServer::start();
    let file = config(&redis.url());
    let process = std::sync::Arc::new(Process::serve(file.path()));
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);
    assert_eq!(get("/readyz").await.status, 200);
    let before = redis.command_stats("evalsha").calls + redis.command_stats("eval").calls;
    redis.pause();
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let addr = process.addr;
            tokio::spawn(async move {
                request(addr, "GET", "/readyz", Bytes::new(), &[])
                    .await
                    .status
            })
        })
        .collect();
    for answer in burst {
        assert_eq!(answer.await.expect("task"), 503, "frozen: timed out");
    }
    redis.resume();
    // The queued scripts run once Redis thaws: count them when they are done.
    let mut ran = 0;
    for _ in 0..50 {
        ran = redis.command_stats("evalsha").calls + redis.command_stats("eval").calls - before;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let again = redis.command_stats("evalsha").calls + redis.command_stats("eval").calls;
        if again - before == ran {
            break;
        }
    }
    assert!(ran >= 1, "the burst probed Redis");
    assert!(ran <= 4, "{ran} probes for a burst of 20");
}
