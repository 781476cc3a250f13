//! The HTTP API's routes and handlers: thin glue between JSON and [`crate::limits::Limits`].
//!
//! Every body is read by [`Body`] (at most [`super::body::MAX_BODY`] bytes; no route uses
//! axum's own body extractors) and parsed by [`api::parse`]; every check
//! runs on the limit set current when the request arrived (a reload never changes a request
//! halfway). A body that does not arrive within `server.body_timeout` is answered `408`.
//! Resets are logged at `info` with the limits, a digest of the key and the client's address
//! (from `ConnectInfo`, set by the connection layer), never the key in clear or the token.
//! A reset with more than one `Authorization` header is refused (`400`), whatever they hold:
//! which of two credentials counts is exactly what a proxy and this service could disagree on.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::FutureExt as _;
use sha2::{Digest, Sha256};
use tollgate::{CheckError, Op, Span, TOP_CAPACITY};

use super::api::{self, CheckRequest, LimitBody, LimitsBody, ResetRequest, TopBody, TopKeyBody};
use super::body::Body;
use super::pacing;
use super::response::{ApiError, Reply, json_body};
use super::state::AppState;
use super::status_body::{self as status, StatusBody};
use crate::metrics;
use crate::status::page;

/// The API's routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/v1/peek", post(peek))
        .route("/v1/reset", post(reset))
        .route("/v1/acquire", post(pacing::acquire))
        .route("/v1/adjust", post(pacing::adjust))
        .route("/v1/limits", get(list_limits))
        .route("/v1/top", get(top_denied))
        .route("/metrics", get(render_metrics))
        .route("/v1/status", get(status))
        .route("/v1/history", get(history))
        .route("/healthz", get(healthz))
        .route("/healthcheck", get(healthcheck))
        .merge(page::routes())
        .route("/readyz", get(readyz))
        .route("/json", post(envoy_json))
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(axum::middleware::from_fn(observe_http))
        .with_state(state)
}

/// Counts every request by route and status, and times it
/// (`tollgate_http_requests_total`, `tollgate_http_request_duration_seconds`). A handler that
/// panics is answered 500 here ([`ApiError::Panicked`]) and counted as one, where the panic
/// would otherwise end the connection with no answer at all.
async fn observe_http(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let route = metrics::Route::of(request.uri().path());
    let started = Instant::now();
    let response = AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| ApiError::Panicked.into_response());
    metrics::http_request(route, response.status(), started.elapsed());
    response
}

// `check` and `peek` hand back `decide`'s future rather than awaiting it, so that neither is
// a layer of its own on the check's path (docs/architecture.md counts the path).
fn check(
    State(state): State<Arc<AppState>>,
    body: Result<Body, ApiError>,
) -> impl Future<Output = Result<Reply, ApiError>> {
    decide(state, body, Op::Check)
}

fn peek(
    State(state): State<Arc<AppState>>,
    body: Result<Body, ApiError>,
) -> impl Future<Output = Result<Reply, ApiError>> {
    decide(state, body, Op::Peek)
}

/// `/v1/check` and `/v1/peek`: the same request, the same validation, the same reply; only
/// the [`Op`] differs.
async fn decide(
    state: Arc<AppState>,
    body: Result<Body, ApiError>,
    op: Op,
) -> Result<Reply, ApiError> {
    let body = body?.0;
    let request: CheckRequest = api::parse(&body).map_err(ApiError::BadRequest)?;
    let (names, key, cost) = request.parts().map_err(ApiError::BadRequest)?;
    let limits = state.limits.load_full();
    let request = limits
        .prepare(&names, &key, cost)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(Reply::verdict(limits.limiter().decide(&request, op).await))
}

