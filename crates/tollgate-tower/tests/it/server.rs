//! End to end: a real axum server on 127.0.0.1:0 with connect info, driven by a hyper client.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tollgate::{Algorithm, FakeClock};
use tollgate_tower::{ClientIp, FromExtension, Global, IpNet, RateLimitLayer, Route, UserId};

use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);

/// Serves `app` on a free loopback port, with the peer address as connect info.
pub(crate) async fn spawn(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("server");
    });
    addr
}

/// A small HTTP client.
pub(crate) struct HttpClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    base: String,
}

/// What the tests look at in a response.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: String,
}

impl HttpClient {
    pub(crate) fn new(addr: SocketAddr) -> HttpClient {
        HttpClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base: format!("http://{addr}"),
        }
    }

    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = http::Request::builder().uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .client
            .request(req.body(Empty::new()).expect("request"))
            .await
            .expect("http request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub(crate) async fn statuses(&self, path: &str, headers: &[&[(&str, &str)]]) -> Vec<u16> {
        let mut out = Vec::new();
        for h in headers {
            out.push(self.get(path, h).await.status);
        }
        out
    }
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// The toy authentication of the example: `Authorization: Bearer <user>` becomes a `UserId`.
async fn auth(mut req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    match user {
        Some(user) => {
            req.extensions_mut().insert(UserId(user));
            next.run(req).await
        }
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

fn per_ip(clock: &FakeClock, ip: ClientIp) -> RateLimitLayer {
    let limiter = limiter(
        memory(clock),
        clock,
        vec![limit("per_ip", Algorithm::FixedWindow, 2, MINUTE, &["ip"])],
    );
    RateLimitLayer::new(limiter, ["per_ip"], ip).expect("layer")
}

/// Over real TCP the peer address is the key; spoofed `X-Forwarded-For` headers change
/// nothing; refusals carry `Retry-After` and the draft's fields.
#[tokio::test]
async fn real_server_limits_per_peer() {
    let clock = clock();
    let app = Router::new()
        .route("/public", get(|| async { "hello" }))
        .layer(per_ip(&clock, ClientIp::new()));
    let client = HttpClient::new(spawn(app).await);
    let first = client
        .get("/public", &[("x-forwarded-for", "198.51.100.1")])
        .await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, "hello");
    assert_eq!(first.header("ratelimit"), r#""per_ip";r=1;t=60"#);
    assert_eq!(first.header("ratelimit-policy"), r#""per_ip";q=2;w=60"#);
    let second = client
        .get("/public", &[("x-forwarded-for", "198.51.100.2")])
        .await;
    assert_eq!(second.status, 200, "{second:?}");
    clock.advance(Duration::from_millis(1_500));
    let third = client
        .get("/public", &[("x-forwarded-for", "198.51.100.3")])
        .await;
    assert_eq!(third.status, 429, "{third:?}");
    assert_eq!(third.header("retry-after"), "59");
    assert_eq!(third.header("content-type"), "application/problem+json");
    assert!(third.body.contains("\"status\":429"), "{third:?}");
}

/// With loopback trusted as a proxy, the forwarded client is the key.
#[tokio::test]
async fn real_server_trusted_proxy() {
    let clock = clock();
    let loopback: IpNet = "127.0.0.0/8".parse().expect("cidr");
    let app = Router::new()
        .route("/public", get(|| async { "hello" }))
        .layer(per_ip(&clock, ClientIp::new().trusted_proxies([loopback])));
    let client = HttpClient::new(spawn(app).await);
    let a: &[(&str, &str)] = &[("x-forwarded-for", "6.6.6.6, 198.51.100.1")];
    let a_spoofed: &[(&str, &str)] = &[("x-forwarded-for", "7.7.7.7, 198.51.100.1")];
    let b: &[(&str, &str)] = &[("x-forwarded-for", "198.51.100.2")];
    assert_eq!(
        client.statuses("/public", &[a, a_spoofed, a]).await,
        [200, 200, 429]
    );
    assert_eq!(
        client.statuses("/public", &[b, b, b]).await,
        [200, 200, 429]
    );
}

/// An authenticated route with a per-user and a global limit behind an auth middleware.
#[tokio::test]
async fn real_server_per_user_and_global() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![
            limit("me_global", Algorithm::SlidingLog, 3, MINUTE, &[]),
            limit("me_user", Algorithm::SlidingLog, 2, MINUTE, &["user"]),
        ],
    );
    let layer = RateLimitLayer::new(
        limiter,
        ["me_global", "me_user"],
        (Global, FromExtension::user()),
    )
    .expect("layer");
    let app = Router::new()
        .route("/me", get(|| async { "me" }))
        .layer(layer)
        .layer(middleware::from_fn(auth));
    let client = HttpClient::new(spawn(app).await);
    let alice: &[(&str, &str)] = &[("authorization", "Bearer alice")];
    let bob: &[(&str, &str)] = &[("authorization", "Bearer bob")];
    let carol: &[(&str, &str)] = &[("authorization", "Bearer carol")];
    assert_eq!(
        client.statuses("/me", &[alice, alice, alice]).await,
        [200, 200, 429]
    );
    let b = client.get("/me", bob).await;
    assert_eq!(b.status, 200, "{b:?}");
    assert_eq!(
        b.header("ratelimit"),
        r#""me_global";r=0;t=60, "me_user";r=1;t=60"#
    );
    let c = client.get("/me", carol).await;
    assert_eq!(c.status, 429, "{c:?}");
    assert!(c.body.contains("me_global"), "{c:?}");
    assert_eq!(client.get("/me", &[]).await.status, 401);
}

/// Keyed by route, a layer on the whole router counts each matched route template once,
/// whatever its path parameters.
#[tokio::test]
async fn real_server_per_route() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit(
            "per_route",
            Algorithm::FixedWindow,
            2,
            MINUTE,
            &["route"],
        )],
    );
    let layer = RateLimitLayer::new(limiter, ["per_route"], Route::new()).expect("layer");
    let app = Router::new()
        .route("/items/{id}", get(|| async { "item" }))
        .route("/other", get(|| async { "other" }))
        .layer(layer);
    let client = HttpClient::new(spawn(app).await);
    let mut got = Vec::new();
    for path in ["/items/1", "/items/2", "/items/3", "/other"] {
        got.push(client.get(path, &[]).await.status);
    }
    assert_eq!(got, [200, 200, 429, 200]);
}

/// On a whole router, requests no route matches (axum's fallback) have no matched path: by
/// default each path is its own key, so a client escapes the limit by varying the path; with
/// `Route::unmatched_as` they share one key and are refused like any route.
#[tokio::test]
async fn real_server_unmatched_paths() {
    for (route, expected) in [
        (Route::new(), [404, 404, 404, 200, 200, 429]),
        (
            Route::new().unmatched_as("(unmatched)"),
            [404, 404, 429, 200, 200, 429],
        ),
    ] {
        let clock = clock();
        let limiter = limiter(
            memory(&clock),
            &clock,
            vec![limit(
                "per_route",
                Algorithm::FixedWindow,
                2,
                MINUTE,
                &["route"],
            )],
        );
        let layer = RateLimitLayer::new(limiter, ["per_route"], route).expect("layer");
        let app = Router::new()
            .route("/items/{id}", get(|| async { "item" }))
            .layer(layer);
        let client = HttpClient::new(spawn(app).await);
        let mut got = Vec::new();
        for path in [
            "/nope1", "/nope2", "/nope3", "/items/1", "/items/2", "/items/3",
        ] {
            got.push(client.get(path, &[]).await.status);
        }
        assert_eq!(got, expected);
    }
}
