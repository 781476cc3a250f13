//! Store down: each limit's failure policy decides (503 for `deny`, not 429). Shadow limits:
//! decided and counted as usual, never refusing, never shown to the client. A panic while the
//! layer decides: a 500, not a dropped connection.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tollgate::{Algorithm, Limit, MemoryStore, OnStoreError};
use tollgate_tower::{ClientIp, Global, Header, RateLimitLayer, Rejection};

use crate::support::*;
use tollgate_testkit::FailingStore;

const MINUTE: Duration = Duration::from_secs(60);

fn failing_layer(policies: &[(&str, OnStoreError)]) -> RateLimitLayer {
    failing_layer_of(policies, false)
}

fn failing_layer_of(policies: &[(&str, OnStoreError)], shadow: bool) -> RateLimitLayer {
    let clock = clock();
    let limits: Vec<Limit> = policies
        .iter()
        .map(|(name, policy)| {
            limit(name, Algorithm::Gcra, 2, MINUTE, &["ip"])
                .on_store_error(*policy)
                .shadow(shadow)
        })
        .collect();
    let names: Vec<&str> = policies.iter().map(|(n, _)| *n).collect();
    RateLimitLayer::new(
        limiter(FailingStore::down(), &clock, limits),
        names,
        ClientIp::new(),
    )
    .expect("layer")
}

/// `deny`: 503 with `Retry-After`, no `RateLimit` item (there is no real count).
#[tokio::test]
async fn store_down_deny_is_503() {
    let svc = service(&failing_layer(&[("strict", OnStoreError::Deny)]));
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_eq!(header(&resp, "ratelimit"), "");
    assert_eq!(header(&resp, "ratelimit-policy"), r#""strict";q=2;w=60"#);
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::StoreUnavailable { .. })
    ));
    let body = body_text(resp).await;
    assert!(body.contains("\"status\":503"), "{body}");
}

/// `allow`: requests pass, without a made-up `RateLimit` item.
#[tokio::test]
async fn store_down_allow_passes() {
    let svc = service(&failing_layer(&[("open", OnStoreError::Allow)]));
    assert_eq!(statuses(&svc, 5, || from("192.0.2.1")).await, [200; 5]);
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_eq!(header(&resp, "ratelimit"), "");
    assert_eq!(header(&resp, "ratelimit-policy"), r#""open";q=2;w=60"#);
}

/// `local`: counted on this instance; a refusal is a 429 with real headers, not a 503.
#[tokio::test]
async fn store_down_local_counts_here() {
    let svc = service(&failing_layer(&[("local", OnStoreError::Local)]));
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::OK);
    assert!(
        header(&resp, "ratelimit").starts_with(r#""local";r=1;"#),
        "{:?}",
        resp.headers()
    );
    assert_eq!(statuses(&svc, 2, || from("192.0.2.1")).await, [200, 429]);
    assert_eq!(statuses(&svc, 1, || from("192.0.2.2")).await, [200]);
}

/// Mixed policies: one `deny` limit makes the whole request a 503.
#[tokio::test]
async fn store_down_mixed_policies() {
    let svc = service(&failing_layer(&[
        ("open", OnStoreError::Allow),
        ("strict", OnStoreError::Deny),
    ]));
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::SERVICE_UNAVAILABLE);
}

/// Shadow limits refuse nothing and show nothing to the client (no `RateLimit` item, no
/// `Retry-After`), but count each would-be refusal per limit; store-down denials too.
#[test]
fn shadow_mode_never_refuses() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let clock = clock();
            let limiter = limiter(
                memory(&clock),
                &clock,
                vec![limit("quiet", Algorithm::FixedWindow, 1, MINUTE, &["ip"]).shadow(true)],
            );
            let layer = RateLimitLayer::new(Arc::clone(&limiter), ["quiet"], ClientIp::new())
                .expect("layer");
            let svc = service(&layer);
            assert_eq!(statuses(&svc, 3, || from("192.0.2.1")).await, [200; 3]);
            let resp = send(&svc, from("192.0.2.1")).await;
            assert_status(&resp, StatusCode::OK);
            assert_eq!(header(&resp, "ratelimit"), "");
            assert_eq!(header(&resp, "ratelimit-policy"), "");
            assert_eq!(header(&resp, "retry-after"), "");
            assert_eq!(body_text(resp).await, "ok");
            // The decision is still there for the application to read.
            let quiet = limiter
                .prepare(&["quiet"], &[("ip", "192.0.2.1")], 1)
                .expect("valid");
            let v = limiter.decide(&quiet, tollgate::Op::Peek).await;
            assert!(v.decisions()[0].shadow && !v.decisions()[0].decision.is_allowed());

            let down = service(&failing_layer_of(&[("strict", OnStoreError::Deny)], true));
            assert_eq!(statuses(&down, 2, || from("192.0.2.1")).await, [200, 200]);
        });
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let shadow_count = |limit: &str| {
        snapshot
            .iter()
            .find(|(key, _, _, _)| {
                key.key().name() == "tollgate_shadow_denied_total"
                    && key
                        .key()
                        .labels()
                        .any(|l| l.key() == "limit" && l.value() == limit)
            })
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("not a counter: {other:?}"),
            })
    };
    assert_eq!(shadow_count("quiet"), Some(3));
    assert_eq!(shadow_count("strict"), Some(2));
}

