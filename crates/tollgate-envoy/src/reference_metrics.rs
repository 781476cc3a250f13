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
//! config), `key2` the deeper levels joined by `.` (absent for a one-level rule): the label
//! set is the config's, bounded by it. Descriptor values appear only for a YAML entry with
//! `detailed_metric: true` or a level with `value_to_metric: true`, and for per-request limit
//! overrides (whose rule is the request's),
//! and then only for the first [`MAX_DYNAMIC`] distinct label sets of the process; later ones
//! are counted under the rule's own key (`detailed_metric`) or `key1="_other"` (overrides).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use crate::rule_counters::RuleCounters;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use metrics::Label;
use tollgate::LimitDecision;

use crate::decide::{Answer, Fixed};

/// Most distinct label sets made from descriptor values, per process.
pub const MAX_DYNAMIC: usize = 1000;

/// The share of the limit past which admitted hits are "near" it when `[envoy]
/// near_limit_ratio` is not set (the reference's default `NEAR_LIMIT_RATIO`).
pub const NEAR_LIMIT_RATIO: f64 = 0.8;

/// Metric names.
pub const TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// Hits admitted.
pub const WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// Admitted hits past the near-limit ratio.
pub const NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// Hits refused.
pub const OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// Hits refused by a shadow rule (answered OK).
pub const SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// Answers global shadow mode turned to OK.
pub const GLOBAL_SHADOW_MODE: &str = "ratelimit_service_global_shadow_mode";

/// The reference's service-level series (its `ServiceStats`, its gRPC server's), under its
/// default Prometheus mapping's names: config loads that succeeded.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// Config loads refused.
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// `ShouldRateLimit` calls that met an error, by `err_type`: `redis_error` (the store failed,
/// whatever the limit's policy then answered), `service_error` (a request refused as invalid).
pub const SHOULD_RATE_LIMIT_ERROR: &str = "ratelimit_service_should_rate_limit_error";
/// gRPC calls, by `grpc_method` (`ShouldRateLimit`).
pub const TOTAL_REQUESTS: &str = "ratelimit_service_total_requests";
/// gRPC call latency, by `grpc_method` (a histogram, in seconds).
pub const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

/// Counts one load (at start, or a reload) of a config with an `[envoy] config_dir`, as the
/// reference counts each load of its runtime directory.
pub fn config_load(ok: bool) {
    metrics::counter!(if ok {
        CONFIG_LOAD_SUCCESS
    } else {
        CONFIG_LOAD_ERROR
    })
    .increment(1);
}

/// Makes both config load series exist (at 0), so that a first error is an increase.
pub fn config_loads_watched() {
    metrics::counter!(CONFIG_LOAD_SUCCESS).increment(0);
    metrics::counter!(CONFIG_LOAD_ERROR).increment(0);
}

/// Counts a `ShouldRateLimit` call that met an error of `err_type`.
pub(crate) fn call_error(err_type: &'static str) {
    metrics::counter!(SHOULD_RATE_LIMIT_ERROR, "err_type" => err_type).increment(1);
}

/// Counts a gRPC call of `method` that took `took`.
pub(crate) fn grpc_call(method: &'static str, took: std::time::Duration) {
    metrics::counter!(TOTAL_REQUESTS, "grpc_method" => method).increment(1);
    metrics::histogram!(RESPONSE_TIME, "grpc_method" => method).record(took);
}

/// The five series of a rule's statistics key, in the order of [`Hits::counts`].
pub(crate) const RULE_SERIES: [&str; 5] = [
    TOTAL_HITS,
    WITHIN_LIMIT,
    NEAR_LIMIT,
    OVER_LIMIT,
    SHADOW_MODE,
];

/// A rule's statistics key, split as the reference's Prometheus mapping splits it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Stat {
    domain: Arc<str>,
    key1: Arc<str>,
    key2: Option<Arc<str>>,
}

/// How a rule names its statistics.
#[derive(Debug)]
pub(crate) enum StatKey {
    /// Fixed by the config: its counters, looked up on first use and then kept (a lookup is a
    /// label set built and hashed, five times per descriptor: 7 % of the Envoy service's CPU
    /// on a refusal answered by the deny cache, docs/benchmarks.md).
    Fixed(Stat, OnceLock<RuleCounters>),
    /// `detailed_metric`: the request's values, falling back to the rule's own key.
    Detailed(Stat),
    /// `value_to_metric` at some level: each level's label as the config writes it, or, where
    /// `None`, the request's `key_value` at that level; falling back to the rule's own key.
    Valued(Stat, Box<[Option<Box<str>>]>),
}

