//! The `[envoy]` config section: which descriptor goes to which limit, as the operator writes it.
//!
//! Plain data read with serde (unknown fields rejected). It is checked against the limits it
//! names only when a [`crate::Snapshot`] is built from it, because the limits live in another
//! section of the same file and may change with it on reload.
//!
//! ```toml
//! [envoy]
//! response_headers = true          # draft RateLimit / RateLimit-Policy headers for Envoy to add
//! limit_response_headers = false   # the reference's RateLimit-Limit / -Remaining / -Reset
//! shadow = false                   # global shadow mode: every answer OK, still counting
//! quota_mode = false               # global quota mode: every descriptor a quota descriptor
//! refusals = "free"                # or "charged": refused descriptors counted, as the reference
//! override_counters = "shared"     # or "per_rate": which counter a limit override counts on
//! max_descriptors = 256            # most descriptors per call, 1..=4096 (default 256)
//! max_entries = 32                 # most entries per descriptor, 1..=256 (default 32)
//!
//! [[envoy.rules]]
//! domain = "edge"                  # RateLimitRequest.domain
//! limit = "per_ip"                 # a tollgate limit
//! shadow = false                   # true: count would-be denials, always answer OK
//! descriptor = [                   # the descriptor's entries, in order, all of them
//!   { key = "generic_key", value = "login" },   # exact value
//!   { key = "remote_address", part = "ip" },    # any value, used as key part "ip"
//! ]
//! ```
//!
//! Beside it: `caps.rs` (how many descriptors and entries one call may carry),
//! `override_counters.rs` (which counter a `limit` override counts on) and `rules_error.rs`.

pub(crate) mod caps;
pub(crate) mod override_counters;
pub(crate) mod rules_error;

use std::path::PathBuf;

use serde::Deserialize;
use tollgate::{Algorithm, OnStoreError};

use crate::{Imported, OverrideCounters};

/// The `[envoy]` section: response options and the rules.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvoyRules {
    /// Ask Envoy to add draft `RateLimit` / `RateLimit-Policy` headers (and `Retry-After` when
    /// over limit) to the client's response, through `response_headers_to_add`.
    #[serde(default)]
    pub response_headers: bool,
    /// The rules, tried in order; the first that matches a descriptor decides it.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// A directory of the reference service's (envoyproxy/ratelimit) YAML files, one domain
    /// per file (its `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY`); a relative
    /// path is relative to the config file. Read by the server into [`EnvoyRules::imported`].
    #[serde(default)]
    pub config_dir: Option<PathBuf>,
    /// The algorithm of the limits imported from `config_dir`; default `fixed_window`, the
    /// reference's (a window aligned to the unit, up to 2x the limit across a window edge).
    #[serde(default)]
    pub algorithm: Option<Algorithm>,
    /// The failure policy of the imported limits; default `allow`, as the reference fails
    /// open when Redis is down.
    #[serde(default)]
    pub on_store_error: Option<OnStoreError>,
    /// Global shadow mode (the reference's `SHADOW_MODE`): every descriptor of every rule,
    /// imported limit and limit override is decided and counted as usual, would-be refusals
    /// are counted, and every answer is OK.
    #[serde(default)]
    pub shadow: bool,
    /// Global quota mode (the reference's `QUOTA_MODE`): every descriptor is a quota
    /// descriptor, as if each rule had `quota_mode: true` (see [`RuleConfig::quota_mode`]).
    #[serde(default)]
    pub quota_mode: bool,
    /// Whether a refused descriptor is charged: `free` (default, tollgate's: a refused
    /// request charges nothing) or `charged` (the reference's counting: every descriptor's
    /// counter takes its hits, refused or not, and answers from the count after; fixed
    /// windows only).
    #[serde(default)]
    pub refusals: Refusals,
    /// The reference's `LIMIT_RESPONSE_HEADERS_ENABLED`: add a limit / remaining / reset header
    /// (names below) for the descriptor closest to its limit (an over-limit one first) to
    /// `response_headers_to_add`, beside or instead of the draft headers of
    /// `response_headers`.
    #[serde(default)]
    pub limit_response_headers: bool,
    /// The limit header's name (`LIMIT_LIMIT_HEADER`); default `RateLimit-Limit`.
    #[serde(default)]
    pub limit_limit_header: Option<String>,
    /// The remaining header's name (`LIMIT_REMAINING_HEADER`); default `RateLimit-Remaining`.
    #[serde(default)]
    pub limit_remaining_header: Option<String>,
    /// The reset header's name (`LIMIT_RESET_HEADER`); default `RateLimit-Reset`.
    #[serde(default)]
    pub limit_reset_header: Option<String>,
    /// Most descriptors one call may carry (`caps.rs`); default
    /// [`crate::DEFAULT_MAX_DESCRIPTORS`], at most [`crate::CEILING_DESCRIPTORS`]. A call with
    /// more is `INVALID_ARGUMENT`, charged nothing.
    #[serde(default)]
    pub max_descriptors: Option<usize>,
    /// Most entries one descriptor may carry; default [`crate::DEFAULT_MAX_ENTRIES`], at most
    /// [`crate::CEILING_ENTRIES`]. A call with a longer descriptor is `INVALID_ARGUMENT`, and a
    /// rule with a longer descriptor (which could never match) is refused.
    #[serde(default)]
    pub max_entries: Option<usize>,
    /// The reference's `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: the health checks (`GET
    /// /healthcheck`, the gRPC health service) report unhealthy while no domain is loaded
    /// (no YAML file of `config_dir`, no `[[envoy.rules]]`). Default `false`: healthy.
    #[serde(default)]
    pub healthy_with_at_least_one_config_loaded: bool,
    /// What `current_limit.name` shows: `rule` (default, the reference's: an imported limit's
    /// YAML `rate_limit.name`, empty where it has none) or `limit` (tollgate's limit names:
    /// the generated `<domain>.<key>…`, `envoy.override.<unit>`).
    #[serde(default)]
    pub current_limit_name: CurrentLimitName,
    /// The reference's `RESPONSE_DYNAMIC_METADATA`: fill `RateLimitResponse.dynamic_metadata`
    /// with the request (domain, descriptors, `hitsAddend`) and the merged YAML `metadata` of
    /// the descriptors that passed (`reply/dynamic_metadata.rs`). Default `false`.
    #[serde(default)]
    pub response_dynamic_metadata: bool,
    /// The reference's `MERGE_DOMAIN_CONFIG`: a domain may be spread over several files of
    /// `config_dir`, whose top-level descriptors are merged (the same key and value in two of
    /// them is refused). Default `false`: a domain in two files is refused, as the reference.
    #[serde(default)]
    pub merge_domain_config: bool,
    /// The reference's `NEAR_LIMIT_RATIO`: the share of a limit past which admitted hits count
    /// as `near_limit` (0 < r ≤ 1; default [`crate::NEAR_LIMIT_RATIO`], 0.8).
    #[serde(default)]
    pub near_limit_ratio: Option<f64>,
    /// Which counter a descriptor's `limit` override counts on: `shared` (default, the
    /// reference's: the descriptor's counter for the override's unit, whatever the rate,
    /// shared with an imported limit of that unit; fixed windows only) or `per_rate` (a
    /// counter per rate, shared with nothing).
    #[serde(default)]
    pub override_counters: OverrideCounters,
    /// The descriptor trees loaded from `config_dir` (not a config field).
    #[serde(skip)]
    pub imported: Imported,
}