/// The value of counter `name` for `limit` in `snapshot` (any labels when `limit` is `None`).
fn counter(snapshot: &Snapshot, name: &str, limit: Option<&str>) -> Option<u64> {
    snapshot
        .iter()
        .find(|(key, _, _, _)| {
            key.key().name() == name
                && limit.is_none_or(|limit| {
                    key.key()
                        .labels()
                        .any(|l| l.key() == "limit" && l.value() == limit)
                })
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("not a counter: {other:?}"),
        })
}

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// Runs `test` on a current-thread runtime with a local metrics recorder; what it counted.
fn counting(test: impl AsyncFnOnce()) -> Snapshot {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(test());
    });
    snapshotter.snapshot().into_vec()
}

/// A layer of only shadow limits passes a request whose key the limiter will not use (a key
/// value above `tollgate::MAX_KEY_VALUE` bytes), as it passes one with no key: shadow limits
/// never refuse. (It was a 400.) With `delay_up_to` too; an enforced layer still refuses it.
#[tokio::test]
async fn a_shadow_only_layer_passes_a_key_it_cannot_use() {
    let api_key = HeaderName::from_static("x-api-key");
    let long = "a".repeat(tollgate::MAX_KEY_VALUE + 1);
    let with_long_key = || request_from("192.0.2.1", |b| b.header("x-api-key", long.as_str()));
    for shadow in [true, false] {
        let clock = clock();
        let keyed = limit("keyed", Algorithm::Gcra, 10, MINUTE, &["x-api-key"]).shadow(shadow);
        let limiter = limiter(memory(&clock), &clock, vec![keyed]);
        let layer =
            RateLimitLayer::new(limiter, ["keyed"], Header::new(api_key.clone())).expect("layer");
        let paced = layer
            .clone()
            .delay_up_to(Duration::from_secs(1))
            .expect("delay");
        for layer in [layer, paced] {
            let resp = send(&service(&layer), with_long_key()).await;
            if shadow {
                assert_status(&resp, StatusCode::OK);
                assert_eq!(header(&resp, "ratelimit"), "");
            } else {
                assert_status(&resp, StatusCode::BAD_REQUEST);
            }
        }
    }
}

