//! The one place that decides HTTP status codes.
//!
//! A handler returns `Result<Reply, ApiError>`:
//! - [`Reply::Verdict`]: the verdict's [`Outcome`] picks the status: 200 allowed, 429
//!   limited, 503 when the store failed and a limit's policy is `deny`. Refusals carry
//!   `Retry-After` (whole seconds, rounded up, never 0), and every verdict the
//!   `RateLimit-Policy` / `RateLimit` fields, whose values are [`tollgate::wire`]'s (the same
//!   as the tower layer's and the Envoy service's);
//! - [`ApiError`]: 4xx for the client's mistakes (never logged: they are not ours to fix),
//!   5xx for ours (logged with their cause; the client sees only a generic message).
//!
//! Errors found below the router (a malformed or oversized head, a head that never ends) are
//! [`ApiError`]s too, written by [`ApiError::raw_http1`] as whole HTTP/1.1 messages, so every
//! error a client can see has the same `{"error": ...}` body.

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate::{Outcome, Verdict, wire};

use super::verdict_json::{self, AcquireFields};

/// A successful answer.
#[derive(Debug)]
pub enum Reply {
    /// A check or peek (boxed: a verdict holds its decisions inline).
    Verdict(Box<Verdict>),
    /// An acquire: its reservation's verdict (statuses and headers as a check's), the wait
    /// until its slot when allowed, and whether the service already waited it.
    Acquired {
        /// The reservation as a check of its one limit.
        verdict: Box<Verdict>,
        /// Until the slot, when allowed.
        wait: Option<std::time::Duration>,
        /// Whether the service slept the wait before answering.
        held: bool,
    },
    /// Any other JSON body, with 200.
    Json(serde_json::Value),
}

impl Reply {
    /// A verdict reply.
    pub fn verdict(verdict: Verdict) -> Reply {
        Reply::Verdict(Box::new(verdict))
    }

    /// A 200 JSON reply.
    ///
    /// # Errors
    /// [`ApiError::Internal`] (500, logged with its cause) if `body` does not serialize: a
    /// body that cannot be written is our failure, not a 200 with `null`.
    pub fn json(body: impl Serialize) -> Result<Reply, ApiError> {
        serde_json::to_value(body)
            .map(Reply::Json)
            .map_err(|e| ApiError::Internal(e.into()))
    }
}

/// A request that could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed JSON, unknown limit, missing key part, bad cost.
    #[error("{0}")]
    BadRequest(String),
    /// The body is larger than the API accepts.
    #[error("request body exceeds {0} bytes")]
    TooLarge(usize),
    /// `/v1/reset` without the right bearer token.
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// `/v1/reset` when no admin token is configured.
    #[error("reset is disabled: no admin_token is configured")]
    ResetDisabled,
    /// No such route.
    #[error("no such endpoint")]
    NotFound,
    /// The route exists with another method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The store is unreachable (readiness, reset). The message names the kind of failure
    /// (`connection`, `timeout`, `oom`, …), not its details, which are logged.
    #[error("store unavailable ({})", .0.kind().as_str())]
    StoreUnavailable(#[source] tollgate::StoreError),
    /// `/readyz`: the store's health probe failed, of this kind (the details are logged by
    /// the probe, at most once a second).
    #[error("store unavailable ({0})")]
    ProbeFailed(&'static str),
    /// The request's body did not arrive within `server.body_timeout`.
    #[error("request body not received within {}", crate::duration::format(*.0))]
    BodyTimeout(std::time::Duration),
    /// The request's head did not arrive within `server.header_timeout`.
    #[error("request headers not received in time")]
    HeaderTimeout,
    /// The request line or a header is malformed (answered below the router).
    #[error("malformed request")]
    Malformed,
    /// The request target is too long (answered below the router).
    #[error("request URI too long")]
    UriTooLong,
    /// The head is larger than the server reads (answered below the router).
    #[error("request header fields too large")]
    HeadersTooLarge,
    /// `POST /v1/acquire` asked to hold while `cap` acquires (half of
    /// `server.max_connections`) already hold their connections (`held_acquires.rs`).
    #[error(
        "too many held acquires: {0} connections (half of server.max_connections) already wait for their slots; retry, or ask without \"hold\""
    )]
    HeldAcquiresFull(usize),
    /// A bug or an unexpected failure.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The request's handler panicked (a bug; the panic hook logged where and why). The
    /// connection is closed after the answer: how much of the request was read is unknown.
    #[error("internal error")]
    Panicked,
}

