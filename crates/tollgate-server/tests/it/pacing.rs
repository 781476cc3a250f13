//! `POST /v1/acquire` and `POST /v1/adjust`: slots answered as waits (decisions on a fake
//! clock, so every wait is exact), held responses, a held client that goes away giving its
//! slot back, settlements, and every bad request answered 400 naming what is wrong.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tollgate_testkit::RedisServer;

use crate::support::{TestServer, eventually, one_limit};

/// One call every `period / limit`, no burst beyond one.
fn paced(limit: u64, period: &str) -> String {
    format!(
        "{}burst = 1\n{}",
        one_limit("upstream", "gcra", limit, period, r#""account""#, "deny"),
        one_limit("window", "sliding_log", 5, "1m", r#""account""#, "deny"),
    )
}

fn acquire(max_wait_ms: u64, hold: bool) -> String {
    format!(
        r#"{{"limit":"upstream","key":{{"account":"a1"}},"max_wait_ms":{max_wait_ms},"hold":{hold}}}"#
    )
}

/// Slots one second apart: each acquire is told its wait (0, 1000, 2000 ms); one whose slot is
/// further than it accepts is refused (429, `Retry-After`), charging nothing.
#[tokio::test]
async fn acquires_are_answered_their_slots() {
    let server = TestServer::start(&paced(60, "1m")).await;
    let mut waits = Vec::new();
    for _ in 0..3 {
        let reply = server.post("/v1/acquire", &acquire(5_000, false)).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json["allowed"], true, "{reply:?}");
        assert_eq!(reply.json["held"], false, "{reply:?}");
        assert!(reply.header("ratelimit-policy").is_some(), "{reply:?}");
        waits.push(reply.json["wait_ms"].as_u64().expect("wait_ms"));
    }
    assert_eq!(waits, [0, 1_000, 2_000]);
    let refused = server.post("/v1/acquire", &acquire(2_500, false)).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.json["allowed"], false, "{refused:?}");
    assert!(refused.json.get("wait_ms").is_none(), "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"), "{refused:?}");
    // The refusal took nothing: the next slot is still at 3 s.
    let next = server.post("/v1/acquire", &acquire(5_000, false)).await;
    assert_eq!(next.json["wait_ms"], 3_000, "{next:?}");
}

/// `"hold": true`: the service sleeps until the slot before answering (never early).
#[tokio::test]
async fn a_held_acquire_answers_at_its_slot() {
    let server = TestServer::start(&paced(10, "1s")).await;
    let first = server.post("/v1/acquire", &acquire(1_000, true)).await;
    assert_eq!(first.json["wait_ms"], 0, "{first:?}");
    let started = Instant::now();
    let held = server.post("/v1/acquire", &acquire(1_000, true)).await;
    let took = started.elapsed();
    assert_eq!(held.status, 200, "{held:?}");
    assert_eq!(held.json["held"], true, "{held:?}");
    assert_eq!(held.json["wait_ms"], 100, "{held:?}");
    assert!(
        took >= Duration::from_millis(100),
        "answered after {took:?}"
    );
}