async fn reset(
    State(state): State<Arc<AppState>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Body, ApiError>,
) -> Result<Reply, ApiError> {
    let Some(token) = &state.admin_token else {
        return Err(ApiError::ResetDisabled);
    };
    // Two credentials are ambiguous: a proxy may have added one, and whichever we picked,
    // another component could pick the other. Refuse rather than guess.
    let mut given = headers.get_all(header::AUTHORIZATION).iter();
    let (first, second) = (given.next(), given.next());
    if second.is_some() {
        return Err(ApiError::BadRequest(
            "more than one Authorization header: send exactly one".into(),
        ));
    }
    let given = first
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .unwrap_or_default();
    if !same_secret(given, token.expose()) {
        return Err(ApiError::Unauthorized);
    }
    let body = body?.0;
    let request: ResetRequest = api::parse(&body).map_err(ApiError::BadRequest)?;
    let (names, key, cost) = request.parts().map_err(ApiError::BadRequest)?;
    let limits = state.limits.load_full();
    let request = limits
        .prepare(&names, &key, cost)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let key = key_digest(&key);
    if let Err(cause) = limits.reset(&request).await {
        // The operator who asked must be able to find that it did not happen, and for what.
        tracing::warn!(limits = ?names, %key, %client, cause = %cause, "reset failed: the store did not answer");
        return Err(ApiError::StoreUnavailable(cause));
    }
    tracing::info!(limits = ?names, %key, %client, "reset");
    Reply::json(serde_json::json!({ "reset": names.as_slice() }))
}

/// Who reset what, without the key in clear: the first 12 hex digits of the SHA-256 of the
/// key parts (`name=value`, one a line, in name order), enough to match two log lines.
fn key_digest(parts: &[(&str, &str)]) -> String {
    let mut hasher = Sha256::new();
    for (name, value) in parts {
        hasher.update(name.as_bytes());
        hasher.update(b"=");
        hasher.update(value.as_bytes());
        hasher.update(b"\n");
    }
    hasher
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive
/// (RFC 9110 §11.1), so `bearer` and `BEARER` work too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Compares two secrets in time independent of where they differ (and of the given one's
/// length): both are hashed first, then every byte of the digests is compared.
fn same_secret(given: &str, expected: &str) -> bool {
    let (a, b) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(expected.as_bytes()),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

async fn list_limits(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let lane = Arc::clone(&state);
    state
        .watch
        .run(move || {
            let limits = lane.limits.load();
            json_body(&LimitsBody {
                store: lane.store.kind(),
                limits: limits.configs().iter().map(LimitBody::new).collect(),
            })
        })
        .await?
}

/// `GET /v1/top?limit=NAME&k=20`: the most refused keys of a limit, recent and since start.
async fn top_denied(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let (mut limit, mut k) = (None, 20usize);
    for pair in query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("limit", name)) => limit = Some(name.to_owned()),
            Some(("k", n)) => {
                k = n
                    .parse()
                    .ok()
                    .filter(|k| (1..=TOP_CAPACITY).contains(k))
                    .ok_or_else(|| {
                        ApiError::BadRequest(format!(
                            "k must be a whole number from 1 to {TOP_CAPACITY}"
                        ))
                    })?;
            }
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {pair:?}: expected limit=NAME and optionally k=N"
                )));
            }
        }
    }
    let limit =
        limit.ok_or_else(|| ApiError::BadRequest("missing query parameter limit".into()))?;
    let lane = Arc::clone(&state);
    state
        .watch
        .run(move || {
            let limits = lane.limits.load();
            let top = |span| {
                limits.top_denied(&limit, k, span).ok_or_else(|| {
                    ApiError::BadRequest(CheckError::UnknownLimit(limit.clone()).to_string())
                })
            };
            let (recent, since_start) = (top(Span::Recent)?, top(Span::SinceStart)?);
            json_body(&TopBody {
                deny_ratio: limits.deny_ratio(&limit),
                limit,
                recent_window: "5m",
                capacity: TOP_CAPACITY,
                recent: recent.iter().map(TopKeyBody::new).collect(),
                since_start: since_start.iter().map(TopKeyBody::new).collect(),
            })
        })
        .await?
}

async fn render_metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let probed = status::probed(&state).await;
    let lane = Arc::clone(&state);
    // Single-flight: every scrape queued while this one waits shares its render.
    let text = state
        .watch
        .run_shared("metrics", move || {
            let state = &*lane;
            let limits = state.limits.load();
            let names: Vec<&str> = limits.configs().iter().map(|l| l.limit.name()).collect();
            let mut holding = names.clone();
            let per_limit = state.store.memory_keys();
            if let Some(per_limit) = &per_limit {
                for name in &names {
                    let held = per_limit
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or(0, |(_, n)| *n);
                    metrics::keys(name, held);
                }
                // A limit a reload removed whose keys are still held: they count towards
                // `max_keys` until they expire.
                for (name, held) in per_limit {
                    if !names.contains(&name.as_str()) {
                        metrics::keys(name, *held);
                        holding.push(name);
                    }
                }
            }
            for name in &names {
                metrics::deny_ratio(name, limits.deny_ratio(name));
            }
            metrics::retire_limits(&names, &holding);
            metrics::deny_cache_entries(limits.deny_cache_len());
            metrics::store_up(probed.error.is_none() && state.store.circuit_open() != Some(true));
            if let Some(open) = state.store.circuit_open() {
                metrics::circuit_open(open);
            }
            state.metrics.run_upkeep();
            let mut text = state.metrics.render();
            text.push_str(&metrics::process::render());
            bytes::Bytes::from(text)
        })
        .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// The reference Envoy rate limit service's `POST /json`: a `RateLimitRequest` in protobuf's
