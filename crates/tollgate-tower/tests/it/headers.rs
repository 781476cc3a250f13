//! The fields on the wire: exact values in the draft's structured-field syntax, `Retry-After`
//! rounding, `hide_remaining`, the legacy fields and the default 429 body.

use std::time::Duration;

use http::StatusCode;
use tollgate::{Algorithm, FakeClock};
use tollgate_tower::{ClientIp, Global, RateLimitLayer};

use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);

/// Checks one field against the draft's list syntax: items `"<name>"` with integer
/// parameters, separated by `, `; returns (name, [(param, value)]).
fn parse_sf_list(field: &str) -> Vec<(String, Vec<(String, u64)>)> {
    field
        .split(", ")
        .map(|item| {
            let mut pieces = item.split(';');
            let name = pieces.next().expect("item");
            assert!(
                name.len() >= 2 && name.starts_with('"') && name.ends_with('"'),
                "item {item:?} of {field:?} is not an sf-string"
            );
            let name = &name[1..name.len() - 1];
            assert!(!name.contains(['"', '\\']), "{field:?}");
            let params = pieces
                .map(|p| {
                    let (k, v) = p.split_once('=').expect("param=value");
                    assert!(
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase()),
                        "key {k:?} in {field:?}"
                    );
                    (k.to_owned(), v.parse::<u64>().expect("integer parameter"))
                })
                .collect();
            (name.to_owned(), params)
        })
        .collect()
}

fn two_level(clock: &FakeClock) -> RateLimitLayer {
    let limiter = limiter(
        memory(clock),
        clock,
        vec![
            limit("global", Algorithm::FixedWindow, 10, MINUTE, &[]),
            limit("per_ip", Algorithm::FixedWindow, 3, MINUTE, &["ip"]),
        ],
    );
    RateLimitLayer::new(limiter, ["global", "per_ip"], (ClientIp::new(), Global)).expect("layer")
}

/// `RateLimit-Policy` and `RateLimit` carry one item per limit, with exact values rounded up;
/// a refusal adds `Retry-After` and the problem body.
#[tokio::test]
async fn exact_header_values() {
    let clock = clock();
    let svc = service(&two_level(&clock));
    let policy = r#""global";q=10;w=60, "per_ip";q=3;w=60"#;

    let resp = send(&svc, from("203.0.113.1")).await;
    assert_status(&resp, StatusCode::OK);
    assert_eq!(header(&resp, "ratelimit-policy"), policy);
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""global";r=9;t=60, "per_ip";r=2;t=60"#
    );
    assert_eq!(header(&resp, "retry-after"), "");
    let parsed = parse_sf_list(&header(&resp, "ratelimit-policy"));
    assert_eq!(parsed[1].0, "per_ip");
    assert_eq!(parsed[1].1, [("q".to_owned(), 3), ("w".to_owned(), 60)]);

    clock.advance(Duration::from_millis(500));
    let resp = send(&svc, from("203.0.113.1")).await;
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""global";r=8;t=60, "per_ip";r=1;t=60"#
    );

    clock.advance(Duration::from_secs(20));
    let resp = send(&svc, from("203.0.113.1")).await;
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""global";r=7;t=40, "per_ip";r=0;t=40"#
    );

    let resp = send(&svc, from("203.0.113.1")).await;
    assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "40");
    assert_eq!(header(&resp, "ratelimit-policy"), policy);
    let rate_limit = header(&resp, "ratelimit");
    assert_eq!(rate_limit, r#""global";r=7;t=40, "per_ip";r=0;t=40"#);
    for (_, params) in parse_sf_list(&rate_limit) {
        let keys: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["r", "t"], "{rate_limit}");
    }
    assert_eq!(header(&resp, "content-type"), "application/problem+json");
    let body: serde_json::Value = serde_json::from_str(&body_text(resp).await).expect("json body");
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Too Many Requests");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("per_ip")),
        "{body}"
    );
}

/// `Retry-After` is whole seconds rounded up and never 0: 1.2 s → 2, 0.0005 s → 1.
#[tokio::test]
async fn retry_after_rounds_up() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit(
            "slow",
            Algorithm::Gcra,
            1,
            Duration::from_secs(2),
            &["ip"],
        )],
    );
    let svc = service(&RateLimitLayer::new(limiter, ["slow"], ClientIp::new()).expect("layer"));
    assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);

    clock.advance(Duration::from_millis(800));
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "2", "1.2 s left");
    assert_eq!(header(&resp, "ratelimit"), r#""slow";r=0;t=2"#);

    clock.advance(Duration::from_micros(1_199_500));
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "1", "0.0005 s left");
    assert_eq!(header(&resp, "ratelimit"), r#""slow";r=0;t=1"#);

    clock.advance(Duration::from_micros(500));
    assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);
}

