//! Shared helpers: limiters on a fake clock, a plain inner service, requests from a peer.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tollgate::{
    Algorithm, BoxStore, FakeClock, Limit, Limiter, MemoryStore, OnStoreError, Quota, Store,
    Timestamp,
};
use tollgate_tower::{RateLimitLayer, ResponseBody};
use tower::{Layer, Service, ServiceExt, service_fn};

/// A window-aligned start (a multiple of a minute), so fixed windows start exactly here.
pub(crate) const START: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// A fake clock at [`START`].
pub(crate) fn clock() -> FakeClock {
    FakeClock::new(START)
}

/// A memory store on `clock`, without a sweeper thread.
pub(crate) fn memory(clock: &FakeClock) -> MemoryStore {
    MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build()
}

/// A limit, panicking on invalid input (tests only).
pub(crate) fn limit(
    name: &str,
    algorithm: Algorithm,
    n: u64,
    period: Duration,
    key: &[&str],
) -> Limit {
    Limit::new(name, algorithm, Quota::new(n, period).expect("quota"))
        .and_then(|l| l.keyed_by(key.iter().copied()))
        .expect("limit")
        .on_store_error(OnStoreError::Deny)
}

/// A limiter over `store` (boxed: one layer type whatever the store) with `limits`,
/// deciding at `clock`'s time.
pub(crate) fn limiter<S: Store>(
    store: S,
    clock: &FakeClock,
    limits: Vec<Limit>,
) -> Arc<Limiter<BoxStore>> {
    Arc::new(
        Limiter::builder(BoxStore::new(store))
            .limits(limits)
            .clock(clock.clone())
            .build()
            .expect("limiter"),
    )
}

/// The response type of the layer around [`ok_service`].
pub(crate) type Resp = Response<ResponseBody<Full<Bytes>>>;

/// Wraps an inner service that answers 200 "ok" in `layer`.
pub(crate) fn service<St: Store>(
    layer: &RateLimitLayer<St>,
) -> impl Service<Request<String>, Response = Resp, Error = Infallible, Future: Send> + Clone + use<St>
{
    layer.layer(service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }))
}

/// A request from `peer`, built by `f`.
pub(crate) fn request_from(
    peer: &str,
    f: impl FnOnce(http::request::Builder) -> http::request::Builder,
) -> Request<String> {
    let ip = peer.parse().expect("peer ip");
    let mut req = f(Request::builder().uri("/x"))
        .body(String::new())
        .expect("request");
    req.extensions_mut().insert(SocketAddr::new(ip, 40_000));
    req
}

/// A plain request from `peer`.
pub(crate) fn from(peer: &str) -> Request<String> {
    request_from(peer, |b| b)
}

/// Sends one request through a clone of `svc`.
pub(crate) async fn send<S>(svc: &S, req: Request<String>) -> Resp
where
    S: Service<Request<String>, Response = Resp, Error = Infallible> + Clone,
{
    svc.clone()
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {})
}

/// Sends `n` requests built by `make`, returning the statuses.
pub(crate) async fn statuses<S>(svc: &S, n: usize, make: impl Fn() -> Request<String>) -> Vec<u16>
where
    S: Service<Request<String>, Response = Resp, Error = Infallible> + Clone,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(send(svc, make()).await.status().as_u16());
    }
    out
}

/// A header as a string ("" when absent).
pub(crate) fn header(resp: &Response<impl Sized>, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().expect("ascii header").to_owned())
        .unwrap_or_default()
}

/// The response body as text.
pub(crate) async fn body_text(resp: Resp) -> String {
    let bytes = resp
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| match e {})
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8 body")
}

/// Asserts a status, showing the headers on failure.
pub(crate) fn assert_status(resp: &Resp, status: StatusCode) {
    assert_eq!(resp.status(), status, "headers: {:?}", resp.headers());
}
