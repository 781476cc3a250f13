//! Draft rate-limit headers for Envoy to add to the client's response.
//!
//! Same fields and format as the tower layer (draft-ietf-httpapi-ratelimit-headers-10), one
//! item per enforced limit that decided a descriptor, in descriptor order:
//! - `RateLimit-Policy: "<limit>";q=<limit>;w=<period seconds>`;
//! - `RateLimit: "<limit>";r=<remaining>;t=<seconds>` — `t` is the wait until this cost would
//!   pass when denied, else until the quota is full again; limits decided by an `allow` or
//!   `deny` failure policy have no real count and get no item;
//! - `Retry-After: <seconds>` when the request is over limit.
//!
//! Durations are rounded up to whole seconds; `Retry-After` and a denied `t` are never 0.
//! Shadow limits never show: the client must not see a limit that is not enforced.

use std::fmt::Write as _;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use tollgate::{OnStoreError, Source};

use crate::decide::{Answer, Outcome};

/// The headers for `answer`; empty when no enforced limit decided anything.
pub(crate) fn response_headers(answer: &Answer) -> Vec<HeaderValue> {
    let mut seen: Vec<&str> = Vec::new();
    let mut policy = String::new();
    let mut state = String::new();
    let mut retry_after: Option<Duration> = None;
    for o in answer.outcomes.iter().flatten().filter(|o| !o.shadow) {
        if seen.contains(&&*o.limit) {
            continue;
        }
        seen.push(&o.limit);
        let q = &o.quota;
        push_item(&mut policy, &o.limit);
        let _ = write!(
            policy,
            ";q={};w={}",
            q.limit(),
            ceil_secs(q.period()).max(1)
        );
        if is_counted(o) {
            push_item(&mut state, &o.limit);
            let _ = write!(state, ";r={};t={}", o.decision.remaining, wait_secs(o));
        }
        if !o.decision.allowed {
            let wait = o.decision.retry_after.unwrap_or(Duration::from_secs(1));
            retry_after = retry_after.max(Some(wait));
        }
    }
    let mut headers = Vec::new();
    if !policy.is_empty() {
        headers.push(header("ratelimit-policy", policy));
    }
    if !state.is_empty() {
        headers.push(header("ratelimit", state));
    }
    if let Some(wait) = retry_after.filter(|_| !answer.allowed) {
        headers.push(header("retry-after", ceil_secs(wait).max(1).to_string()));
    }
    headers
}

/// Limit names are `A-Z a-z 0-9 _ - .`, so a structured-field string needs no escaping.
fn push_item(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    out.push('"');
    out.push_str(name);
    out.push('"');
}

fn is_counted(o: &Outcome) -> bool {
    !matches!(
        o.source,
        Source::Policy {
            policy: OnStoreError::Allow | OnStoreError::Deny,
            ..
        }
    )
}

fn wait_secs(o: &Outcome) -> u64 {
    match o.decision.retry_after {
        Some(wait) if !o.decision.allowed => ceil_secs(wait).max(1),
        _ => ceil_secs(o.decision.reset_after),
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}