/// `hide_remaining` drops `r=` (and the legacy remaining field); legacy fields are opt-in.
#[tokio::test]
async fn hide_remaining_and_legacy_fields() {
    let clock = clock();
    let plain = service(&two_level(&clock));
    let resp = send(&plain, from("203.0.113.1")).await;
    assert_eq!(header(&resp, "x-ratelimit-limit"), "");

    let legacy = service(&two_level(&clock).legacy_headers(true));
    let resp = send(&legacy, from("203.0.113.1")).await;
    // a fresh limiter: the most restrictive limit is per_ip, 2 left
    assert_eq!(header(&resp, "x-ratelimit-limit"), "3");
    assert_eq!(header(&resp, "x-ratelimit-remaining"), "2");
    assert_eq!(header(&resp, "x-ratelimit-reset"), "60");

    let hidden = service(&two_level(&clock).hide_remaining(true).legacy_headers(true));
    let resp = send(&hidden, from("203.0.113.1")).await;
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""global";t=60, "per_ip";t=60"#
    );
    assert_eq!(header(&resp, "x-ratelimit-remaining"), "");
    assert_eq!(header(&resp, "x-ratelimit-limit"), "3");
    let parsed = parse_sf_list(&header(&resp, "ratelimit"));
    assert!(parsed.iter().all(|(_, p)| p.iter().all(|(k, _)| k != "r")));
}

/// A custom body replaces the problem document; the layer still adds `Retry-After` and the
/// rate-limit fields.
#[tokio::test]
async fn custom_refusal_body_keeps_headers() {
    let clock = clock();
    let layer = two_level(&clock).respond_with(|rejection| {
        let mut resp = http::Response::new(bytes::Bytes::from("slow down"));
        *resp.status_mut() = rejection.status();
        resp
    });
    let svc = service(&layer);
    let got = statuses(&svc, 3, || from("203.0.113.1")).await;
    assert_eq!(got, [200, 200, 200]);
    let resp = send(&svc, from("203.0.113.1")).await;
    assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "60");
    assert!(header(&resp, "ratelimit").contains(r#""per_ip";r=0;t=60"#));
    assert_eq!(body_text(resp).await, "slow down");
}

/// Two layers, one around the other (a router-wide limit and a per-route one): each adds its
/// own items to `RateLimit-Policy` and `RateLimit`, and a refusal by the inner one shows the
/// refusing limit. The outer layer's items used to replace the inner's, and the 429 showed only
/// `global`, which had admitted it.
#[tokio::test]
async fn stacked_layers_each_add_their_items() {
    let clock = clock();
    let outer = RateLimitLayer::new(
        limiter(
            memory(&clock),
            &clock,
            vec![limit("global", Algorithm::FixedWindow, 100, MINUTE, &[])],
        ),
        ["global"],
        Global,
    )
    .expect("layer");
    let inner = RateLimitLayer::new(
        limiter(
            memory(&clock),
            &clock,
            vec![limit("per_ip", Algorithm::FixedWindow, 1, MINUTE, &["ip"])],
        ),
        ["per_ip"],
        ClientIp::new(),
    )
    .expect("layer");
    let svc = tower::Layer::layer(&outer, service(&inner));
    let all = |resp: &http::Response<_>, name: &str| -> Vec<String> {
        resp.headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect()
    };
    let resp = tower::ServiceExt::oneshot(svc.clone(), from("203.0.113.1"))
        .await
        .expect("infallible");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        all(&resp, "ratelimit-policy"),
        [r#""per_ip";q=1;w=60"#, r#""global";q=100;w=60"#]
    );
    let resp = tower::ServiceExt::oneshot(svc, from("203.0.113.1"))
        .await
        .expect("infallible");
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        all(&resp, "ratelimit"),
        [r#""per_ip";r=0;t=60"#, r#""global";r=98;t=60"#]
    );
    assert_eq!(header(&resp, "retry-after"), "60");
}
