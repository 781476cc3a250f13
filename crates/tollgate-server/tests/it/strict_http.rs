//! Requests a production server refuses rather than guesses at: two `Authorization` headers
//! on a reset (which one would be the caller's?) and a request target longer than any real
//! one (a 20 KB URI is a probe or a bug, not a route to look up).

use bytes::Bytes;

use crate::support::{TestServer, one_limit, request};

/// Two `Authorization` headers are refused with 400 and a message naming the problem, even
/// when either holds the right token; nothing is reset. One header still works.
#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let toml = format!(
        "[server]\nadmin_token = \"s3cret-token\"\n{}",
        one_limit("auth_a", "fixed_window", 1, "1h", r#""user""#, "deny")
    );
    let server = TestServer::start(&toml).await;
    let body = r#"{"limit": "auth_a", "key": {"user": "1"}}"#;
    assert_eq!(server.post("/v1/check", body).await.status, 200);
    assert_eq!(server.post("/v1/check", body).await.status, 429);
    for pair in [
        ["Bearer s3cret-token", "Bearer wrong"],
        ["Bearer wrong", "Bearer s3cret-token"],
        ["Bearer s3cret-token", "Bearer s3cret-token"],
    ] {
        let reply = server
            .post_with(
                "/v1/reset",
                body,
                &[("authorization", pair[0]), ("authorization", pair[1])],
            )
            .await;
        assert_eq!(reply.status, 400, "{pair:?}: {reply:?}");
        assert!(
            reply.error().contains("more than one Authorization header"),
            "{reply:?}"
        );
        assert_eq!(
            server.post("/v1/check", body).await.status,
            429,
            "{pair:?}: nothing was reset"
        );
    }
    let one = server
        .post_with(
            "/v1/reset",
            body,
            &[("authorization", "Bearer s3cret-token")],
        )
        .await;
    assert_eq!(one.status, 200, "{one:?}");
    assert_eq!(server.post("/v1/check", body).await.status, 200);
}

/// A 20 KB request target is answered 414 with the API's JSON error (on a route that exists
/// and on one that does not), and the connection closed; an ordinary long query still
/// reaches the router.
#[tokio::test]
async fn a_uri_of_20_kb_is_answered_414() {
    let server = TestServer::start(&one_limit("uri_a", "gcra", 5, "1m", "", "deny")).await;
    let series = r#"tollgate_http_requests_total{route="other",status="414"}"#;
    let counted = async || {
        let scrape = server.get("/metrics").await.text;
        crate::support::sample(&scrape, series).map_or(0, |v| v.parse::<u64>().expect("count"))
    };
    let before = counted().await;
    for path in ["/v1/check", "/v1/nope"] {
        let target = format!("{path}?pad={}", "a".repeat(20 * 1024));
        let reply = request(
            server.addr,
            "POST",
            &target,
            Bytes::from_static(br#"{"limit": "uri_a"}"#),
            &[],
        )
        .await;
        assert_eq!(reply.status, 414, "{path}: {reply:?}");
        assert_eq!(reply.error(), "request URI too long", "{reply:?}");
        assert_eq!(reply.header("connection"), Some("close"), "{reply:?}");
    }
    // Nothing was counted by the refused checks; the refusals are (this process's recorder
    // is shared by the tests running beside this one: at least these two).
    assert_eq!(server.remaining("uri_a", "{}").await, 5);
    assert!(counted().await >= before + 2, "{series}");
    let ok = server
        .get(&format!("/v1/limits?pad={}", "a".repeat(2 * 1024)))
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
}
