//! Per-request limit overrides: a descriptor's `limit { requests_per_unit, unit }`.
//!
//! Envoy sets it from dynamic metadata (the route action's `limit.dynamic_metadata`), to give
//! one caller a limit the service's config does not know. The reference service honours it
//! whenever the request's domain is configured, in place of whatever the descriptor would
//! match, never in shadow mode of its own; so does this module.
//!
//! An override is decided by a limit made at run time, a window of one unit with the
//! algorithm and failure policy of the imported limits (`[envoy] algorithm`,
//! `on_store_error`). Which counter it counts on is `[envoy] override_counters`
//! ([`OverrideCounters`]):
//! - `shared` (default, the reference's, whose cache key is domain + entries + window start
//!   and ignores the limit): when the descriptor matches an imported (YAML) limit of the
//!   override's unit keyed by the descriptor's own values, that limit's counter (a limit of
//!   its name and key at the override's rate); else a counter of `envoy.override.<unit>`
//!   keyed by the domain and every entry's key and value. Two rates for one descriptor share
//!   it. Such a limit is kept out of the deny cache ([`Limit::deny_cache`]): the cache
//!   remembers refusals by key, and a refusal under one rate is no answer under another.
//!   Fixed windows only: with another algorithm the state is in the rate's own units, and
//!   the override keeps a counter per rate.
//! - `per_rate`: `envoy.override.<unit>` keyed by the rate, the domain and every entry, so a
//!   descriptor with an override never shares a counter with the same descriptor decided by
//!   a configured limit, and two rates are two counters (a refusal remembered for one rate
//!   then never answers for another, as the keys differ).
//!
//! Memory is bounded: one limit per unit (seven) and per shared imported limit, and the rules
//! built for overrides are kept in a map of at most [`MAX_CACHED`] rates; a rate past that is
//! built for its call and dropped after it. Metrics name the limit, never the rate.
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
use crate::{CurrentLimitName, OverrideCounters, Unit};

/// Most override rates whose rule is kept between calls.
pub const MAX_CACHED: usize = 1024;

/// What the names of the override limits start with: reserved, no other limit may take it
/// (they would share counters).
pub const OVERRIDE_PREFIX: &str = "envoy.override.";

/// The name of the limit deciding overrides in `unit`.
pub fn limit_name(unit: Unit) -> String {
    format!("{OVERRIDE_PREFIX}{}", unit.name())
}

/// An override's rule, and how its key is made.
#[derive(Debug)]
pub(crate) struct Override {
    pub(crate) rule: Rule,
    keying: Keying,
}

/// How an override's counter is keyed (`[envoy] override_counters`).
#[derive(Debug)]
enum Keying {
    /// By the rate (its text), the domain and every entry.
    PerRate(Box<str>),
    /// By the domain and every entry, whatever the rate.
    Shared,
    /// As the imported limit of the same unit that the descriptor matches: its parts.
    Imported,
}

impl Override {
    /// The key parts of `descriptor` in `domain`: the rate (per rate only), the domain, each
    /// entry. `None` for an override counting on an imported limit's counter, whose parts
    /// are that limit's match ([`super::Snapshot::find_for`]).
    pub(crate) fn parts<'a>(
        &'a self,
        domain: &'a str,
        descriptor: &'a RateLimitDescriptor,
    ) -> Option<Vec<(&'a str, &'a str)>> {
        let mut parts = Vec::with_capacity(2 + descriptor.entries.len());
        match &self.keying {
            Keying::PerRate(rate) => parts.push(("rate", &**rate)),
            Keying::Shared => {}
            Keying::Imported => return None,
        }
        parts.push(("domain", domain));
        parts.extend(
            descriptor
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str())),
        );
        Some(parts)
    }
}

/// An imported limit whose counter an override shares: its name and its key's part names,
/// in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedWith {
    pub(crate) limit: Arc<str>,
    pub(crate) parts: Vec<Box<str>>,
}

/// What a cached override is: its rate, unit, and the imported limit it shares, if any.
type CacheKey = (u32, Unit, Option<Arc<str>>);

/// The limits and rules of overrides, for one snapshot.
#[derive(Debug)]
pub(crate) struct Overrides {
    algorithm: Algorithm,
    policy: OnStoreError,
    shadow: bool,
    names: CurrentLimitName,
    counters: OverrideCounters,
    cached: Mutex<HashMap<CacheKey, Arc<Override>>>,
}