/// A client that goes away while its acquire is held gives its slot back: the key's schedule
/// ends at the first slot again, and the next acquire gets the slot the gone one had.
#[tokio::test]
async fn a_held_client_that_leaves_gives_its_slot_back() {
    let server = TestServer::start(&paced(30, "1m")).await;
    let first = server.post("/v1/acquire", &acquire(10_000, false)).await;
    assert_eq!(first.json["wait_ms"], 0, "{first:?}");
    let reset_after = || async {
        let peek = server
            .post("/v1/peek", r#"{"limit":"upstream","key":{"account":"a1"}}"#)
            .await;
        peek.json["reset_after_ms"]
            .as_u64()
            .expect("reset_after_ms")
    };
    assert_eq!(reset_after().await, 2_000);
    let body = acquire(10_000, true);
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    let head = format!(
        "POST /v1/acquire HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.expect("send");
    assert!(
        eventually(Duration::from_secs(5), || async {
            reset_after().await == 4_000
        })
        .await,
        "the held acquire took the slot at 2 s"
    );
    drop(socket);
    assert!(
        eventually(Duration::from_secs(5), || async {
            reset_after().await == 2_000
        })
        .await,
        "the slot came back when the client left"
    );
    let next = server.post("/v1/acquire", &acquire(10_000, false)).await;
    assert_eq!(next.json["wait_ms"], 2_000, "{next:?}");
}

/// Settling: a refund gives units back, a charge past the limit leaves a debt that refuses
/// the next check; the answer is the key's state after.
#[tokio::test]
async fn adjust_charges_and_refunds() {
    let config = one_limit("tokens", "token_bucket", 100, "1m", r#""account""#, "deny");
    let server = TestServer::start(&config).await;
    let key = r#""key":{"account":"a1"}"#;
    let check = server
        .post(
            "/v1/check",
            &format!(r#"{{"limit":"tokens",{key},"cost":40}}"#),
        )
        .await;
    assert_eq!(check.json["remaining"], 60, "{check:?}");
    let refund = server
        .post(
            "/v1/adjust",
            &format!(r#"{{"limit":"tokens",{key},"delta":-25}}"#),
        )
        .await;
    assert_eq!(refund.status, 200, "{refund:?}");
    assert_eq!(refund.json["remaining"], 85, "{refund:?}");
    assert_eq!(refund.json["delta"], -25, "{refund:?}");
    assert_eq!(refund.json["quota"], 100, "{refund:?}");
    let charge = server
        .post(
            "/v1/adjust",
            &format!(r#"{{"limit":"tokens",{key},"delta":100}}"#),
        )
        .await;
    assert_eq!(charge.status, 200, "{charge:?}");
    assert_eq!(charge.json["remaining"], 0, "{charge:?}");
    let after = server
        .post("/v1/check", &format!(r#"{{"limit":"tokens",{key}}}"#))
        .await;
    assert_eq!(after.status, 429, "a debt refuses: {after:?}");
}

/// Every bad request is a 400 that says what is wrong, and changes nothing.
#[tokio::test]
async fn bad_acquires_and_adjusts_say_what_is_wrong() {
    let server = TestServer::start(&paced(60, "1m")).await;
    let cases = [
        (
            "/v1/acquire",
            r#"{"limit":"window","key":{"account":"a"},"max_wait_ms":10}"#,
            "sliding_log",
        ),
        (
            "/v1/acquire",
            r#"{"limit":"upstream","key":{"account":"a"}}"#,
            "max_wait_ms",
        ),
        (
            "/v1/acquire",
            r#"{"limit":"upstream","key":{"account":"a"},"max_wait_ms":60001}"#,
            "max_wait_ms: 60001 is above",
        ),
        (
            "/v1/acquire",
            r#"{"limits":["upstream"],"key":{"account":"a"},"max_wait_ms":10}"#,
            "limits",
        ),
        (
            "/v1/acquire",
            r#"{"limit":"nope","key":{"account":"a"},"max_wait_ms":10}"#,
            "nope",
        ),
        (
            "/v1/acquire",
            r#"{"limit":"upstream","key":{},"max_wait_ms":10}"#,
            "account",
        ),
        (
            "/v1/acquire",
            r#"{"limit":"upstream","key":{"account":"a"},"max_wait_ms":-1}"#,
            "max_wait_ms",
        ),
        (
            "/v1/adjust",
            r#"{"limit":"upstream","key":{"account":"a"},"delta":"x"}"#,
            "delta",
        ),
        (
            "/v1/adjust",
            r#"{"limit":"upstream","key":{"account":"a"},"delta":2}"#,
            "delta 2 is beyond what limit \"upstream\" can ever admit: at most 1 units",
        ),
        (
            "/v1/adjust",
            r#"{"limit":"upstream","key":{"account":"a"},"delta":-9223372036854775808}"#,
            "delta -9223372036854775808 is beyond",
        ),
        (
            "/v1/adjust",
            r#"{"limit":"upstream","key":{"account":"a","account":"b"},"delta":1}"#,
            "duplicate key part",
        ),
    ];
    for (path, body, says) in cases {
        let reply = server.post(path, body).await;
        assert_eq!(reply.status, 400, "{path} {body}: {reply:?}");
        assert!(
            reply.error().contains(says),
            "{path} {body}: {:?} should say {says:?}",
            reply.error()
        );
    }
    // Nothing above took a slot.
    let first = server.post("/v1/acquire", &acquire(0, false)).await;
    assert_eq!(first.json["wait_ms"], 0, "{first:?}");
}

/// A settlement has no failure policy: with Redis gone it is a 503 saying so.
#[tokio::test]
async fn adjust_with_the_store_down_is_unavailable() {
    let mut redis = RedisServer::start();
    let config = format!(
        "[store]\nredis = \"{}\"\ntimeout = \"200ms\"\n{}",
        redis.url(),
        one_limit("tokens", "token_bucket", 100, "1m", r#""account""#, "allow"),
    );
    let server = TestServer::start(&config).await;
    let body = r#"{"limit":"tokens","key":{"account":"a1"},"delta":-5}"#;
    assert_eq!(server.post("/v1/adjust", body).await.status, 200);
    redis.kill();
    let reply = server.post("/v1/adjust", body).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert!(reply.error().starts_with("store unavailable"), "{reply:?}");
}