/// A cost above a shadow limit's capacity neither refuses the request nor names the limit
/// (it was a 413 "request cost 50 exceeds what limit trial ever admits (10)"): the enforced
/// limit decides and is the only one shown; the shadow limit counts a would-be refusal per
/// request. A shadow-only layer passes it too; an enforced limit's capacity is still a 413.
#[test]
fn a_cost_above_a_shadow_capacity_never_refuses() {
    let snapshot = counting(async || {
        let clock = clock();
        let limiter = limiter(
            memory(&clock),
            &clock,
            vec![
                limit("wide", Algorithm::TokenBucket, 1000, MINUTE, &[]),
                limit("trial", Algorithm::TokenBucket, 10, MINUTE, &[]).shadow(true),
            ],
        );
        let by_length = |parts: &http::request::Parts| {
            parts
                .headers
                .get("content-length")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        };
        let sized = |n: u64| request_from("192.0.2.1", |b| b.header("content-length", n));
        let both = RateLimitLayer::new(Arc::clone(&limiter), ["wide", "trial"], Global)
            .expect("layer")
            .cost(by_length);
        let resp = send(&service(&both), sized(50)).await;
        assert_status(&resp, StatusCode::OK);
        assert_eq!(header(&resp, "ratelimit-policy"), r#""wide";q=1000;w=60"#);
        assert!(
            header(&resp, "ratelimit").starts_with(r#""wide";r=950;"#),
            "{:?}",
            resp.headers()
        );
        let alone = RateLimitLayer::new(Arc::clone(&limiter), ["trial"], Global)
            .expect("layer")
            .cost(by_length);
        let resp = send(&service(&alone), sized(50)).await;
        assert_status(&resp, StatusCode::OK);
        assert_eq!(body_text(resp).await, "ok");
        let resp = send(&service(&both), sized(1001)).await;
        assert_status(&resp, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            !body_text(resp).await.contains("trial"),
            "the shadow limit is never named"
        );
    });
    assert_eq!(
        counter(&snapshot, "tollgate_shadow_denied_total", Some("trial")),
        Some(2)
    );
}

/// A panic while the layer decides (here in the store) is answered 500 problem+json, or
/// `grpc-status` 13 with the gRPC responder, and counted in `tollgate_tower_panics_total`; it
/// was a connection dropped with no answer. The next request is decided as usual.
#[test]
fn a_panic_while_deciding_is_a_500() {
    let snapshot = counting(async || {
        let store = FailingStore::new(MemoryStore::builder().sweep_interval(None).build());
        let clock = clock();
        let layer = RateLimitLayer::new(
            limiter(
                store.clone(),
                &clock,
                vec![limit("per_ip", Algorithm::Gcra, 10, MINUTE, &["ip"])],
            ),
            ["per_ip"],
            ClientIp::new(),
        )
        .expect("layer");
        store.set_panicking(true);
        let resp = send(&service(&layer), from("192.0.2.1")).await;
        assert_status(&resp, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(matches!(
            resp.extensions().get::<Rejection>(),
            Some(Rejection::Panicked)
        ));
        assert_eq!(header(&resp, "content-type"), "application/problem+json");
        let body = body_text(resp).await;
        assert!(body.contains(r#""status":500"#), "{body}");
        let grpc = layer.clone().respond_with(tollgate_tower::grpc);
        let resp = send(&service(&grpc), from("192.0.2.1")).await;
        assert_eq!(header(&resp, "grpc-status"), "13");
        store.set_panicking(false);
        assert_status(
            &send(&service(&layer), from("192.0.2.1")).await,
            StatusCode::OK,
        );
    });
    assert_eq!(
        counter(&snapshot, "tollgate_tower_panics_total", None),
        Some(2)
    );
}

/// A panic in the caller's `respond_with` closure is answered with the default problem+json
/// body (the status its rejection has), not a dropped connection; and a layer of shadow
/// limits only passes a request whose decision panicked, as it passes every other. Both are
/// counted in `tollgate_tower_panics_total`.
#[test]
fn a_panic_in_the_responder_or_a_shadow_layer_still_answers() {
    let snapshot = counting(async || {
        let clock = clock();
        let layer = RateLimitLayer::new(
            limiter(
                MemoryStore::builder().sweep_interval(None).build(),
                &clock,
                vec![limit("per_ip", Algorithm::Gcra, 1, MINUTE, &["ip"])],
            ),
            ["per_ip"],
            ClientIp::new(),
        )
        .expect("layer")
        .respond_with(|_| panic!("the responder's bug"));
        let svc = service(&layer);
        assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);
        let resp = send(&svc, from("192.0.2.1")).await;
        assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            header(&resp, "retry-after")
                .parse::<u64>()
                .is_ok_and(|s| s > 0)
        );
        assert_eq!(header(&resp, "content-type"), "application/problem+json");
        let body = body_text(resp).await;
        assert!(body.contains(r#""status":429"#), "{body}");

        let store = FailingStore::new(MemoryStore::builder().sweep_interval(None).build());
        let shadow = RateLimitLayer::new(
            limiter(
                store.clone(),
                &clock,
                vec![limit("trial", Algorithm::Gcra, 10, MINUTE, &["ip"]).shadow(true)],
            ),
            ["trial"],
            ClientIp::new(),
        )
        .expect("layer");
        store.set_panicking(true);
        assert_status(
            &send(&service(&shadow), from("192.0.2.1")).await,
            StatusCode::OK,
        );
    });
    assert_eq!(
        counter(&snapshot, "tollgate_tower_panics_total", None),
        Some(2)
    );
}

/// A panic on every request (a key extractor that panics on some input a client can send
/// again and again) writes at most one log line a second, not one per request: a flood must
/// not fill the disk. Each panic is still counted.
#[test]
fn a_panic_on_every_request_is_logged_once_a_second() {
    let capture = tollgate_testkit::LogCapture::new();
    let started = std::time::Instant::now();
    let snapshot = capture.during(|| {
        counting(async || {
            let store = FailingStore::new(MemoryStore::builder().sweep_interval(None).build());
            let layer = RateLimitLayer::new(
                limiter(
                    store.clone(),
                    &clock(),
                    vec![limit("per_ip", Algorithm::Gcra, 10, MINUTE, &["ip"])],
                ),
                ["per_ip"],
                ClientIp::new(),
            )
            .expect("layer");
            store.set_panicking(true);
            for _ in 0..50 {
                assert_status(
                    &send(&service(&layer), from("192.0.2.1")).await,
                    StatusCode::INTERNAL_SERVER_ERROR,
                );
            }
        })
    });
    let took = started.elapsed();
    let text = capture.text();
    let lines = text.matches("rate-limit layer panicked").count();
    // One a second (two when the run crosses one); fewer when another test's panic took
    // this second's line.
    let most = usize::try_from(took.as_secs()).expect("small") + 2;
    assert!(
        lines <= most,
        "{lines} lines for 50 panics in {took:?}:\n{text}"
    );
    assert_eq!(
        counter(&snapshot, "tollgate_tower_panics_total", None),
        Some(50)
    );
}
