//! The HTTP API on the memory store, time from a fake clock.

use std::time::Duration;

use crate::support::{TestServer, one_limit};

/// Allowed checks answer 200 with the tower layer's headers; the refusal answers 429 with an
/// integer `Retry-After` rounded up; the quota is back once the window has passed. Both are
/// JSON, and say so.
#[tokio::test]
async fn check_allows_then_refuses_with_retry_after() {
    let server = TestServer::start(&one_limit(
        "api_a",
        "fixed_window",
        2,
        "1m",
        r#""user""#,
        "deny",
    ))
    .await;
    let body = r#"{"limit": "api_a", "key": {"user": "42"}, "cost": 1}"#;
    for remaining in [1, 0] {
        let reply = server.post("/v1/check", body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json["allowed"], true, "{reply:?}");
        assert_eq!(reply.json["remaining"], remaining, "{reply:?}");
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(
            reply.header("ratelimit-policy"),
            Some(r#""api_a";q=2;w=60"#)
        );
        assert_eq!(
            reply.header("ratelimit"),
            Some(format!(r#""api_a";r={remaining};t=60"#).as_str())
        );
        assert_eq!(reply.header("retry-after"), None);
    }
    server.clock.advance(Duration::from_millis(500));
    let refused = server.post("/v1/check", body).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.json["allowed"], false);
    assert_eq!(refused.header("content-type"), Some("application/json"));
    assert_eq!(refused.json["limit"], 2);
    assert_eq!(refused.json["retry_after_ms"], 59_500, "{refused:?}");
    assert_eq!(
        refused.header("retry-after"),
        Some("60"),
        "59.5 s rounds up"
    );
    assert_eq!(refused.json["decisions"][0]["limit"], "api_a");
    assert_eq!(refused.json["decisions"][0]["allowed"], false);

    server.clock.advance(Duration::from_secs(60));
    assert_eq!(server.post("/v1/check", body).await.status, 200);
}

/// A sub-second wait is still `Retry-After: 1`, never 0.
#[tokio::test]
async fn retry_after_is_never_zero() {
    let server =
        TestServer::start(&one_limit("api_b", "gcra", 10, "1s", r#""user""#, "deny")).await;
    let body = r#"{"limit": "api_b", "key": {"user": "1"}, "cost": 10}"#;
    assert_eq!(server.post("/v1/check", body).await.status, 200);
    let refused = server
        .post("/v1/check", r#"{"limit": "api_b", "key": {"user": "1"}}"#)
        .await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json["retry_after_ms"], 100, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
}

const TWO_LIMITS: &str = r#"
[[limits]]
name = "multi_global"
algorithm = "gcra"
limit = 5
period = "1m"
on_store_error = "deny"

[[limits]]
name = "multi_user"
algorithm = "sliding_log"
limit = 1
period = "1m"
key = ["user"]
on_store_error = "deny"
"#;

/// `limits` is all or nothing: when the per-user limit refuses, the global one is not charged;
/// the top level describes the refusing limit, `decisions` lists both in the order asked.
#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    let server = TestServer::start(TWO_LIMITS).await;
    let body = r#"{"limits": ["multi_global", "multi_user"], "key": {"user": "7"}}"#;
    let first = server.post("/v1/check", body).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(
        first.json["remaining"], 0,
        "most restrictive: multi_user {first:?}"
    );
    assert_eq!(
        first.header("ratelimit-policy"),
        Some(r#""multi_global";q=5;w=60, "multi_user";q=1;w=60"#)
    );

    let second = server.post("/v1/check", body).await;
    assert_eq!(second.status, 429, "{second:?}");
    assert_eq!(
        second.json["limit"], 1,
        "top level is multi_user: {second:?}"
    );
    let decisions = second.json["decisions"].as_array().expect("decisions");
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[0]["limit"], "multi_global");
    assert_eq!(decisions[0]["allowed"], true);
    assert_eq!(decisions[1]["limit"], "multi_user");
    assert_eq!(decisions[1]["allowed"], false);
    assert_eq!(
        server.remaining("multi_global", "{}").await,
        4,
        "the refused check took nothing"
    );
}

/// Peek answers like a check but consumes nothing.
#[tokio::test]
async fn peek_consumes_nothing() {
    let server = TestServer::start(&one_limit(
        "peek_a",
        "token_bucket",
        3,
        "1m",
        r#""user""#,
        "deny",
    ))
    .await;
    for _ in 0..5 {
        let reply = server
            .post(
                "/v1/peek",
                r#"{"limit": "peek_a", "key": {"user": "1"}, "cost": 3}"#,
            )
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json["allowed"], true);
    }
    assert_eq!(server.remaining("peek_a", r#"{"user": "1"}"#).await, 3);
}

/// Reset needs the admin token (401 without or with a wrong one) and then forgets the key.
#[tokio::test]
async fn reset_needs_the_admin_token() {
    let toml = format!(
        "[server]\nadmin_token = \"s3cret-token\"\n{}",
        one_limit("reset_a", "fixed_window", 1, "1h", r#""user""#, "deny")
    );
    let server = TestServer::start(&toml).await;
    let body = r#"{"limit": "reset_a", "key": {"user": "1"}}"#;
    assert_eq!(server.post("/v1/check", body).await.status, 200);
    assert_eq!(server.post("/v1/check", body).await.status, 429);

    let missing = server.post("/v1/reset", body).await;
    assert_eq!(missing.status, 401, "{missing:?}");
    assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
    for wrong in [
        "Bearer s3cret-tokem",
        "Bearer s3cret-token2",
        "Basic s3cret-token",
        "s3cret-token",
    ] {
        let reply = server
            .post_with("/v1/reset", body, &[("authorization", wrong)])
            .await;
        assert_eq!(reply.status, 401, "{wrong}: {reply:?}");
    }
    assert_eq!(
        server.post("/v1/check", body).await.status,
        429,
        "nothing was reset"
    );

    let ok = server
        .post_with(
            "/v1/reset",
            body,
            &[("authorization", "Bearer s3cret-token")],
        )
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(server.post("/v1/check", body).await.status, 200);
    // The scheme is case-insensitive (RFC 9110): a lowercase `bearer` works too.
    assert_eq!(server.post("/v1/check", body).await.status, 429);
    let lower = server
        .post_with(
            "/v1/reset",
            body,
            &[("authorization", "bearer s3cret-token")],
        )
        .await;
    assert_eq!(lower.status, 200, "{lower:?}");
    assert_eq!(server.post("/v1/check", body).await.status, 200);
}

/// Without an admin token in the config, reset is refused outright.
#[tokio::test]
async fn reset_is_disabled_without_a_token() {
    let server = TestServer::start(&one_limit("reset_b", "gcra", 1, "1h", "", "deny")).await;
    let reply = server
        .post_with(
            "/v1/reset",
            r#"{"limit": "reset_b"}"#,
            &[("authorization", "Bearer anything")],
        )
        .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(reply.error().contains("no admin_token"), "{reply:?}");
}

/// A shadow limit never refuses; its would-be denials are reported and counted.
#[tokio::test]
async fn shadow_limits_count_but_never_refuse() {
    let toml = format!(
        "{}shadow = true\n",
        one_limit("shadow_only", "fixed_window", 1, "1h", r#""user""#, "allow")
    );
    let server = TestServer::start(&toml).await;
    let body = r#"{"limit": "shadow_only", "key": {"user": "1"}}"#;
    let first = server.post("/v1/check", body).await;
    let second = server.post("/v1/check", body).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.json["allowed"], true);
    assert_eq!(second.json["decisions"][0]["shadow"], true);
    assert_eq!(
        second.json["decisions"][0]["shadow_denied"], true,
        "{second:?}"
    );
    assert_eq!(second.header("retry-after"), None);
    let metrics = server.get("/metrics").await;
    assert!(
        metrics
            .text
            .contains(r#"tollgate_shadow_denied_total{limit="shadow_only"} 1"#),
        "{}",
        metrics.text
    );
}

/// With an enforced limit next to a shadow one, only the enforced limit refuses.
#[tokio::test]
async fn shadow_beside_enforced() {
    let toml = format!(
        "{}{}shadow = true\n",
        one_limit("mix_enforced", "fixed_window", 3, "1h", r#""user""#, "deny"),
        one_limit("mix_shadow", "fixed_window", 1, "1h", r#""user""#, "allow")
    );
    let server = TestServer::start(&toml).await;
    let body = r#"{"limits": ["mix_enforced", "mix_shadow"], "key": {"user": "1"}}"#;
    for _ in 0..3 {
        let reply = server.post("/v1/check", body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(
            reply.header("ratelimit-policy"),
            Some(r#""mix_enforced";q=3;w=3600"#)
        );
    }
    let refused = server.post("/v1/check", body).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.json["limit"], 3, "top level is the enforced limit");
}

/// When the store fails, each limit's policy decides: `deny` answers 503 (not 429) with a
/// Retry-After, `allow` answers 200 and names the store error.
///
/// The failure: a memory store capped at one key, asked for two new keys at once (a check of
/// two limits). A check's own keys are never evicted for each other, so whichever shards the
/// keys hash to, at most one finds room: the store answers `full`. (One new key alone would
/// evict the stored one when they share a shard, which hashing leaves to chance.)
#[tokio::test]
async fn store_failure_follows_the_policy() {
    let toml = format!(
        "[store]\nmax_keys = 1\n{}{}{}",
        one_limit("fail_deny", "gcra", 10, "1m", r#""user""#, "deny"),
        one_limit("fail_allow", "gcra", 10, "1m", r#""user""#, "allow"),
        one_limit("fail_allow_too", "gcra", 10, "1m", r#""user""#, "allow")
    );
    let server = TestServer::start(&toml).await;
    assert_eq!(
        server
            .post(
                "/v1/check",
                r#"{"limit": "fail_deny", "key": {"user": "0"}}"#
            )
            .await
            .status,
        200
    );
    let denied = server
        .post(
            "/v1/check",
            r#"{"limits": ["fail_deny", "fail_allow"], "key": {"user": "1"}}"#,
        )
        .await;
    assert_eq!(denied.status, 503, "{denied:?}");
    assert_eq!(denied.header("retry-after"), Some("1"));
    assert_eq!(
        denied.json["decisions"][0]["store_error"], "full",
        "{denied:?}"
    );
    let allowed = server
        .post(
            "/v1/check",
            r#"{"limits": ["fail_allow", "fail_allow_too"], "key": {"user": "2"}}"#,
        )
        .await;
    assert_eq!(allowed.status, 200, "{allowed:?}");
    assert_eq!(allowed.json["decisions"][0]["store_error"], "full");
    assert_eq!(allowed.json["decisions"][1]["store_error"], "full");
}

/// Listing, health, readiness and metrics.
#[tokio::test]
async fn limits_health_and_metrics() {
    let toml = format!(
        "{}burst = 4\n",
        one_limit(
            "list_a",
            "token_bucket",
            2,
            "1m30s",
            r#""user", "route""#,
            "local"
        )
    );
    let server = TestServer::start(&toml).await;
    let limits = server.get("/v1/limits").await;
    assert_eq!(limits.status, 200);
    assert_eq!(limits.json["store"], "memory");
    let a = &limits.json["limits"][0];
    assert_eq!(a["name"], "list_a");
    assert_eq!(a["algorithm"], "token_bucket");
    assert_eq!(a["period"], "1m30s");
    assert_eq!(a["period_ms"], 90_000);
    assert_eq!(a["burst"], 4);
    assert_eq!(a["key"], serde_json::json!(["user", "route"]));
    assert_eq!(a["on_store_error"], "local");
    assert_eq!(a["shadow"], false);

    assert_eq!(server.get("/healthz").await.status, 200);
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");

    let check = r#"{"limit": "list_a", "key": {"user": "1", "route": "/x"}}"#;
    assert_eq!(server.post("/v1/check", check).await.status, 200);
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .text
            .contains(r#"tollgate_decisions_total{limit="list_a",outcome="allowed"} 1"#),
        "{}",
        metrics.text
    );
    // The memory store answers in-process: its calls are not timed (`Store::in_process`).
    assert!(
        !metrics
            .text
            .contains("tollgate_store_latency_seconds_bucket"),
        "{}",
        metrics.text
    );
    assert!(
        metrics.text.contains(r#"tollgate_keys{limit="list_a"} 1"#),
        "{}",
        metrics.text
    );
}

/// `tollgate bench` drives the check endpoint and counts every answer as a decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_drives_checks() {
    let server =
        TestServer::start(&one_limit("bench_a", "gcra", 50, "1h", r#""user""#, "deny")).await;
    let report = tollgate_server::bench::run(tollgate_server::bench::BenchOptions {
        url: format!("http://{}", server.addr),
        concurrency: 4,
        duration: Duration::from_millis(300),
        limit: Some("bench_a".into()),
        keys: 3,
    })
    .await
    .expect("bench runs");
    assert_eq!(report.other, 0, "{report:?}");
    assert!(report.allowed > 0, "{report:?}");
    assert!(report.allowed <= 150, "3 keys of 50 each: {report:?}");
    assert_eq!(report.latency.len(), report.allowed + report.denied);
}

/// `GET /v1/top`: the most refused keys of a limit, with counts and error bounds, and the
/// limit's refusal ratio; bad queries are 400s that say what is wrong.
#[tokio::test]
async fn top_denied_keys() {
    let server = TestServer::start(&one_limit(
        "top_a",
        "fixed_window",
        1,
        "1h",
        r#""user""#,
        "deny",
    ))
    .await;
    let check = |user: &str| {
        let body = format!(r#"{{"limit": "top_a", "key": {{"user": "{user}"}}}}"#);
        let server = &server;
        async move { server.post("/v1/check", &body).await.status }
    };
    for _ in 0..11 {
        check("abuser").await;
    }
    for user in ["u1", "u2", "u3"] {
        assert_eq!(check(user).await, 200);
        assert_eq!(check(user).await, 429);
    }
    let top = server.get("/v1/top?limit=top_a&k=2").await;
    assert_eq!(top.status, 200, "{top:?}");
    for span in ["recent", "since_start"] {
        let list = top.json[span].as_array().expect("a list");
        assert_eq!(list.len(), 2, "{span}: {top:?}");
        assert_eq!(list[0]["key"]["user"], "abuser", "{span}");
        assert_eq!(
            (list[0]["denied"].as_u64(), list[0]["error"].as_u64()),
            (Some(10), Some(0))
        );
        assert_eq!(list[0]["uncertain"], false, "an exact count: {top:?}");
        assert_eq!(list[1]["denied"], 1);
    }
    let ratio = top.json["deny_ratio"].as_f64().expect("a ratio");
    assert!((ratio - 13.0 / 17.0).abs() < 1e-9, "{ratio}");
    let metrics = server.get("/metrics").await.text;
    assert!(
        metrics.contains(r#"tollgate_deny_ratio{limit="top_a"}"#),
        "{metrics}"
    );

    for (query, fragment) in [
        ("", "missing query parameter limit"),
        ("limit=nope", r#"unknown limit "nope""#),
        ("limit=top_a&k=0", "k must be"),
        ("limit=top_a&k=65", "k must be"),
        ("limit=top_a&x=1", "unknown query parameter"),
    ] {
        let reply = server.get(&format!("/v1/top?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {reply:?}");
        assert!(reply.error().contains(fragment), "{query}: {reply:?}");
    }
}

/// A limit and a key are the same however the JSON spells them: with escapes (`\u0065`),
/// an integer for its decimal text, the key's parts in any order. (Strings are borrowed
/// from the body when they can be, and decoded when they hold escapes: both must agree.)
#[tokio::test]
async fn a_key_is_the_same_however_json_spells_it() {
    let toml = one_limit(
        "spelled",
        "fixed_window",
        10,
        "1h",
        r#""user", "app""#,
        "deny",
    );
    let server = TestServer::start(&toml).await;
    for body in [
        r#"{"limit": "spelled", "key": {"user": "42", "app": "web"}}"#,
        r#"{"limit": "spel\u006ced", "key": {"app": "web", "user": "42"}}"#,
        r#"{"limit": "spelled", "key": {"us\u0065r": 42, "app": "w\u0065b"}}"#,
        r#"{"limits": ["spelled"], "key": {"app": "web", "user": "4\u0032"}}"#,
    ] {
        let reply = server.post("/v1/check", body).await;
        assert_eq!(reply.status, 200, "{body}: {reply:?}");
    }
    let same = r#"{"user": "42", "app": "web"}"#;
    assert_eq!(server.remaining("spelled", same).await, 6);
    // Another value is another key.
    let other = r#"{"user": "43", "app": "web"}"#;
    assert_eq!(server.remaining("spelled", other).await, 10);
}
