//! Every kind of bad request gets a 4xx with `{"error": ...}` saying what is wrong, and
//! changes nothing.

use crate::support::TestServer;

const LIMITS: &str = r#"
[[limits]]
name = "bad_user"
algorithm = "fixed_window"
limit = 5
period = "1m"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "bad_global"
algorithm = "gcra"
limit = 5
period = "1m"
on_store_error = "deny"
"#;

/// Each case: body, expected status, a fragment of the error message.
const CASES: &[(&str, u16, &str)] = &[
    ("", 400, "request body is empty"),
    ("{", 400, "invalid JSON"),
    ("[1, 2]", 400, "not a JSON object"),
    // An array that reads as a check, field by field, is refused too.
    (
        r#"["bad_user", null, {"user": "1"}, 1]"#,
        400,
        "not a JSON object",
    ),
    (
        r#"{"limit": "bad_user", "key": {"user": "1"}} trailing"#,
        400,
        "invalid JSON",
    ),
    (
        r#"{"limit": "bad_user", "key": {"user": "1"}, "extra": 1}"#,
        400,
        "unknown field `extra`",
    ),
    (
        r#"{"limit": "nope", "key": {"user": "1"}}"#,
        400,
        r#"unknown limit "nope""#,
    ),
    (
        r#"{"limit": "bad_user", "key": {"ip": "1"}}"#,
        400,
        r#"needs key part "user""#,
    ),
    (r#"{"limit": "bad_user"}"#, 400, r#"needs key part "user""#),
    (
        r#"{"limit": "bad_user", "key": {"user": "1"}, "cost": 0}"#,
        400,
        "cost must be at least 1",
    ),
    (
        r#"{"limit": "bad_user", "key": {"user": "1"}, "cost": 6}"#,
        400,
        "cost 6 exceeds what limit \"bad_user\" can ever admit (5)",
    ),
    (
        r#"{"limit": "bad_user", "key": {"user": "1"}, "cost": -1}"#,
        400,
        "invalid JSON at cost",
    ),
    (
        r#"{"limit": "bad_user", "key": {"user": true}}"#,
        400,
        "invalid JSON at key.user",
    ),
    (
        r#"{"limit": "bad_user", "limits": ["bad_global"], "key": {"user": "1"}}"#,
        400,
        "not both",
    ),
    (r#"{"key": {"user": "1"}}"#, 400, "missing field \"limit\""),
    (
        r#"{"limits": [], "key": {"user": "1"}}"#,
        400,
        "no limit given",
    ),
    (
        r#"{"limits": ["bad_global", "bad_global"], "key": {"user": "1"}}"#,
        400,
        "named twice",
    ),
    (
        r#"{"limits": ["bad_global", "nope"], "key": {"user": "1"}}"#,
        400,
        r#"unknown limit "nope""#,
    ),
    (
        r#"{"limits": ["bad_global", "bad_user"], "key": {"user": "1"}, "cost": 6}"#,
        400,
        "cost 6 exceeds",
    ),
    (
        r#"{"limit": "bad_user", "key": {"user": "A", "user": "B"}}"#,
        400,
        "duplicate key part `user`",
    ),
];

/// Malformed JSON, unknown limits and fields, missing key parts, bad costs: 400 with the
/// reason, on both check and peek, and no unit is taken from either limit.
#[tokio::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let server = TestServer::start(LIMITS).await;
    for path in ["/v1/check", "/v1/peek"] {
        for (body, status, fragment) in CASES {
            let reply = server.post(path, body).await;
            assert_eq!(reply.status, *status, "{path} {body}: {reply:?}");
            assert!(
                reply.error().contains(fragment),
                "{path} {body}: expected {fragment:?} in {reply:?}"
            );
            assert_eq!(reply.header("content-type"), Some("application/json"));
        }
    }
    assert_eq!(server.remaining("bad_user", r#"{"user": "1"}"#).await, 5);
    assert_eq!(server.remaining("bad_global", "{}").await, 5);
}

/// A body over 16 KiB is refused with 413 before it is parsed.
#[tokio::test]
async fn oversized_body_is_refused() {
    let server = TestServer::start(LIMITS).await;
    let padding = "x".repeat(17 * 1024);
    let body = format!(r#"{{"limit": "bad_global", "key": {{"pad": "{padding}"}}}}"#);
    let reply = server.post("/v1/check", &body).await;
    assert_eq!(reply.status, 413, "{}", reply.text);
    assert!(reply.error().contains("16384 bytes"), "{reply:?}");
    assert_eq!(server.remaining("bad_global", "{}").await, 5);
}

/// A key part value over 1 KiB is refused (400), even within the body limit.
#[tokio::test]
async fn oversized_key_value_is_refused() {
    let server = TestServer::start(LIMITS).await;
    let long = "u".repeat(1025);
    let body = format!(r#"{{"limit": "bad_user", "key": {{"user": "{long}"}}}}"#);
    let reply = server.post("/v1/check", &body).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(
        reply.error().contains("longer than 1024 bytes"),
        "{reply:?}"
    );
    let ok = format!(
        r#"{{"limit": "bad_user", "key": {{"user": "{}"}}}}"#,
        "u".repeat(1024)
    );
    assert_eq!(
        server.post("/v1/check", &ok).await.status,
        200,
        "1024 bytes is allowed"
    );
}

/// Integer key values are taken as their decimal text: `42` and `"42"` are one key.
#[tokio::test]
async fn integer_key_values_are_text() {
    let server = TestServer::start(LIMITS).await;
    assert_eq!(
        server
            .post("/v1/check", r#"{"limit": "bad_user", "key": {"user": 42}}"#)
            .await
            .status,
        200
    );
    assert_eq!(server.remaining("bad_user", r#"{"user": "42"}"#).await, 4);
}

/// Unknown paths are 404 and wrong methods 405, with a JSON error.
#[tokio::test]
async fn unknown_endpoint_is_404() {
    let server = TestServer::start(LIMITS).await;
    let reply = server.get("/v2/check").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.error(), "no such endpoint");
    let reply = server.get("/v1/check").await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.error(), "method not allowed");
}
