//! Several limits per route, checked all or nothing; cost per request; configuration errors
//! found when the layer is built.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::{Algorithm, Verdict};
use tollgate_tower::{ClientIp, ConfigError, FromExtension, Global, RateLimitLayer, Rejection};
use tower::{Layer, service_fn};

use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A client refused by its own limit costs the global limit nothing: the check is all or
/// nothing, so other clients keep the global quota.
#[tokio::test]
async fn per_client_denial_leaves_global_untouched() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![
            limit("global", Algorithm::SlidingLog, 5, MINUTE, &[]),
            limit("per_ip", Algorithm::SlidingLog, 2, MINUTE, &["ip"]),
        ],
    );
    let layer = RateLimitLayer::new(limiter, ["global", "per_ip"], (Global, ClientIp::new()))
        .expect("layer");
    let svc = service(&layer);
    // A: 2 allowed, then 10 refusals by per_ip
    assert_eq!(statuses(&svc, 2, || from("192.0.2.1")).await, [200, 200]);
    for _ in 0..10 {
        let resp = send(&svc, from("192.0.2.1")).await;
        assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            matches!(resp.extensions().get::<Rejection>(), Some(Rejection::RateLimited(r)) if &*r.limit == "per_ip")
        );
    }
    // the global limit still has 3 of 5
    let resp = send(&svc, from("192.0.2.2")).await;
    assert_status(&resp, StatusCode::OK);
    assert!(
        header(&resp, "ratelimit").starts_with(r#""global";r=2;"#),
        "{:?}",
        resp.headers()
    );
    assert_eq!(statuses(&svc, 2, || from("192.0.2.3")).await, [200, 200]);
    // now the global limit refuses a fresh client
    let resp = send(&svc, from("192.0.2.4")).await;
    assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        matches!(resp.extensions().get::<Rejection>(), Some(Rejection::RateLimited(r)) if &*r.limit == "global")
    );
}

/// The cost comes from the request (here its `Content-Length`); a cost above what a limit can
/// ever admit is a 413, not a 429.
#[tokio::test]
async fn cost_from_request() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit("bytes", Algorithm::TokenBucket, 100, MINUTE, &["ip"])],
    );
    let layer = RateLimitLayer::new(limiter, ["bytes"], ClientIp::new())
        .expect("layer")
        .cost(|parts| {
            parts
                .headers
                .get("content-length")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        });
    let svc = service(&layer);
    let sized = |n: u64| request_from("192.0.2.1", move |b| b.header("content-length", n));
    let resp = send(&svc, sized(60)).await;
    assert_status(&resp, StatusCode::OK);
    assert!(
        header(&resp, "ratelimit").contains("r=40"),
        "{:?}",
        resp.headers()
    );
    assert_status(&send(&svc, sized(50)).await, StatusCode::TOO_MANY_REQUESTS);
    assert_status(&send(&svc, sized(40)).await, StatusCode::OK);
    let resp = send(&svc, sized(101)).await;
    assert_status(&resp, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(header(&resp, "retry-after"), "");
    // a cost of 0 counts as 1
    let resp = send(
        &svc,
        request_from("192.0.2.9", |b| b.header("content-length", 0)),
    )
    .await;
    assert!(
        header(&resp, "ratelimit").contains("r=99"),
        "{:?}",
        resp.headers()
    );
}

/// The inner service sees the verdict in the request's extensions.
#[tokio::test]
async fn verdict_reaches_the_handler() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit("per_ip", Algorithm::Gcra, 3, MINUTE, &["ip"])],
    );
    let layer = RateLimitLayer::new(limiter, ["per_ip"], ClientIp::new()).expect("layer");
    let svc = layer.layer(service_fn(|req: Request<String>| async move {
        let remaining = req
            .extensions()
            .get::<Verdict>()
            .map(|v| v.decision().remaining.to_string())
            .unwrap_or_default();
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(remaining))))
    }));
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_eq!(body_text(resp).await, "2");
}

