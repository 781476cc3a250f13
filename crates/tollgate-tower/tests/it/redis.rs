//! The same layer on a spawned Redis: a representative subset (per-IP limits and spoofing,
//! two-level limits, exact headers, a real axum server, Redis killed under each policy).
//! Limiters pass the fake clock's time to Redis, so windows line up as on the memory store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::{Algorithm, FakeClock, Limit, Limiter, Namespace, OnStoreError};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;
use tollgate_tower::{ClientIp, Global, RateLimitLayer, Rejection};

use crate::server::{HttpClient, spawn};
use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);
/// Generous: the machine's two cores are shared with builds.
const TIMEOUT: Duration = Duration::from_secs(5);

static SERVER: OnceLock<RedisServer> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The Redis shared by this module's tests (each uses its own key namespace).
pub(crate) fn server() -> &'static RedisServer {
    SERVER.get_or_init(RedisServer::start)
}

pub(crate) async fn store(server: &RedisServer, timeout: Duration) -> RedisStore {
    RedisStore::builder(server.url())
        .timeout(timeout)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}\nlog:\n{}", server.url(), server.log()))
}

/// A limiter on `store` in a namespace of its own, deciding at `clock`'s time.
fn redis_limiter(
    store: RedisStore,
    clock: &FakeClock,
    limits: Vec<Limit>,
) -> Arc<Limiter<RedisStore>> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let ns = Namespace::new(format!("tgtower{}-{n}", std::process::id())).expect("prefix");
    Arc::new(
        Limiter::builder(store)
            .namespace(ns)
            .limits(limits)
            .clock(clock.clone())
            .build()
            .expect("limiter"),
    )
}

/// Per-IP limits hold on Redis, and a spoofed `X-Forwarded-For` changes nothing.
#[tokio::test]
async fn redis_per_ip_and_spoofing() {
    let clock = clock();
    let limiter = redis_limiter(
        store(server(), TIMEOUT).await,
        &clock,
        vec![limit("per_ip", Algorithm::Gcra, 2, MINUTE, &["ip"])],
    );
    let svc = service(&RateLimitLayer::new(limiter, ["per_ip"], ClientIp::new()).expect("layer"));
    let spoof = |fake: &'static str| {
        request_from("203.0.113.5", move |b| b.header("x-forwarded-for", fake))
    };
    let mut got = Vec::new();
    for fake in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        got.push(send(&svc, spoof(fake)).await.status().as_u16());
    }
    assert_eq!(got, [200, 200, 429]);
    assert_eq!(statuses(&svc, 1, || from("203.0.113.6")).await, [200]);
}

/// Two-level limits on Redis: exact headers, and a per-client refusal leaves the global
/// limit untouched.
#[tokio::test]
async fn redis_two_level_exact_headers() {
    let clock = clock();
    let limiter = redis_limiter(
        store(server(), TIMEOUT).await,
        &clock,
        vec![
            limit("global", Algorithm::FixedWindow, 10, MINUTE, &[]),
            limit("per_ip", Algorithm::FixedWindow, 2, MINUTE, &["ip"]),
        ],
    );
    let layer = RateLimitLayer::new(limiter, ["global", "per_ip"], (Global, ClientIp::new()))
        .expect("layer");
    let svc = service(&layer);
    let resp = send(&svc, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        r#""global";q=10;w=60, "per_ip";q=2;w=60"#
    );
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""global";r=9;t=60, "per_ip";r=1;t=60"#
    );
    clock.advance(Duration::from_millis(1_200));
    assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);
    for _ in 0..5 {
        let resp = send(&svc, from("192.0.2.1")).await;
        assert_status(&resp, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&resp, "retry-after"), "59");
    }
    let resp = send(&svc, from("192.0.2.2")).await;
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""global";r=7;t=59, "per_ip";r=1;t=59"#
    );
}

/// A real axum server over Redis.
#[tokio::test]
async fn redis_real_server() {
    let clock = clock();
    let limiter = redis_limiter(
        store(server(), TIMEOUT).await,
        &clock,
        vec![limit("per_ip", Algorithm::SlidingLog, 2, MINUTE, &["ip"])],
    );
    let layer = RateLimitLayer::new(limiter, ["per_ip"], ClientIp::new()).expect("layer");
    let app = Router::new()
        .route("/x", get(|| async { "x" }))
        .layer(layer);
    let client = HttpClient::new(spawn(app).await);
    assert_eq!(
        client.statuses("/x", &[&[], &[], &[]]).await,
        [200, 200, 429]
    );
}

/// Redis killed: `deny` answers 503, `local` keeps counting on this instance (429, not 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_follows_policies() {
    let mut redis = RedisServer::start();
    let clock = clock();
    let limiter = redis_limiter(
        store(&redis, Duration::from_millis(200)).await,
        &clock,
        vec![
            limit("strict", Algorithm::Gcra, 2, MINUTE, &["ip"]),
            limit("local", Algorithm::Gcra, 2, MINUTE, &["ip"]).on_store_error(OnStoreError::Local),
        ],
    );
    let strict =
        service(&RateLimitLayer::new(limiter.clone(), ["strict"], ClientIp::new()).expect("layer"));
    let local = service(&RateLimitLayer::new(limiter, ["local"], ClientIp::new()).expect("layer"));
    assert_status(&send(&strict, from("192.0.2.1")).await, StatusCode::OK);
    redis.kill();
    let resp = send(&strict, from("192.0.2.1")).await;
    assert_status(&resp, StatusCode::SERVICE_UNAVAILABLE);
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::StoreUnavailable { error: Some(_), .. })
    ));
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_eq!(
        statuses(&local, 3, || from("192.0.2.1")).await,
        [200, 200, 429]
    );
}

/// On Redis too, a cost above a shadow limit's capacity is decided by the store (each
/// algorithm's script refuses it, charging nothing), not by a failure policy, and the
/// enforced limit admits the request; through the layer, 200. Every algorithm.
#[tokio::test]
async fn redis_cost_above_a_shadow_capacity() {
    let server = server();
    for algorithm in Algorithm::ALL {
        let clock = clock();
        let limiter = redis_limiter(
            store(server, TIMEOUT).await,
            &clock,
            vec![
                limit("wide", algorithm, 1000, MINUTE, &[]),
                limit("trial", algorithm, 10, MINUTE, &[]).shadow(true),
            ],
        );
        let both = limiter
            .prepare(&["wide", "trial"], &[("", "")], 50)
            .expect("a shadow limit's capacity is no error");
        let v = limiter.decide(&both, tollgate::Op::Check).await;
        assert_eq!(
            v.outcome(),
            tollgate::Outcome::Allowed,
            "{algorithm:?}: {v:?}"
        );
        let trial = &v.decisions()[1];
        assert!(trial.shadow_refused(), "{algorithm:?}: {v:?}");
        assert_eq!(
            trial.source,
            tollgate::Source::Store,
            "{algorithm:?}: {v:?}"
        );
        let peek = limiter.prepare(&["trial"], &[("", "")], 1).expect("valid");
        let v = limiter.decide(&peek, tollgate::Op::Peek).await;
        assert_eq!(
            v.decisions()[0].decision.remaining,
            10,
            "{algorithm:?}: charged"
        );
        drop((both, peek));
        let layer = RateLimitLayer::new(limiter, ["wide", "trial"], Global)
            .expect("layer")
            .cost(|_| 50);
        assert_status(
            &send(&service(&layer), from("192.0.2.1")).await,
            StatusCode::OK,
        );
    }
}
