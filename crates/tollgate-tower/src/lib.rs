//! # tollgate-tower
//!
//! A tower [`Layer`](tower_layer::Layer) that rate limits HTTP requests with a
//! [`tollgate::Limiter`], for axum, hyper and tonic (anything that speaks
//! [`http::Request`] / [`http::Response`]).
//!
//! - [`RateLimitLayer`] holds the configuration: which limits a route checks (all or nothing,
//!   in one store call), how the key is taken from the request ([`KeyExtractor`]), what a
//!   request costs, which headers are sent and how refusals look.
//! - [`RateLimit`] is the service; it decides in `call`, because the key comes from the request.
//! - [`headers`] writes `RateLimit-Policy`, `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10,
//!   values from [`tollgate::wire`], shared with the service and the Envoy face), `Retry-After`
//!   and, optionally, the legacy `X-RateLimit-*` fields.
//! - Refusals are `application/problem+json` ([`problem_json`]) or, for tonic clients,
//!   trailers-only gRPC answers ([`grpc`]); any other shape through
//!   [`RateLimitLayer::respond_with`].
//!
//! Guide: `docs/tower.md`. Example: `examples/axum.rs`.
//!
//! The layer is a thin shell over the core's protocol: it takes the key from the request,
//! [`tollgate::Limiter::prepare`]s the check, [`tollgate::Limiter::decide`]s it, and turns the
//! [`tollgate::Outcome`] into a response. Validation, shadow limits
//! ([`tollgate::Limit::shadow`]: decided and counted, never refusing) and failure policies are
//! the limiter's. It is generic over the store; use [`tollgate::BoxStore`] for one layer type
//! whatever the store. Refusals are responses, never errors: the service's error is the inner
//! service's, so the layer fits axum's `Router::layer` (which wants `Infallible`).
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};
//! use tollgate_tower::{ClientIp, RateLimitLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::builder(MemoryStore::new())
//!     .limit(Limit::new("per_ip", Algorithm::Gcra, Quota::per_minute(60)?)?.keyed_by(["ip"])?)
//!     .build()?;
//! let layer = RateLimitLayer::new(Arc::new(limiter), ["per_ip"], ClientIp::new())?;
//! // axum: Router::new().route("/", get(handler)).layer(layer)
//! # let _ = layer;
//! # Ok(()) }
//! ```

mod body;
pub mod error;
pub mod future;
pub mod headers;
pub mod key;
mod layer;
mod pacing;
mod respond;
mod service;

pub use body::ResponseBody;
pub use error::{ConfigError, KeyError, RateLimited, Rejection};
pub use key::{
    ClientIp, FromExtension, Global, Header, IpNet, KeyExtractor, KeyParts, ProxyHeader, Route,
    UserId,
};
pub use layer::RateLimitLayer;
pub use respond::{Responder, grpc, problem_json};
pub use service::RateLimit;