/// Misconfigurations are refused when the layer is built, not on every request.
#[test]
fn configuration_errors_at_build_time() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![
            limit("per_user", Algorithm::Gcra, 3, MINUTE, &["user"]),
            limit("per_ip", Algorithm::Gcra, 3, MINUTE, &["ip"]),
        ],
    );
    let err = |r: Result<RateLimitLayer, ConfigError>| r.expect_err("must be refused");
    assert!(matches!(
        err(RateLimitLayer::new(
            limiter.clone(),
            Vec::<&str>::new(),
            Global
        )),
        ConfigError::NoLimits
    ));
    assert!(matches!(
        err(RateLimitLayer::new(limiter.clone(), ["nope"], Global)),
        ConfigError::UnknownLimit(n) if n == "nope"
    ));
    assert!(matches!(
        err(RateLimitLayer::new(
            limiter.clone(),
            ["per_ip", "per_ip"],
            ClientIp::new()
        )),
        ConfigError::DuplicateLimit(_)
    ));
    assert!(matches!(
        err(RateLimitLayer::new(limiter.clone(), ["per_user"], ClientIp::new())),
        ConfigError::MissingKeyPart { part, .. } if part == "user"
    ));
    assert!(matches!(
        err(RateLimitLayer::new(limiter.clone(), ["per_ip"], (ClientIp::new(), ClientIp::new()))),
        ConfigError::DuplicateKeyPart(p) if p == "ip"
    ));
    let ok = RateLimitLayer::new(
        limiter,
        ["per_user", "per_ip"],
        (FromExtension::user(), ClientIp::new()),
    )
    .expect("valid layer");
    assert_eq!(ok.limits().collect::<Vec<_>>(), ["per_user", "per_ip"]);
}

/// A configuration error's message says what is wrong by itself (it is what a `?` in `main`
/// prints): the limiter's reason for refusing the layer, and the prefix setting that is out
/// of range. They said "the limiter refuses this layer's check" (the reason only in
/// `source()`) and "prefix length 40 exceeds 32".
#[test]
fn configuration_errors_say_what_is_wrong() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit("per_ip", Algorithm::Gcra, 3, MINUTE, &["ip"])],
    );
    let refused = RateLimitLayer::new(limiter, ["per_ip"], ClientIp::new())
        .expect("layer")
        .delay_up_to(Duration::from_secs(7_200))
        .expect_err("above an hour")
        .to_string();
    assert!(
        refused.starts_with("the limiter refuses this layer's check: max_wait 7200000ms")
            && refused.contains("\"per_ip\""),
        "{refused}"
    );
    let v4 = ClientIp::new()
        .ipv4_prefix(40)
        .expect_err("40 > 32")
        .to_string();
    assert_eq!(
        v4,
        "ipv4_prefix(40): a prefix length exceeds the address's 32 bits"
    );
    let v6 = ClientIp::new()
        .ipv6_prefix(200)
        .expect_err("200 > 128")
        .to_string();
    assert_eq!(
        v6,
        "ipv6_prefix(200): a prefix length exceeds the address's 128 bits"
    );
}

/// With the gRPC responder a refusal is a trailers-only gRPC answer (HTTP 200,
/// `grpc-status: 8`), which tonic clients read as `RESOURCE_EXHAUSTED`.
#[tokio::test]
async fn grpc_refusal_for_tonic_clients() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit("rpc", Algorithm::Gcra, 1, MINUTE, &["ip"])],
    );
    let layer = RateLimitLayer::new(limiter, ["rpc"], ClientIp::new())
        .expect("layer")
        .respond_with(tollgate_tower::grpc);
    let svc = service(&layer);
    assert_eq!(
        header(&send(&svc, from("192.0.2.1")).await, "grpc-status"),
        ""
    );
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::OK);
    assert_eq!(header(&resp, "grpc-status"), "8");
    assert_eq!(header(&resp, "content-type"), "application/grpc");
    assert_eq!(header(&resp, "retry-after"), "60");
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::RateLimited(_))
    ));
}
