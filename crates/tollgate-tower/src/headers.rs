//! The rate-limit fields on the wire, in one place.
//!
//! Following draft-ietf-httpapi-ratelimit-headers-10, each field is a structured-field list
//! with one item per limit, the item being the limit's name as a string:
//! - `RateLimit-Policy: "<limit>";q=<limit>;w=<period seconds>` — static, computed once per
//!   layer;
//! - `RateLimit: "<limit>";r=<remaining>;t=<seconds>` — `t` is, when the request is denied,
//!   the wait until this cost would pass, otherwise the time until the quota is full again;
//!   `r` is dropped with `hide_remaining`;
//! - `Retry-After: <seconds>` on refusals;
//! - optionally `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` for the most
//!   restrictive limit.
//!
//! Every duration is rounded **up** to whole seconds (`w` of a 1.5 s period is 2); a
//! `Retry-After` is never 0. Limits decided by an `allow` or `deny` failure policy (the store
//! was down) have no real count, so they get no `RateLimit` item.

use std::fmt::Write as _;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate::{Decision, LimitDecision, OnStoreError, Quota, Source, Verdict};

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

/// Whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A `Retry-After` value: whole seconds, rounded up, at least 1.
///
/// ```
/// use std::time::Duration;
/// use tollgate_tower::headers::retry_after_secs;
///
/// assert_eq!(retry_after_secs(Duration::from_millis(1_200)), 2);
/// assert_eq!(retry_after_secs(Duration::from_micros(500)), 1);
/// assert_eq!(retry_after_secs(Duration::ZERO), 1);
/// assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
/// ```
pub fn retry_after_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
}

/// The `RateLimit-Policy` value for these limits.
pub fn policy_value<'a>(limits: impl IntoIterator<Item = (&'a str, &'a Quota)>) -> HeaderValue {
    let mut out = String::new();
    for (i, (name, quota)) in limits.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, name);
        let _ = write!(
            out,
            ";q={};w={}",
            quota.limit(),
            ceil_secs(quota.period()).max(1)
        );
    }
    header_value(out)
}

/// The `RateLimit` value for a verdict, or `None` when no limit has a real count.
pub fn rate_limit_value(verdict: &Verdict, hide_remaining: bool) -> Option<HeaderValue> {
    let mut out = String::new();
    for d in verdict.decisions().iter().filter(|d| is_counted(d)) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        push_sf_string(&mut out, &d.limit);
        if !hide_remaining {
            let _ = write!(out, ";r={}", d.decision.remaining);
        }
        let _ = write!(out, ";t={}", wait_secs(&d.decision));
    }
    (!out.is_empty()).then(|| header_value(out))
}

/// A `Retry-After` value.
pub fn retry_after_value(retry_after: Duration) -> HeaderValue {
    HeaderValue::from(retry_after_secs(retry_after))
}

/// Writes `RateLimit` and, if asked, the legacy fields for `verdict`. (`RateLimit-Policy`
/// is the layer's, see [`policy_value`].)
pub fn write_verdict(headers: &mut HeaderMap, verdict: &Verdict, options: HeaderOptions) {
    if let Some(value) = rate_limit_value(verdict, options.hide_remaining) {
        headers.insert(RATELIMIT, value);
    }
    if !options.legacy {
        return;
    }
    let decisive = verdict.decisive();
    if !is_counted(decisive) {
        return;
    }
    let d = &decisive.decision;
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(d.limit));
    if !options.hide_remaining {
        headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(d.remaining));
    }
    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(wait_secs(d)));
}

/// Whether a decision comes from a real count (the store, or the `local` fallback).
fn is_counted(d: &LimitDecision) -> bool {
    match d.source {
        Source::Store => true,
        Source::Policy { policy, .. } => policy == OnStoreError::Local,
    }
}

/// `t`: until this cost passes when denied; until the quota is full again when allowed.
fn wait_secs(d: &Decision) -> u64 {
    match d.retry_after {
        Some(retry) if !d.allowed => retry_after_secs(retry),
        _ => ceil_secs(d.reset_after),
    }
}

/// An sf-string: quoted, `"` and `\` escaped, other bytes outside printable ASCII dropped
/// (limit names are plain ASCII anyway).
fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

fn header_value(s: String) -> HeaderValue {
    // Only printable ASCII was written, which is always a valid header value.
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounding is up, and a retry is never 0 s.
    #[test]
    fn rounds_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1_200)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(60)), 60);
        assert_eq!(retry_after_secs(Duration::from_micros(500)), 1);
    }

    /// Names are sf-strings with `"` and `\` escaped.
    #[test]
    fn escapes_sf_strings() {
        let mut s = String::new();
        push_sf_string(&mut s, r#"a"b\c"#);
        assert_eq!(s, r#""a\"b\\c""#);
    }

    /// Policy items list every limit with its quota and window.
    #[test]
    fn policy_lists_limits() {
        let a = Quota::per_minute(100).expect("valid");
        let b = Quota::new(5, Duration::from_millis(1_500)).expect("valid");
        assert_eq!(
            policy_value([("global", &a), ("user", &b)]),
            r#""global";q=100;w=60, "user";q=5;w=2"#
        );
    }
}
