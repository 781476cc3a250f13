//! Per-request limit overrides: a descriptor's `limit { requests_per_unit, unit }`.
//!
//! Envoy sets it from dynamic metadata (the route action's `limit.dynamic_metadata`), to give
//! one caller a limit the service's config does not know. The reference service honours it
//! whenever the request's domain is configured, in place of whatever the descriptor would
//! match, never in shadow mode of its own; so does this module.
//!
//! An override is decided by a limit made at run time: `envoy.override.<unit>`, a window of
//! one unit, with the algorithm and failure policy of the imported limits (`[envoy] algorithm`,
//! `on_store_error`). Its key is the override's rate, the domain and every entry's key and
//! value, so:
//! - a descriptor with an override never shares a counter with the same descriptor decided by
//!   a configured limit (the reference's cache key ignores the limit, so there it can);
//! - two different rates for the same descriptor are two counters, and a refusal remembered
//!   for one rate (the deny cache) never answers for another.
//!
//! Memory is bounded: one limit per unit (seven), and the rules built for overrides are kept
//! in a map of at most [`MAX_CACHED`] rates; a rate past that is built for its call and
//! dropped after it. Metrics name the limit, never the rate, so the label set stays at seven.
//!
//! Validation comes before anything is decided: a unit that is not one of the protocol's
//! seven, or 0 requests per unit, makes the whole call `INVALID_ARGUMENT` naming the
//! descriptor, and nothing is charged. The limit is then asked like any other
//! ([`tollgate::Ask::limit`] in `decide.rs`): the core builds its key in the limiter's
//! namespace and validates it (a part or value longer than [`tollgate::MAX_KEY_VALUE`] is
//! `INVALID_ARGUMENT` too, before the charging store call), so this module builds no key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Algorithm, Limit, OnStoreError, Quota};
use tonic::Status;

use super::rule::Rule;
use crate::{CurrentLimitName, Unit};

/// Most override rates whose rule is kept between calls.
pub const MAX_CACHED: usize = 1024;

/// The name of the limit deciding overrides in `unit`.
pub fn limit_name(unit: Unit) -> String {
    format!("envoy.override.{}", unit.name())
}

/// An override's rule, and the text of its rate for the key.
#[derive(Debug)]
pub(crate) struct Override {
    pub(crate) rule: Rule,
    rate: Box<str>,
}

impl Override {
    /// The key parts of `descriptor` in `domain`: the rate, the domain, each entry.
    pub(crate) fn parts<'a>(
        &'a self,
        domain: &'a str,
        descriptor: &'a RateLimitDescriptor,
    ) -> Vec<(&'a str, &'a str)> {
        let mut parts = Vec::with_capacity(2 + descriptor.entries.len());
        parts.push(("rate", &*self.rate));
        parts.push(("domain", domain));
        parts.extend(
            descriptor
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str())),
        );
        parts
    }
}

/// The limits and rules of overrides, for one snapshot.
#[derive(Debug)]
pub(crate) struct Overrides {
    algorithm: Algorithm,
    policy: OnStoreError,
    shadow: bool,
    names: CurrentLimitName,
    cached: Mutex<HashMap<(u32, Unit), Arc<Override>>>,
}

impl Overrides {
    /// Overrides decided with `algorithm`, failing by `policy`, all in shadow mode when
    /// `shadow` (the global switch), their `current_limit.name` as `names` says (the
    /// reference's: empty).
    pub(crate) fn new(
        algorithm: Algorithm,
        policy: OnStoreError,
        shadow: bool,
        names: CurrentLimitName,
    ) -> Overrides {
        Overrides {
            algorithm,
            policy,
            shadow,
            names,
            cached: Mutex::new(HashMap::new()),
        }
    }

    /// The override of each descriptor of `request` (`None` where it has none).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the first descriptor whose override has an unknown unit or 0
    /// requests per unit. (Its entries are key parts, validated by the core when the request
    /// is prepared, as every descriptor's.)
    pub(crate) fn resolve(
        &self,
        request: &RateLimitRequest,
    ) -> Result<Vec<Option<Arc<Override>>>, Status> {
        let mut out = Vec::with_capacity(request.descriptors.len());
        for (i, d) in request.descriptors.iter().enumerate() {
            let Some(o) = d.limit.filter(|_| !d.is_negative_hits) else {
                out.push(None);
                continue;
            };
            let field = format!("descriptors[{i}].limit");
            let unit = unit(o.unit).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "{field}.unit: {} is not a rate limit unit (SECOND=1, MINUTE=2, HOUR=3, DAY=4, \
                     MONTH=5, YEAR=6, WEEK=7)",
                    o.unit
                ))
            })?;
            if o.requests_per_unit == 0 {
                return Err(Status::invalid_argument(format!(
                    "{field}.requests_per_unit: must be at least 1"
                )));
            }
            out.push(Some(self.get(o.requests_per_unit, unit).map_err(|e| {
                Status::invalid_argument(format!("{field}: {e}"))
            })?));
        }
        Ok(out)
    }

    /// The override of `per_unit` per `unit`, cached while there is room.
    fn get(&self, per_unit: u32, unit: Unit) -> Result<Arc<Override>, tollgate::LimitError> {
        if let Some(found) = self.lock().get(&(per_unit, unit)) {
            return Ok(Arc::clone(found));
        }
        let quota = Quota::new(u64::from(per_unit), unit.period())?;
        let limit =
            Limit::new(limit_name(unit), self.algorithm, quota)?.on_store_error(self.policy);
        // Never in shadow mode of its own, as in the reference.
        let mut rule = Rule::for_limit(&limit, false);
        rule.shadow = self.shadow;
        if self.names == CurrentLimitName::Rule {
            rule.shown = "".into();
        }
        rule.unit = Some(unit);
        rule.own = Some(Arc::new(limit));
        let made = Arc::new(Override {
            rule,
            rate: per_unit.to_string().into(),
        });
        let mut cached = self.lock();
        if cached.len() < MAX_CACHED {
            cached.insert((per_unit, unit), Arc::clone(&made));
        }
        Ok(made)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u32, Unit), Arc<Override>>> {
        // The map holds no invariant a panic could break.
        self.cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Rules cached (for tests of the bound).
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.lock().len()
    }
}

/// The protocol's unit numbered `n` (the response's `RateLimit.Unit` numbering, WEEK = 7,
/// which the reference accepts too).
fn unit(n: i32) -> Option<Unit> {
    Some(match n {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        7 => Unit::Week,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rates past the bound are built for their call and not kept.
    #[test]
    fn the_cache_is_bounded() {
        let overrides = Overrides::new(
            Algorithm::FixedWindow,
            OnStoreError::Allow,
            false,
            CurrentLimitName::Rule,
        );
        for per_unit in 1..=u32::try_from(MAX_CACHED).expect("small") + 10 {
            let o = overrides.get(per_unit, Unit::Minute).expect("valid");
            assert_eq!(o.rule.capacity, u64::from(per_unit));
        }
        assert_eq!(overrides.cached(), MAX_CACHED);
        let again = overrides.get(1, Unit::Minute).expect("valid");
        let same = overrides.get(1, Unit::Minute).expect("valid");
        assert!(Arc::ptr_eq(&again, &same), "a cached rate is reused");
    }

    /// Every protocol unit maps, UNKNOWN and out-of-range values do not.
    #[test]
    fn units() {
        assert_eq!(unit(0), None);
        assert_eq!(unit(8), None);
        assert_eq!(unit(-1), None);
        assert_eq!(unit(7), Some(Unit::Week));
        assert_eq!(unit(5), Some(Unit::Month));
    }
}
