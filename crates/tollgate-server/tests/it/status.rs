//! `GET /v1/status` and the page's files, in-process: the figures follow the traffic, the
//! last reload is reported (without a secret the parser quoted back), and nothing the page
//! can read holds the admin token or the Redis password.

use std::time::Duration;

use tollgate_server::config::{Config, Overrides};
use tollgate_server::server::Server;
use tollgate_testkit::RedisServer;

use crate::support::{TestServer, eventually, one_limit};

/// Counts by outcome, the deny ratio and the most refused key follow the checks.
#[tokio::test]
async fn status_follows_the_traffic() {
    let server = TestServer::start(&one_limit(
        "status_sms",
        "fixed_window",
        3,
        "1h",
        r#""user""#,
        "deny",
    ))
    .await;
    let status = server.get("/v1/status").await;
    assert_eq!(status.status, 200, "{status:?}");
    assert_eq!(status.header("cache-control"), Some("no-store"));
    let limit = &status.json["limits"][0];
    assert_eq!(limit["name"], "status_sms");
    assert_eq!(limit["algorithm"], "fixed_window");
    assert_eq!(
        (limit["limit"].as_u64(), limit["period"].as_str()),
        (Some(3), Some("1h"))
    );
    assert_eq!(limit["decisions"]["allowed"], 0);
    assert_eq!(limit["deny_ratio"], serde_json::Value::Null);
    assert_eq!(
        limit["rate"],
        serde_json::Value::Null,
        "no earlier call: {limit}"
    );

    for _ in 0..5 {
        server
            .post(
                "/v1/check",
                r#"{"limit": "status_sms", "key": {"user": "abuser"}}"#,
            )
            .await;
    }
    server
        .post(
            "/v1/check",
            r#"{"limit": "status_sms", "key": {"user": "fine"}}"#,
        )
        .await;
    let status = server.get("/v1/status").await.json;
    let limit = &status["limits"][0];
    assert_eq!(limit["decisions"]["allowed"], 4, "{status}");
    assert_eq!(limit["decisions"]["denied"], 2, "{status}");
    assert_eq!(limit["decisions"]["store_error_denied"], 0, "{status}");
    assert_eq!(limit["deny_ratio"].as_f64(), Some(2.0 / 6.0), "{status}");
    assert_eq!(limit["top_denied"][0]["key"]["user"], "abuser", "{status}");
    assert_eq!(limit["top_denied"][0]["denied"], 2, "{status}");
    assert_eq!(limit["keys"], 2, "two keys held: {status}");
    let store = &status["store"];
    assert_eq!(store["kind"], "memory");
    assert_eq!(
        (store["connected"].as_bool(), store["up"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(
        store["circuit_open"],
        serde_json::Value::Null,
        "no breaker in memory"
    );
    // The memory store's calls are not timed (in-process: timing would cost more than the
    // call), and the latency window is the process's, which other tests' Redis calls fill:
    // nothing to assert about it here. `status_holds_no_secret` checks it on Redis.
    assert_eq!(status["reload"]["watching"], false);
    assert_eq!(
        status["panics"],
        serde_json::Value::Null,
        "a server run in-process, without report_panics, counts no panics and says so"
    );
    assert!(status["uptime_ms"].as_u64().is_some(), "{status}");

    // The rate: over the time since the first call (the only one kept, as the next ones were
    // within a second of it), the six checks made since.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let rate = loop {
        let rate = server.get("/v1/status").await.json["limits"][0]["rate"].clone();
        if !rate.is_null() {
            break rate;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a rate once the first call is a second old"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let span = rate["over_s"].as_f64().expect("over_s");
    assert!(span >= 1.0, "{rate}");
    let decisions = rate["decisions_per_s"].as_f64().expect("rate") * span;
    let denied = rate["denied_per_s"].as_f64().expect("rate") * span;
    assert!((decisions - 6.0).abs() < 1e-6, "six checks: {rate}");
    assert!((denied - 2.0).abs() < 1e-6, "two refusals: {rate}");
}

/// The page and its files are served with a strict CSP and without inline script.
#[tokio::test]
async fn the_page_is_served_with_a_strict_policy() {
    let server = TestServer::start(&one_limit("status_page", "gcra", 1, "1s", "", "allow")).await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/status.js", "text/javascript"),
        ("/status.css", "text/css"),
    ] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, 200, "{path}: {reply:?}");
        assert!(
            reply
                .header("content-type")
                .is_some_and(|t| t.starts_with(kind)),
            "{path}: {reply:?}"
        );
        let csp = reply.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    }
    let html = server.get("/").await.text;
    assert!(html.contains(r#"<script src="/status.js" defer></script>"#));
    assert_eq!(
        html.matches("<script").count(),
        1,
        "no inline script: {html}"
    );
    let script = server.get("/status.js").await.text;
    assert!(
        !script.contains("innerHTML"),
        "text is set with textContent only"
    );
    assert!(!script.contains("/v1/reset"), "the page cannot reset");
}

/// A refused reload is reported with its error and time; a secret value the parser quoted
/// back is not; a good file then reports success.
#[tokio::test]
async fn the_last_reload_is_reported_without_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let good = one_limit("status_reload", "gcra", 3, "1h", r#""user""#, "deny");
    std::fs::write(&path, &good).expect("write");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    let server = TestServer::start_with(Server::new(config).watch(
        &path,
        Overrides::default(),
        Duration::from_millis(20),
    ))
    .await;
    let status = server.get("/v1/status").await.json;
    assert_eq!(status["reload"]["watching"], true);

    let secret = "987654321098";
    std::fs::write(&path, format!("[server]\nadmin_token = {secret}\n{good}")).expect("write");
    let refused = eventually(Duration::from_secs(10), || async {
        server.get("/v1/status").await.json["reload"]["last"]["ok"] == false
    })
    .await;
    let status = server.get("/v1/status").await;
    assert!(refused, "{status:?}");
    let error = status.json["reload"]["last"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("server.admin_token"),
        "names the field: {error}"
    );
    assert!(!status.text.contains(secret), "{}", status.text);
    assert!(status.json["reload"]["last"]["at_ms"].as_u64() > Some(1_600_000_000_000));

    std::fs::write(&path, good.replace("limit = 3", "limit = 4")).expect("write");
    let applied = eventually(Duration::from_secs(10), || async {
        server.get("/v1/status").await.json["reload"]["last"]["ok"] == true
    })
    .await;
    assert!(applied, "{:?}", server.get("/v1/status").await);
    let status = server.get("/v1/status").await.json;
    assert_eq!(status["reload"]["last"]["error"], serde_json::Value::Null);
    assert_eq!(status["limits"][0]["limit"], 4);
}

/// Nothing the page can read holds the admin token or the Redis password; the Redis store's
/// health and breaker are shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_holds_no_secret() {
    let redis = RedisServer::start();
    let password = "redis-pw-5f3a0c";
    assert_eq!(
        redis.cmd(&["CONFIG", "SET", "requirepass", password]),
        "+OK\r\n"
    );
    let token = "admin-token-9c1e77d2";
    let toml = format!(
        "[server]\nadmin_token = \"{token}\"\n[store]\nredis = \"redis://:{password}@127.0.0.1:{}/\"\n{}",
        redis.port(),
        one_limit("status_secret", "gcra", 2, "1h", r#""user""#, "deny")
    );
    let config = Config::parse(&toml, "test.toml", &Overrides::default()).expect("valid");
    let server = TestServer::start_with(Server::new(config)).await;
    for _ in 0..3 {
        server
            .post(
                "/v1/check",
                r#"{"limit": "status_secret", "key": {"user": "u"}}"#,
            )
            .await;
    }
    let status = server.get("/v1/status").await;
    let store = &status.json["store"];
    assert_eq!(store["kind"], "redis", "{status:?}");
    assert_eq!(store["up"], true, "{status:?}");
    assert_eq!(store["circuit_open"], false, "{status:?}");
    assert!(
        store["latency"]["samples"].as_u64() >= Some(3),
        "each of the three checks' calls to Redis is timed: {status:?}"
    );
    assert_eq!(store["deny_cache"]["enabled"], true, "{status:?}");
    assert_eq!(
        store["deny_cache"]["entries"], 1,
        "the refusal is cached: {status:?}"
    );
    for path in ["/v1/status", "/", "/status.js", "/status.css", "/v1/limits"] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, 200, "{path}");
        assert!(!reply.text.contains(token), "{path}: {}", reply.text);
        assert!(!reply.text.contains(password), "{path}: {}", reply.text);
    }
}

/// `tollgate_deny_ratio` follows `/v1/status`: a limit idle for over a minute exports NaN (no
/// ratio), not the ratio of its last busy minute forever.
#[tokio::test]
async fn an_idle_limits_deny_ratio_is_nan_not_its_last_value() {
    let server = crate::support::TestServer::start(&crate::support::one_limit(
        "idle_ratio",
        "fixed_window",
        1,
        "1h",
        r#""user""#,
        "deny",
    ))
    .await;
    let body = r#"{"limit": "idle_ratio", "key": {"user": "1"}}"#;
    for _ in 0..4 {
        server.post("/v1/check", body).await;
    }
    let ratio =
        |text: &str| crate::support::sample(text, r#"tollgate_deny_ratio{limit="idle_ratio"}"#);
    assert_eq!(
        ratio(&server.get("/metrics").await.text).as_deref(),
        Some("0.75")
    );
    server.clock.advance(std::time::Duration::from_secs(180));
    let status = server.get("/v1/status").await;
    let text = server.get("/metrics").await.text;
    assert_eq!(ratio(&text).as_deref(), Some("NaN"), "{status:?}");
    server.stop().await;
}

/// The scrape carries the version, the process's own metrics under Prometheus's standard
/// names, and the HTTP API's requests by route and status; the page's icon is served (a
/// browser asks `/favicon.ico` of every page).
#[tokio::test]
async fn scrape_has_build_process_and_http_metrics_and_the_icon_is_served() {
    let server = crate::support::TestServer::start(&crate::support::one_limit(
        "http_metrics",
        "gcra",
        1,
        "1h",
        r#""user""#,
        "deny",
    ))
    .await;
    let body = r#"{"limit": "http_metrics", "key": {"user": "1"}}"#;
    assert_eq!(server.post("/v1/check", body).await.status, 200);
    assert_eq!(server.post("/v1/check", body).await.status, 429);
    assert_eq!(server.get("/no/such/path").await.status, 404);
    let icon = server.get("/favicon.ico").await;
    assert_eq!(icon.status, 200);
    assert_eq!(icon.header("content-type"), Some("image/svg+xml"));
    assert!(icon.text.starts_with("<svg"), "{icon:?}");
    let text = server.get("/metrics").await.text;
    for needle in [
        "tollgate_build_info{version=\"",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "# TYPE process_cpu_seconds_total counter",
        r#"tollgate_http_requests_total{route="/v1/check",status="200"}"#,
        r#"tollgate_http_requests_total{route="/v1/check",status="429"}"#,
        r#"tollgate_http_requests_total{route="other",status="404"}"#,
        r#"tollgate_http_request_duration_seconds_bucket{route="/v1/check","#,
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert!(
        !text.contains("no/such"),
        "a request path must not become a label"
    );
    server.stop().await;
}

/// After Redis recovers, the page does not record a fake outage: Redis frozen (SIGSTOP), the
/// page's probe fails; thawed (SIGCONT), `/readyz` answers 200; then `/v1/status` says up (it
/// reuses that newer probe, not its own older failure) and the outage, in the status and in
/// `/v1/history`, is the real one: from a failure while frozen to an answer after the thaw,
/// no later than `/readyz`'s. Before, the page showed the stale failure and recorded it as a
/// new outage starting after Redis had answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_seen_by_readyz_is_not_undone_by_an_older_failure() {
    let redis = RedisServer::start();
    // The sampler's probe only at start (a 10-minute interval): the page and /readyz probe.
    let toml = format!(
        "[server]\nhistory_interval = \"10m\"\n[store]\nredis = \"{}\"\ntimeout = \"50ms\"\n{}",
        redis.url(),
        one_limit("recovery", "gcra", 5, "1s", r#""user""#, "deny")
    );
    let config = Config::parse(&toml, "test.toml", &Overrides::default()).expect("valid");
    let server = TestServer::start_with(Server::new(config)).await;
    assert_eq!(server.get("/readyz").await.status, 200);
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };

    redis.pause();
    // Until the page's own probe fails (it first reuses its last "up" for up to a second),
    // seen fresh: the failure it would reuse is then under a second old for a while.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = server.get("/v1/status").await.json;
        let store = &status["store"];
        if store["up"] == false && store["probe_age_ms"].as_f64() < Some(100.0) {
            assert_eq!(store["error"], "timeout", "{status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the page never saw Redis frozen: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumed_ms = now_ms();
    redis.resume();
    let ready = eventually(Duration::from_secs(10), || async {
        server.get("/readyz").await.status == 200
    })
    .await;
    assert!(ready, "/readyz never answered 200 after the thaw");
    let ready_ms = now_ms();

    for _ in 0..2 {
        let status = server.get("/v1/status").await.json;
        let store = &status["store"];
        assert_eq!(store["up"], true, "Redis answered /readyz: {status}");
        assert_eq!(store["error"], serde_json::Value::Null, "{status}");
        let outage = &store["outage"];
        let from = outage["from_ms"].as_u64().expect("an outage");
        let to = outage["to_ms"].as_u64();
        assert!(
            from <= resumed_ms,
            "began while frozen: {outage} ({resumed_ms})"
        );
        assert!(
            to.is_some_and(|to| to + 1 >= resumed_ms && to <= ready_ms + 1),
            "ended at an answer after the thaw, /readyz's at the latest: {outage} \
             (thawed {resumed_ms}, ready {ready_ms})"
        );
        assert_eq!(outage["error"], "timeout", "{outage}");
        let history = server.get("/v1/history").await.json;
        assert_eq!(history["outage"], *outage, "{history}");
    }
    server.stop().await;
}
