//! The reference service's per-rule statistics, as Prometheus counters.
//!
//! envoyproxy/ratelimit counts, per rule, `ratelimit.service.rate_limit.<domain>.<key>.<stat>`
//! in statsd, and its default Prometheus mapping turns them into
//! `ratelimit_service_rate_limit_<stat>{domain, key1[, key2]}`. These counters have those
//! names and labels, so dashboards and alerts written for the reference keep working:
//! - `total_hits`: hits (a descriptor's cost) of every decided descriptor;
//! - `within_limit`: hits admitted;
//! - `near_limit`: admitted hits that took the key past `[envoy] near_limit_ratio` (default
//!   80 %) of its limit (only the part past it, as the reference counts);
//! - `over_limit`: hits refused (a refused descriptor charges nothing, so all of its cost);
//! - `shadow_mode`: hits refused by a shadow rule and answered OK;
//! - `ratelimit_service_global_shadow_mode`: answers that `[envoy] shadow` turned to OK.
//!
//! `key1` is the first level of the rule's key (`key` or `key_value`, as written in the
//! config), `key2` the deeper levels joined by `.` (absent for a one-level rule), sanitized
//! as the reference's `SanitizeStatName` (`stat.rs`: `:`, `|` and an IPv4 address's dots
//! become `_`): the label set is the config's, bounded by it. Descriptor values appear only for a YAML entry with
//! `detailed_metric: true` or a level with `value_to_metric: true`, and for per-request limit
//! overrides (whose rule is the request's),
//! and then only for the first [`MAX_DYNAMIC`] distinct label sets of the process, each at
//! most [`MAX_DYNAMIC_BYTES`] long; later or longer ones are counted under the rule's own key
//! (`detailed_metric`) or `key1="_other"` (overrides).
//!
//! - `names`: the series' names, and the service-level counts (config loads, errors, calls);
//! - `stat`, `stat_key`: a rule's statistics key, and how a rule names it;
//! - `counted`: how one matched descriptor counts, carried from its match to the count;
//! - `hits`, `rule_counters`: what one descriptor adds, and a fixed key's counter handles.
//!
//! Counting one answer is `crate::service::record`, above the decision it counts.

mod counted;
mod hits;
mod names;
mod rule_counters;
mod stat;
mod stat_key;

pub(crate) use counted::Counted;
pub(crate) use hits::Hits;
pub use names::{
    CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, GLOBAL_SHADOW_MODE, MAX_DYNAMIC, MAX_DYNAMIC_BYTES,
    NEAR_LIMIT, NEAR_LIMIT_RATIO, OVER_LIMIT, RESPONSE_TIME, SHADOW_MODE, SHOULD_RATE_LIMIT_ERROR,
    TOTAL_HITS, TOTAL_REQUESTS, WITHIN_LIMIT, config_load, config_loads_watched,
};
pub(crate) use names::{call_error, grpc_call};
pub(crate) use rule_counters::RuleCounters;
pub(crate) use stat::{Stat, level};
pub(crate) use stat_key::StatKey;