/// Whether refused descriptors are charged (`[envoy] refusals`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusals {
    /// tollgate's: a request is decided all or nothing (quota descriptors aside), and a
    /// refused one charges nothing.
    #[default]
    Free,
    /// The reference's: every descriptor's counter takes its hits whether it is over the
    /// limit or not, each on its own, and is over limit when its count is above the limit.
    /// Fixed windows only.
    Charged,
}

/// What a descriptor's `current_limit.name` shows (`[envoy] current_limit_name`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurrentLimitName {
    /// The reference's: the YAML rule's `rate_limit.name`, empty when it has none (and for a
    /// limit override); a `[[envoy.rules]]` rule shows its limit's name.
    #[default]
    Rule,
    /// tollgate's limit names: `<domain>.<key>[_<value>]…` for an imported limit,
    /// `envoy.override.<unit>` for an override. With `enable_x_ratelimit_headers`, Envoy shows
    /// them to clients (`X-RateLimit-Limit: …;name="…"`).
    Limit,
}

/// One `[[envoy.rules]]` entry: a descriptor shape and the limit it goes to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The `domain` of the request.
    pub domain: String,
    /// The descriptor's entries, in order. A descriptor matches when it has exactly these
    /// keys in this order, each with the given value (or any value when none is given).
    pub descriptor: Vec<EntryConfig>,
    /// The tollgate limit that decides a matching descriptor.
    pub limit: String,
    /// Report `OK` whatever the limit says, and count would-be denials in
    /// `tollgate_shadow_denied_total{limit}`.
    #[serde(default)]
    pub shadow: bool,
    /// Quota mode (the reference's `quota_mode: true`): the descriptor is one of the
    /// request's quota descriptors, which make it over limit only when all of them are; a
    /// quota descriptor over its limit is answered `OVER_LIMIT` and not charged.
    #[serde(default)]
    pub quota_mode: bool,
}

/// One entry of a rule's descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryConfig {
    /// The entry's key, as Envoy's rate limit action produces it (`remote_address`,
    /// `generic_key`, a `descriptor_key` of your own …).
    pub key: String,
    /// The exact value to match; absent: any value.
    #[serde(default)]
    pub value: Option<String>,
    /// The limit's key part that takes this entry's value; absent: the entry only selects.
    #[serde(default)]
    pub part: Option<String>,
}
