//! Counts one answer in the reference's per-rule statistics (`crate::metrics`): each
//! descriptor as its match said it counts ([`Counted`], carried in the [`Answer`]).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::decide::{Answer, Fixed};
use crate::metrics::{
    Counted, GLOBAL_SHADOW_MODE, Hits, MAX_DYNAMIC, MAX_DYNAMIC_BYTES, RuleCounters, Stat, StatKey,
    level,
};

/// Counts `answer` to `request`; `counted[i]` says how descriptor `i` is counted (`None`:
/// matched nothing); `global_shadow` is `[envoy] shadow`, `near_ratio` `[envoy]
/// near_limit_ratio`.
pub(crate) fn record(
    request: &RateLimitRequest,
    answer: &Answer<'_>,
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
            (
                Some(Fixed::Blocked {
                    own_shadow, over, ..
                }),
                _,
            ) => {
                // Not over: a check only (no hits) with counted refusals.
                let hits = if *over {
                    Hits::refused(cost, *own_shadow)
                } else {
                    Hits::default()
                };
                (hits, *own_shadow)
            }
            (None, Some(o)) => {
                let own = o.shadow && shown.is_some_and(|s| s.own_shadow);
                let hits = match answer.after.get(slot).copied().flatten() {
                    // Refused with counted refusals, past the limit by a count read back.
                    Some(after) if !o.decision.is_allowed() => {
                        Hits::crossing(o.quota.limit(), after, cost, own, near_ratio)
                    }
                    _ => Hits::of(o, cost, own, near_ratio),
                };
                (hits, own)
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

/// The statistics key of descriptor `d`, counted as `how`.
fn stat_of(domain: &str, d: &RateLimitDescriptor, how: &Counted<'_>) -> Stat {
    // Past the cap of label sets: a rule's own base key, an override's `_other`.
    let (base, levels): (Option<&Stat>, Vec<String>) = match how {
        Counted::Rule(StatKey::Fixed(stat, _)) => return stat.clone(),
        Counted::Detailed(base, values, shared) => (
            Some(base),
            d.entries
                .iter()
                .zip(values)
                .map(|(e, v)| {
                    if *shared {
                        level(&e.key, Some(v))
                    } else {
                        detailed_level(&e.key, v)
                    }
                })
                .collect(),
        ),
        Counted::Rule(StatKey::Detailed(base)) => (
            Some(base),
            d.entries
                .iter()
                .map(|e| detailed_level(&e.key, &e.value))
                .collect(),
        ),
        Counted::Rule(StatKey::Valued(base, _)) => (Some(base), request_levels(d)),
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

/// One level of a `detailed_metric` key as the reference writes it (`GetLimit`'s
/// `entry.Key + "_" + entry.Value`): `key_value`, `key_` for an empty value.
fn detailed_level(key: &str, value: &str) -> String {
    format!("{key}_{value}")
}

/// `key_value` of each of `d`'s entries (`key` where the value is empty).
fn request_levels(d: &RateLimitDescriptor) -> Vec<String> {
    d.entries
        .iter()
        .map(|e| level(&e.key, Some(&e.value)))
        .collect()
}

/// Whether `stat`, made from descriptor values, may be a label set: at most
/// [`MAX_DYNAMIC_BYTES`] long, and already one or one of the first [`MAX_DYNAMIC`].
fn admit(stat: &Stat) -> bool {
    if stat.bytes() > MAX_DYNAMIC_BYTES {
        return false;
    }
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