/// JSON mapping, decided by the same call as gRPC's `ShouldRateLimit` over the current
/// `[envoy]` rules; the response in the same mapping, 200 when OK, 429 when over limit. A body
/// that is not such a request is 400 saying what is wrong; a request gRPC would refuse with
/// `INVALID_ARGUMENT` is 400 with its message, one refused with `UNAVAILABLE` (a `deny`
/// policy over a failed store) 503.
async fn envoy_json(
    State(state): State<Arc<AppState>>,
    body: Result<Body, ApiError>,
) -> Result<Response, ApiError> {
    use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use tollgate_envoy::tonic::Code as GrpcCode;

    let bytes = body?.0;
    let request: tollgate_envoy::JsonRateLimitRequest =
        api::parse(&bytes).map_err(ApiError::BadRequest)?;
    let request = request.into();
    let limits = state.limits.load_full();
    let response = match tollgate_envoy::should_rate_limit(limits.envoy(), &request).await {
        Ok(response) => response,
        Err(status) if status.code() == GrpcCode::Unavailable => {
            let body = serde_json::json!({ "error": status.message() });
            return Ok((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response());
        }
        Err(status) => return Err(ApiError::BadRequest(status.message().to_owned())),
    };
    let status = if response.overall_code == Code::OverLimit as i32 {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    Ok((status, Json(tollgate_envoy::response_json(&response))).into_response())
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// The reference Envoy rate limit service's health check, where Envoy deployments probe it:
/// `200 OK` (text), or `500` with no body while the Envoy rules are unhealthy (`[envoy]
/// healthy_with_at_least_one_config_loaded` and no domain loaded), as the reference answers.
async fn healthcheck(State(state): State<Arc<AppState>>) -> Response {
    if state.limits.load().envoy().healthy() {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

/// Ready when the store answers the probe (`store_probe.rs`: a write on Redis), probed now;
/// the result is also what `/v1/status` and the scrape reuse, and goes into the outage
/// history.
async fn readyz(State(state): State<Arc<AppState>>) -> Result<Reply, ApiError> {
    state
        .probe
        .probe_now(&state.store, &state.history)
        .await
        .map_err(ApiError::ProbeFailed)?;
    Reply::json(serde_json::json!({ "status": "ready", "store": state.store.kind() }))
}

/// `GET /v1/history`: the last hour, for the status page's charts.
async fn history(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let lane = Arc::clone(&state);
    let body = state
        .watch
        .run_shared("history", move || json_bytes(&status::history(&lane)))
        .await?;
    Ok(no_store(shared_json(body)?))
}

/// `GET /v1/status`: what the status page shows.
async fn status(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let probed = status::probed(&state).await;
    let lane = Arc::clone(&state);
    let body = state
        .watch
        .run_shared("status", move || {
            let body: StatusBody = status::status(&lane, probed);
            json_bytes(&body)
        })
        .await?;
    Ok(no_store(shared_json(body)?))
}

/// `body` as JSON, for a read shared by its readers ([`super::watch_lane::WatchLane::run_shared`]:
/// each gets a clone).
fn json_bytes(body: &impl serde::Serialize) -> Result<bytes::Bytes, Arc<str>> {
    serde_json::to_vec(body)
        .map(bytes::Bytes::from)
        .map_err(|e| e.to_string().into())
}

/// The response of a shared JSON read.
fn shared_json(body: Result<bytes::Bytes, Arc<str>>) -> Result<Response, ApiError> {
    let bytes = body.map_err(|e| ApiError::Internal(e.to_string().into()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

/// `response`, which a cache must not keep (the status page's reads are of now).
fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheme is matched in any case; the token exactly.
    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for value in ["Bearer t0k", "bearer t0k", "BEARER t0k", "bEaReR  t0k"] {
            assert_eq!(bearer_token(value), Some("t0k"), "{value}");
        }
        for value in ["Basic t0k", "Bearert0k", "t0k", ""] {
            assert_eq!(bearer_token(value), None, "{value}");
        }
    }

    /// Only the exact token matches.
    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("token-1234", "token-1234"));
        assert!(!same_secret("token-1235", "token-1234"));
        assert!(!same_secret("", "token-1234"));
        assert!(!same_secret("token-12345", "token-1234"));
    }

    /// `tollgate_http_requests_total{route="other",status="500"}` as scraped.
    fn other_500s() -> u64 {
        let text = crate::metrics::handle().render();
        text.lines()
            .find(|l| {
                l.starts_with("tollgate_http_requests_total{")
                    && l.contains(r#"route="other""#)
                    && l.contains(r#"status="500""#)
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// A handler that panics gets its request a 500 with the API's error body, the
    /// connection closed, and the request counted; the router goes on serving.
    #[tokio::test]
    async fn a_panicking_handler_is_answered_500_and_counted() {
        use axum::body::Body as HttpBody;
        use axum::http::Request;
        use http_body_util::BodyExt;
        use tower::ServiceExt;

        async fn boom() -> &'static str {
            panic!("a handler bug, on purpose")
        }
        let _ = crate::metrics::handle();
        let app = Router::new()
            .route("/boom", get(boom))
            .route("/fine", get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(observe_http));
        let before = other_500s();
        let get = |path: &str| Request::get(path).body(HttpBody::empty()).expect("request");

        let response = app.clone().oneshot(get("/boom")).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            response.headers().get(header::CONNECTION),
            Some(&HeaderValue::from_static("close"))
        );
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(&body[..], br#"{"error":"internal error"}"#);
        assert!(other_500s() > before, "the 500 was not counted");

        let response = app.oneshot(get("/fine")).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
    }
}

/// The status reads render on the watch lane: while it is busy, reads wait there and checks
/// go on, whatever the number of reads waiting against the workers.
#[cfg(test)]
mod watch_lane_tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use axum::body::Body as HttpBody;
    use axum::http::{Method, Request};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::config::{Config, Overrides};

    const CONFIG: &str = r#"
[[limits]]
name = "lane_sms"
algorithm = "fixed_window"
limit = 1000
period = "1h"
key = ["user"]
on_store_error = "deny"
"#;

    async fn call(app: &Router, method: Method, path: &str, body: &str) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(HttpBody::from(body.to_owned()))
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_go_on_while_status_reads_wait_for_the_lane() {
        let config =
            Config::parse(CONFIG, "test.toml", &Overrides::default()).expect("valid config");
        let state = crate::server::build_state(&config, None)
            .await
            .expect("state");
        let app = router(Arc::clone(&state));

        // The lane is busy until told.
        let (release, held) = mpsc::channel::<()>();
        let busy = state.watch.run(move || held.recv().ok());
        let reads: Vec<_> = [
            "/metrics",
            "/v1/status",
            "/v1/history",
            "/v1/top?limit=lane_sms",
            "/v1/limits",
        ]
        .iter()
        .cycle()
        .take(16)
        .map(|path| {
            let app = app.clone();
            tokio::spawn(async move { (path, call(&app, Method::GET, path, "").await) })
        })
        .collect();

        // Sixteen reads waiting, on two workers: the checks are answered all the same. (The
        // timeout only turns a hang into a failure.)
        for _ in 0..20 {
            let (status, body) = tokio::time::timeout(
                Duration::from_secs(30),
                call(
                    &app,
                    Method::POST,
                    "/v1/check",
                    r#"{"limit": "lane_sms", "key": {"user": "7"}}"#,
                ),
            )
            .await
            .expect("a check answered while the status reads wait");
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        assert!(
            reads.iter().all(|read| !read.is_finished()),
            "a status read was answered while the lane was busy: rendered off the lane"
        );

        release.send(()).expect("release the lane");
        assert_eq!(busy.await.expect("the busy render"), Some(()));
        for read in reads {
            let (path, (status, body)) = read.await.expect("read task");
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            let well_formed = if *path == "/metrics" {
                body.contains("tollgate_decisions_total{limit=\"lane_sms\"")
            } else {
                serde_json::from_str::<serde_json::Value>(&body).is_ok()
            };
            assert!(well_formed, "{path}: {body}");
        }
    }
}