impl Overrides {
    /// Overrides decided with `algorithm`, failing by `policy`, all in shadow mode when
    /// `shadow` (the global switch), their `current_limit.name` as `names` says (the
    /// reference's: empty), counting on the counters `counters` says.
    pub(crate) fn new(
        algorithm: Algorithm,
        policy: OnStoreError,
        shadow: bool,
        names: CurrentLimitName,
        counters: OverrideCounters,
    ) -> Overrides {
        Overrides {
            algorithm,
            policy,
            shadow,
            names,
            counters,
            cached: Mutex::new(HashMap::new()),
        }
    }

    /// Whether overrides share the descriptor's counter whatever their rate: `shared`
    /// counters, on fixed windows (the other algorithms' states are in the rate's units).
    pub(crate) fn shared(&self) -> bool {
        self.counters == OverrideCounters::Shared && self.algorithm == Algorithm::FixedWindow
    }

    /// The override of each descriptor of `request` (`None` where it has none); with shared
    /// counters, `imported` gives the imported limit whose counter a descriptor's override
    /// of a unit shares, if any.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the first descriptor whose override has an unknown unit or 0
    /// requests per unit. (Its entries are key parts, validated by the core when the request
    /// is prepared, as every descriptor's.)
    pub(crate) fn resolve(
        &self,
        request: &RateLimitRequest,
        imported: impl Fn(&RateLimitDescriptor, Unit) -> Option<SharedWith>,
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
            let shared = if self.shared() {
                Some(imported(d, unit))
            } else {
                None
            };
            out.push(Some(self.get(o.requests_per_unit, unit, shared).map_err(
                |e| Status::invalid_argument(format!("{field}: {e}")),
            )?));
        }
        Ok(out)
    }

    /// The override of `per_unit` per `unit`, cached while there is room. `shared` is `None`
    /// for a counter per rate, `Some(None)` for the descriptor's own counter of the unit,
    /// `Some(Some(limit))` for that imported limit's counter.
    fn get(
        &self,
        per_unit: u32,
        unit: Unit,
        shared: Option<Option<SharedWith>>,
    ) -> Result<Arc<Override>, tollgate::LimitError> {
        let imported = shared
            .as_ref()
            .and_then(|s| s.as_ref().map(|s| s.limit.clone()));
        let cache_key = (per_unit, unit, imported);
        if let Some(found) = self.lock().get(&cache_key) {
            return Ok(Arc::clone(found));
        }
        let quota = Quota::new(u64::from(per_unit), unit.period())?;
        let (limit, keying) = match shared {
            None => (
                Limit::new(limit_name(unit), self.algorithm, quota)?,
                Keying::PerRate(per_unit.to_string().into()),
            ),
            Some(None) => (
                Limit::new(limit_name(unit), self.algorithm, quota)?.deny_cache(false),
                Keying::Shared,
            ),
            // The imported limit's name and key at the override's rate: its counter.
            Some(Some(with)) => (
                Limit::new(&*with.limit, self.algorithm, quota)?
                    .keyed_by(with.parts.iter().map(|p| &**p))?
                    .deny_cache(false),
                Keying::Imported,
            ),
        };
        let limit = limit.on_store_error(self.policy);
        // Never in shadow mode of its own, as in the reference.
        let mut rule = Rule::for_limit(&limit, false);
        rule.shadow = self.shadow;
        rule.shown = match self.names {
            CurrentLimitName::Rule => "".into(),
            CurrentLimitName::Limit => limit_name(unit).into(),
        };
        rule.unit = Some(unit);
        rule.own = Some(Arc::new(limit));
        let made = Arc::new(Override { rule, keying });
        let mut cached = self.lock();
        if cached.len() < MAX_CACHED {
            cached.insert(cache_key, Arc::clone(&made));
        }
        Ok(made)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Arc<Override>>> {
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
            OverrideCounters::Shared,
        );
        for per_unit in 1..=u32::try_from(MAX_CACHED).expect("small") + 10 {
            let o = overrides.get(per_unit, Unit::Minute, None).expect("valid");
            assert_eq!(o.rule.capacity, u64::from(per_unit));
        }
        assert_eq!(overrides.cached(), MAX_CACHED);
        let again = overrides.get(1, Unit::Minute, None).expect("valid");
        let same = overrides.get(1, Unit::Minute, None).expect("valid");
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
