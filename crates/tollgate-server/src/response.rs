//! The one place that decides HTTP status codes.
//!
//! A handler returns `Result<Reply, ApiError>`:
//! - [`Reply::Verdict`]: 200 when allowed, 429 when a quota refuses, 503 when the store failed
//!   and a limit's policy is `deny` ([`tollgate::Verdict::is_store_failure`]); refusals carry
//!   `Retry-After` (whole seconds, rounded up, never 0), and every verdict the
//!   `RateLimit-Policy` / `RateLimit` fields of the tower layer (`tollgate_tower::headers`,
//!   reused, not copied);
//! - [`ApiError`]: 4xx for the client's mistakes (never logged: they are not ours to fix),
//!   5xx for ours (logged with their cause; the client sees only a generic message).

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate::POLICY_RETRY_AFTER;
use tollgate_tower::headers::{
    RATELIMIT, RATELIMIT_POLICY, policy_value, rate_limit_value, retry_after_value,
};

use crate::api::VerdictBody;
use crate::limits::{Limits, Outcome};

/// A successful answer.
#[derive(Debug)]
pub enum Reply {
    /// A check or peek.
    Verdict {
        /// The decisions (boxed: a verdict holds its decisions inline).
        outcome: Box<Outcome>,
        /// The limit set that decided (for the policy header).
        policy: Option<HeaderValue>,
    },
    /// Any other JSON body, with 200.
    Json(serde_json::Value),
}

impl Reply {
    /// A verdict reply, with `RateLimit-Policy` built from `limits` for the enforced limits.
    pub fn verdict(outcome: Outcome, limits: &Limits) -> Reply {
        let policy = outcome.enforced.as_ref().map(|verdict| {
            let quotas = verdict.decisions().iter().filter_map(|d| {
                limits
                    .configs()
                    .iter()
                    .find(|c| c.limit.name_arc() == &d.limit)
                    .map(|c| (c.limit.name(), c.limit.quota()))
            });
            policy_value(quotas)
        });
        Reply::Verdict {
            outcome: Box::new(outcome),
            policy,
        }
    }

    /// A 200 JSON reply.
    pub fn json(body: impl Serialize) -> Reply {
        Reply::Json(serde_json::to_value(body).unwrap_or_default())
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
    /// The store is unreachable (readiness, reset).
    #[error("store unavailable")]
    StoreUnavailable(#[source] tollgate::StoreError),
    /// A bug or an unexpected failure.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
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
            ApiError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            ApiError::StoreUnavailable(cause) => {
                tracing::warn!(kind = cause.kind().as_str(), cause = %cause, "store unavailable");
            }
            ApiError::Internal(cause) => tracing::error!(cause = %cause, "request failed"),
            _ => {}
        }
        let mut response = (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
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
            Reply::Verdict { outcome, policy } => {
                let mut headers = HeaderMap::new();
                if let Some(policy) = policy {
                    headers.insert(RATELIMIT_POLICY, policy);
                }
                let status = match &outcome.enforced {
                    None => StatusCode::OK,
                    Some(verdict) => {
                        if let Some(value) = rate_limit_value(verdict, false) {
                            headers.insert(RATELIMIT, value);
                        }
                        if verdict.is_allowed() {
                            StatusCode::OK
                        } else {
                            let retry = verdict.retry_after().unwrap_or(POLICY_RETRY_AFTER);
                            headers.insert(header::RETRY_AFTER, retry_after_value(retry));
                            if verdict.is_store_failure() {
                                StatusCode::SERVICE_UNAVAILABLE
                            } else {
                                StatusCode::TOO_MANY_REQUESTS
                            }
                        }
                    }
                };
                if !outcome.is_allowed() {
                    tracing::debug!(status = status.as_u16(), "refused");
                }
                (status, headers, Json(VerdictBody::new(&outcome))).into_response()
            }
        }
    }
}
