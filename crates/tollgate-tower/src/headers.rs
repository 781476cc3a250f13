//! The rate-limit fields as HTTP headers. What goes in them is [`tollgate::wire`]'s, shared
//! with the service's HTTP API and the Envoy service; this module adds the header names, the
//! options and the legacy `X-RateLimit-*` fields:
//! - `RateLimit-Policy` (static, computed once per layer) and `RateLimit`, following
//!   draft-ietf-httpapi-ratelimit-headers-10;
//! - `Retry-After: <seconds>` on refusals (rounded up, never 0);
//! - optionally `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` for the most
//!   restrictive limit.
//!
//! Shadow limits never show, and limits decided by an `allow` or `deny` failure policy have
//! no real count, so they get no `RateLimit` item.

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate::{Verdict, wire};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// Legacy `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// Legacy `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// Legacy `X-RateLimit-Reset` (seconds from now).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which optional fields to send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeaderOptions {
    /// Drop the remaining count (`r=`, `X-RateLimit-Remaining`), e.g. on public endpoints
    /// where it would help an attacker pace themselves.
    pub hide_remaining: bool,
    /// Also send `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    pub legacy: bool,
}

/// Writes `RateLimit` and, if asked, the legacy fields for `verdict`. (`RateLimit-Policy`
/// is the layer's, computed once.) `RateLimit` is appended, a list that other layers add
/// their items to; the legacy fields, one value each, are left as a layer nearer the service
/// set them (on its refusal, they describe the refusing limit).
pub fn write_verdict(headers: &mut HeaderMap, verdict: &Verdict, options: HeaderOptions) {
    if let Some(value) = wire::rate_limit(verdict.decisions(), options.hide_remaining) {
        headers.append(RATELIMIT, header_value(value));
    }
    if headers.contains_key(X_RATELIMIT_LIMIT) {
        return;
    }
    if !options.legacy {
        return;
    }
    let decisive = verdict.decisive();
    if !decisive.shows_count() {
        return;
    }
    let d = &decisive.decision;
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(d.limit));
    if !options.hide_remaining {
        headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
    }
    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(wire::wait_secs(d)));
}

/// `wire` writes only printable ASCII, always a valid header value.
fn header_value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}
