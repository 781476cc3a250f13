//! Store down: each limit's failure policy decides (503 for `deny`, not 429). Shadow limits:
//! decided and counted as usual, never refusing, never shown to the client.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tollgate::{Algorithm, Limit, OnStoreError};
use tollgate_tower::{ClientIp, RateLimitLayer, Rejection};

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