impl ApiError {
    /// The status code for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::ResetDisabled => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::StoreUnavailable(_)
            | ApiError::ProbeFailed(_)
            | ApiError::HeldAcquiresFull(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BodyTimeout(_) | ApiError::HeaderTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::Malformed => StatusCode::BAD_REQUEST,
            ApiError::UriTooLong => StatusCode::URI_TOO_LONG,
            ApiError::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::Internal(_) | ApiError::Panicked => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether the connection is closed after this answer: the request was not read whole,
    /// so what follows on the connection cannot be trusted to start a new one.
    fn closes(&self) -> bool {
        matches!(
            self,
            ApiError::BodyTimeout(_)
                | ApiError::HeaderTimeout
                | ApiError::Malformed
                | ApiError::UriTooLong
                | ApiError::HeadersTooLarge
                | ApiError::Panicked
        )
    }

    fn body(&self) -> serde_json::Value {
        serde_json::json!({ "error": self.to_string() })
    }

    /// This error as a whole HTTP/1.1 response (JSON body, `connection: close`), for the
    /// connection layer, which answers below the router.
    pub fn raw_http1(&self) -> Vec<u8> {
        let status = self.status();
        let body = self.body().to_string();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or_default(),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            // One line a second at most (with the count held back), as the core logs store
            // failures: `/readyz`, `/v1/adjust` and `/v1/reset` each answered 503 with a line of
            // their own, so a flood of `GET /readyz` while Redis was down wrote one WARN per
            // request (21,456 lines in 5 s, audit 2026-12). The failures are counted by
            // `tollgate_store_errors_total` (adjust, reset) and `tollgate_store_up` (probe).
            ApiError::StoreUnavailable(cause) => {
                if let Some(skipped) = STORE_UNAVAILABLE_LOG.admit() {
                    tracing::warn!(kind = cause.kind().as_str(), cause = %cause, skipped, "store unavailable");
                }
            }
            ApiError::Internal(cause) => {
                if let Some(skipped) = INTERNAL_LOG.admit() {
                    tracing::error!(cause = %cause, skipped, "request failed");
                }
            }
            ApiError::Panicked => {
                if let Some(skipped) = PANICKED_LOG.admit() {
                    tracing::error!(skipped, "request failed: its handler panicked");
                }
            }
            _ => {}
        }
        let mut response = (status, Json(self.body())).into_response();
        if self.closes() {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if matches!(self, ApiError::HeldAcquiresFull(_)) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(self, ApiError::Unauthorized) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        match self {
            Reply::Json(body) => Json(body).into_response(),
            Reply::Verdict(verdict) => verdict_response(&verdict, None),
            Reply::Acquired {
                verdict,
                wait,
                held,
            } => {
                let acquire = AcquireFields {
                    wait_ms: wait.map(wire::ceil_millis),
                    held,
                };
                verdict_response(&verdict, Some(acquire))
            }
        }
    }
}

/// A verdict's answer: its JSON body ([`verdict_json`]), its status (200, 429, 503) and its
/// `RateLimit-Policy`, `RateLimit` and `Retry-After` fields.
fn verdict_response(verdict: &Verdict, acquire: Option<AcquireFields>) -> Response {
    let outcome = verdict.outcome();
    let bytes = verdict_json::write(verdict, outcome, acquire);
    let status = match outcome {
        Outcome::Allowed => StatusCode::OK,
        Outcome::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Outcome::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut response = (status, Body::from(bytes)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    let decisions = verdict.decisions();
    insert(headers, &RATELIMIT_POLICY, wire::policy_of(decisions));
    if let Some(value) = wire::rate_limit(decisions, false) {
        insert(headers, &RATELIMIT, value);
    }
    if let Some(secs) = outcome.retry_after().map(wire::retry_after_secs) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        tracing::debug!(status = status.as_u16(), "refused");
    }
    response
}

/// A 200 JSON answer, serialized where it is called (the status reads call it on the watch
/// lane, so that the serializing is off the workers too).
///
/// # Errors
/// [`ApiError::Internal`] if `body` does not serialize.
pub(crate) fn json_body(body: &impl Serialize) -> Result<Response, ApiError> {
    let bytes = serde_json::to_vec(body).map_err(|e| ApiError::Internal(e.into()))?;
    let mut response = Body::from(bytes).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    Ok(response)
}

/// At most one `store unavailable` line a second, however many requests meet the failure.
static STORE_UNAVAILABLE_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();
/// At most one `request failed` line a second (a render that panics on every scrape, a lane
/// that stopped: each request would log again).
static INTERNAL_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();
/// At most one `its handler panicked` line a second (the panic hook reports the panic
/// itself, its place and message; this says a request was answered 500 for it).
static PANICKED_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();

/// The JSON content type, as axum's `Json` writes it.
const JSON: &str = "application/json";
/// The field names, made once (a name made from a string is checked byte by byte).
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static(wire::RATELIMIT_POLICY);
static RATELIMIT: HeaderName = HeaderName::from_static(wire::RATELIMIT);

/// Inserts a `wire` value (printable ASCII, always a valid header value) unless it is empty.
fn insert(headers: &mut HeaderMap, name: &HeaderName, value: String) {
    if value.is_empty() {
        return;
    }
    if let Ok(value) = HeaderValue::try_from(value) {
        headers.insert(name.clone(), value);
    }
}

/// A request body that did not arrive within `server.body_timeout`: the error the connection
/// layer's body fails with (`connection::body`), which reaches the handler inside axum's body
/// rejection and is answered [`ApiError::BodyTimeout`]. Here rather than in the connection
/// layer, so that the handlers need nothing from below the router.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("request body not received within {}", crate::duration::format(*.0))]
pub(crate) struct BodyTimedOut(pub(crate) std::time::Duration);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_body_that_does_not_serialize_is_a_500_not_a_null() {
        // JSON object keys must be strings; a map keyed by pairs cannot be written.
        let body: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
        let error = Reply::json(&body).expect_err("a map with non-string keys serialized");
        assert!(matches!(error, ApiError::Internal(_)), "{error:?}");
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            json_body(&body)
                .expect_err("json_body serialized it")
                .status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn a_body_that_serializes_is_its_json() {
        let reply = Reply::json(serde_json::json!({ "status": "ready" })).expect("serializes");
        let Reply::Json(value) = reply else {
            panic!("not a JSON reply: {reply:?}")
        };
        assert_eq!(value["status"], "ready");
    }
}