impl StatKey {
    /// A key fixed by the config.
    pub(crate) fn fixed(stat: Stat) -> StatKey {
        StatKey::Fixed(stat, OnceLock::new())
    }
}

impl Stat {
    /// The key of `levels` (`key` or `key_value` each) in `domain`.
    pub(crate) fn new(domain: &str, levels: &[String]) -> Stat {
        let (first, rest) = levels
            .split_first()
            .map_or(("", &[][..]), |(f, r)| (&**f, r));
        Stat {
            domain: domain.into(),
            key1: first.into(),
            key2: (!rest.is_empty()).then(|| rest.join(".").into()),
        }
    }

    /// Its labels: shared strings, built without copying text.
    pub(crate) fn labels(&self) -> Vec<Label> {
        let mut labels = Vec::with_capacity(3);
        labels.push(Label::new("domain", Arc::clone(&self.domain)));
        labels.push(Label::new("key1", Arc::clone(&self.key1)));
        if let Some(k2) = &self.key2 {
            labels.push(Label::new("key2", Arc::clone(k2)));
        }
        labels
    }
}

/// `key` or `key_value`, as the reference writes one level.
pub(crate) fn level(key: &str, value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => format!("{key}_{v}"),
        _ => key.to_owned(),
    }
}

/// The statistics of one descriptor: its key and how its answer counts.
#[derive(Debug)]
pub(crate) enum Counted<'a> {
    /// By a rule (borrowed from the config's snapshot: nothing cloned per call).
    Rule(&'a StatKey),
    /// By a `detailed_metric` rule of an imported tree (its own key the fallback), each
    /// level labelled `key_<value>` with these values: the request's, or the pattern of a
    /// `share_threshold` wildcard, so that values sharing one counter share one label set.
    Detailed(&'a Stat, Vec<&'a str>),
    /// By a `value_to_metric` rule of an imported tree (its own key the fallback): each level
    /// labelled as given (`key`, `key_value`, or the request's `key_<value>`).
    Valued(&'a Stat, Vec<String>),
    /// By a limit override (the request's entries, keys only beyond the bound).
    Override,
}

/// Counts `answer` to `request`; `counted[i]` says how descriptor `i` is counted (`None`:
/// matched nothing); `global_shadow` is `[envoy] shadow`, `near_ratio` `[envoy]
/// near_limit_ratio`.
pub(crate) fn record(
    request: &RateLimitRequest,
    answer: &Answer,
    counted: &[Option<Counted<'_>>],
    global_shadow: bool,
    near_ratio: f32,
) {
    let default_cost = u64::from(request.hits_addend.max(1));
    let mut would_refuse = false;
    for (slot, d) in request.descriptors.iter().enumerate() {
        let Some(how) = counted.get(slot).and_then(Option::as_ref) else {
            continue;
        };
        let cost = crate::decide::descriptor_cost(d, default_cost);
        // `fixed` is in slot order: a binary search keeps a call's count linear-logarithmic.
        let fixed = answer
            .fixed
            .binary_search_by_key(&slot, |&(s, _)| s)
            .ok()
            .map(|i| &answer.fixed[i].1);
        let outcome = answer.outcomes.get(slot).and_then(Option::as_ref);
        let shown = answer.shown.get(slot).and_then(Option::as_ref);
        // The `shadow_mode` series counts rules in shadow mode of their own, as the
        // reference's: not those that only `[envoy] shadow` makes shadow.
        let (hits, own_shadow) = match (fixed, outcome) {
            (Some(Fixed::Unlimited), _) => continue,
            (Some(Fixed::Blocked { own_shadow, .. }), _) => {
                (Hits::refused(cost, *own_shadow), *own_shadow)
            }
            (None, Some(o)) => {
                let own = o.shadow && shown.is_some_and(|s| s.own_shadow);
                (Hits::of(o, cost, own, near_ratio), own)
            }
            (None, None) => continue, // replaced: not decided
        };
        // What global shadow mode turned to OK: a refusal that a rule's own shadow mode did
        // not already answer OK (a check-only descriptor refuses with 0 hits).
        would_refuse |= hits.refused && !own_shadow;
        if let Counted::Rule(StatKey::Fixed(stat, counters)) = how {
            counters.get_or_init(|| RuleCounters::new(stat)).add(&hits);
        } else {
            hits.emit(&stat_of(&request.domain, d, how));
        }
    }
    if global_shadow && would_refuse {
        metrics::counter!(GLOBAL_SHADOW_MODE).increment(1);
    }
}

/// The counts one descriptor adds.
#[derive(Debug, Default)]
pub(crate) struct Hits {
    total: u64,
    within: u64,
    near: u64,
    over: u64,
    shadow: u64,
    /// Whether the descriptor was refused (its hits may be 0: check only).
    refused: bool,
}

impl Hits {
    /// A refusal of `cost` hits, counted as `shadow_mode` too when `own_shadow`.
    fn refused(cost: u64, own_shadow: bool) -> Hits {
        Hits {
            total: cost,
            over: cost,
            shadow: if own_shadow { cost } else { 0 },
            refused: true,
            ..Hits::default()
        }
    }

    fn of(o: &LimitDecision, cost: u64, own_shadow: bool, near_ratio: f32) -> Hits {
        if !o.decision.is_allowed() {
            return Hits::refused(cost, own_shadow);
        }
        let limit = o.quota.limit();
        // Units in use after this hit, and before it.
        let after = limit.saturating_sub(o.decision.remaining);
        let before = after.saturating_sub(cost);
        let threshold = near_threshold(limit, near_ratio);
        let near = if after > threshold {
            after - before.max(threshold)
        } else {
            0
        };
        Hits {
            total: cost,
            within: cost,
            near,
            ..Hits::default()
        }
    }

    /// Each series' count, in the order of [`RULE_SERIES`].
    pub(crate) fn counts(&self) -> [u64; 5] {
        [self.total, self.within, self.near, self.over, self.shadow]
    }

    /// Counts these hits under `stat`, looking its series up.
    fn emit(&self, stat: &Stat) {
        let labels = stat.labels();
        for (name, n) in RULE_SERIES.into_iter().zip(self.counts()) {
            // Every series of a counted rule exists (0 included), as the reference's do.
            metrics::counter!(name, labels.clone()).increment(n);
        }
    }
}

/// The count past which hits are near `limit`: `floor(limit × ratio)`, the product taken in
/// single precision as the reference takes it (its ratio is a `float32`), so that the
/// threshold is the reference's for every limit and ratio.
pub(crate) fn near_threshold(limit: u64, ratio: f32) -> u64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let threshold = f64::from(limit as f32 * ratio).floor() as u64;
    threshold
}

/// The statistics key of descriptor `d`, counted as `how`.
fn stat_of(domain: &str, d: &RateLimitDescriptor, how: &Counted<'_>) -> Stat {
    // Past the cap of label sets: a rule's own base key, an override's `_other`.
    let (base, levels): (Option<&Stat>, Vec<String>) = match how {
        Counted::Rule(StatKey::Fixed(stat, _)) => return stat.clone(),
        Counted::Detailed(base, values) => (
            Some(base),
            d.entries
                .iter()
                .zip(values)
                .map(|(e, v)| level(&e.key, Some(v)))
                .collect(),
        ),
        Counted::Rule(StatKey::Detailed(base) | StatKey::Valued(base, _)) => {
            (Some(base), request_levels(d))
        }
        Counted::Valued(base, levels) => (Some(base), levels.clone()),
        Counted::Override => (None, request_levels(d)),
    };
    let stat = Stat::new(domain, &levels);
    if admit(&stat) {
        stat
    } else {
        base.map_or_else(|| Stat::new(domain, &["_other".to_owned()]), Stat::clone)
    }
}

/// `key_value` of each of `d`'s entries (`key` where the value is empty).
fn request_levels(d: &RateLimitDescriptor) -> Vec<String> {
    d.entries
        .iter()
        .map(|e| level(&e.key, Some(&e.value)))
        .collect()
}

/// Whether `stat`, made from descriptor values, may be a label set: already one, or one of
/// the first [`MAX_DYNAMIC`].
fn admit(stat: &Stat) -> bool {
    static SEEN: OnceLock<Mutex<HashSet<Stat>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.contains(stat) {
        return true;
    }
    if seen.len() >= MAX_DYNAMIC {
        return false;
    }
    seen.insert(stat.clone());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One level is `key1` alone; deeper levels go to `key2`, joined by dots.
    #[test]
    fn keys_split_as_the_reference_mapping() {
        let s = Stat::new(
            "messaging",
            &["message_type_marketing".into(), "to_number".into()],
        );
        assert_eq!(
            (&*s.key1, s.key2.as_deref()),
            ("message_type_marketing", Some("to_number"))
        );
        let s = Stat::new("d", &["a".into()]);
        assert_eq!(s.key2, None);
        let s = Stat::new("d", &["a".into(), "b_1".into(), "c".into()]);
        assert_eq!(s.key2.as_deref(), Some("b_1.c"));
        assert_eq!(level("k", None), "k");
        assert_eq!(level("k", Some("v")), "k_v");
    }
}
