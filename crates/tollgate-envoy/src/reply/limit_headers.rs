//! The reference service's limit headers (`LIMIT_RESPONSE_HEADERS_ENABLED`).
//!
//! envoyproxy/ratelimit can ask Envoy to add three headers to the client's response, for one
//! descriptor: the one with the fewest `limit_remaining` among those with a limit (the first
//! of equals), except that an over-limit descriptor always wins (the last one, as the
//! reference walks them) — unless it is a quota descriptor, which only competes by its
//! `limit_remaining`, as in the reference. Their
//! names are configurable there (`LIMIT_LIMIT_HEADER` …, defaults `RateLimit-Limit`,
//! `RateLimit-Remaining`, `RateLimit-Reset`) and here (`[envoy] limit_limit_header` …):
//! - limit: `current_limit.requests_per_unit`;
//! - remaining: `limit_remaining`;
//! - reset: whole seconds until the window resets. The reference computes it from its own
//!   clock and the unit (the end of the unit-aligned window); this is the descriptor's
//!   `duration_until_reset`, the same for the default fixed windows and correct for the
//!   other algorithms, and it reads no clock.
//!
//! They are built from the final statuses, so they show what Envoy is told.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};

use crate::{EnvoyRules, RulesError};

/// The three header names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitHeaders {
    limit: String,
    remaining: String,
    reset: String,
}

impl LimitHeaders {
    /// The headers `config` asks for, if any.
    ///
    /// # Errors
    /// [`RulesError`] naming the field when a name is not a valid HTTP header name.
    pub(crate) fn from_config(config: &EnvoyRules) -> Result<Option<LimitHeaders>, RulesError> {
        let name = |field: &str, given: &Option<String>, default: &str| {
            let name = given.clone().unwrap_or_else(|| default.to_owned());
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty() || !name.bytes().all(token) {
                return Err(RulesError::new(
                    format!("envoy.{field}"),
                    format!("{name:?} is not an HTTP header name"),
                ));
            }
            Ok(name)
        };
        let headers = LimitHeaders {
            limit: name(
                "limit_limit_header",
                &config.limit_limit_header,
                "RateLimit-Limit",
            )?,
            remaining: name(
                "limit_remaining_header",
                &config.limit_remaining_header,
                "RateLimit-Remaining",
            )?,
            reset: name(
                "limit_reset_header",
                &config.limit_reset_header,
                "RateLimit-Reset",
            )?,
        };
        // Checked even when off: a typo should not wait for the day the headers are enabled.
        Ok(config.limit_response_headers.then_some(headers))
    }

    /// The headers for `statuses` (`quota`: whether each is a quota descriptor's); none when
    /// no descriptor has a limit.
    pub(crate) fn for_statuses(
        &self,
        statuses: &[DescriptorStatus],
        quota: &[bool],
    ) -> Vec<HeaderValue> {
        let mut chosen: Option<&DescriptorStatus> = None;
        let mut forced = false;
        for (i, s) in statuses.iter().enumerate() {
            if s.current_limit.is_none() {
                continue;
            }
            if s.code == Code::OverLimit as i32 && !quota.get(i).copied().unwrap_or(false) {
                chosen = Some(s);
                forced = true;
            } else if !forced && chosen.is_none_or(|c| s.limit_remaining < c.limit_remaining) {
                chosen = Some(s);
            }
        }
        let Some(s) = chosen else {
            return Vec::new();
        };
        let per_unit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
        let reset = s
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds.max(0));
        vec![
            header(&self.limit, per_unit.to_string()),
            header(&self.remaining, s.limit_remaining.to_string()),
            header(&self.reset, reset.to_string()),
        ]
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}
