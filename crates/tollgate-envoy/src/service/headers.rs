//! Draft rate-limit headers for Envoy to add to the client's response.
//!
//! The values are [`tollgate::wire`]'s, the same as the tower layer's and the HTTP API's: one
//! item per enforced limit that decided a descriptor, in descriptor order, each limit once;
//! durations rounded up to whole seconds; `Retry-After` only when the request is over limit,
//! never 0, the longest enforced refusal ([`tollgate::longest_refusal`]); shadow limits and limits decided by an `allow` or `deny` failure policy never
//! show a count.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use tollgate::{longest_refusal, wire};

use crate::decide::Answer;

/// The headers for `answer`; empty when no enforced limit decided anything.
pub(crate) fn response_headers(answer: &Answer<'_>) -> Vec<HeaderValue> {
    let decisions = || answer.outcomes.iter().flatten();
    let mut headers = Vec::new();
    let policy = wire::policy_of(decisions());
    if !policy.is_empty() {
        headers.push(header(wire::RATELIMIT_POLICY, policy));
    }
    if let Some(state) = wire::rate_limit(decisions(), false) {
        headers.push(header(wire::RATELIMIT, state));
    }
    if let Some(refusal) = longest_refusal(decisions()).filter(|_| !answer.allowed) {
        let secs = refusal.retry_after_secs().to_string();
        headers.push(header(wire::RETRY_AFTER, secs));
    }
    headers
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}
