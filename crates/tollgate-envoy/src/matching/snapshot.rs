//! What one call decides with: the compiled rules and the limiter they point into.
//!
//! A snapshot is built once per config (load or reload) and then shared read-only: the rules
//! are validated against the limiter's limits here, so a call never meets an unknown limit or
//! a missing key part. The server swaps whole snapshots, so a call sees either the old rules
//! with the old limits or the new with the new, never a mix.
//!
//! Matching is a scan of the rules of the request's domain, in config order; rule sets are
//! small (tens), and a hash index would have to give up "first match wins". A descriptor no
//! `[[envoy.rules]]` rule matches is then matched against the domain's imported tree (the
//! reference's YAML files, `tree.rs`), the reference's way: explicit tollgate rules win.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Algorithm, Clock, Limiter, OnStoreError, Store, SystemClock, Timestamp};
use tonic::Status;

use super::compile;
use super::found::Found;
use super::hit::Hit;
use super::overrides::{Override, Overrides, SharedWith};
use super::rule::Rule;
use super::tree::{Level, Target};
use crate::config::Refusals;
use crate::config::caps::DescriptorCaps;
use crate::metrics::{Counted, StatKey, level};
use crate::reply::limit_headers::LimitHeaders;
use crate::{EnvoyRules, RulesError};

/// A key's `(part, value)` pairs, as a matched descriptor gives them
/// ([`Snapshot::limit_for`]).
pub type KeyParts = Vec<(String, String)>;

/// Compiled rules over a shared limiter.
pub struct Snapshot<St> {
    limiter: Arc<Limiter<St>>,
    domains: HashMap<Box<str>, Vec<Rule>>,
    trees: HashMap<Box<str>, Level>,
    response_headers: bool,
    limit_headers: Option<LimitHeaders>,
    overrides: Overrides,
    shadow: bool,
    quota_mode: bool,
    refusals: Refusals,
    caps: DescriptorCaps,
    clock: Arc<dyn Clock>,
    needs_domain: bool,
    near_ratio: f32,
    dynamic_metadata: bool,
}

impl<St: Store> Snapshot<St> {
    /// Compiles `config` against the limits of `limiter`.
    ///
    /// # Errors
    /// [`RulesError`] naming the field (`envoy.rules[i]…`) when a rule has an empty domain or
    /// descriptor, names an unknown limit, gives a key part twice or one the limit is not keyed
    /// by, leaves one of the limit's key parts without an entry, or has more entries than
    /// `envoy.max_entries`; or when `envoy.max_descriptors` or `max_entries` is out of range.
    pub fn new(config: &EnvoyRules, limiter: Arc<Limiter<St>>) -> Result<Snapshot<St>, RulesError> {
        let caps = DescriptorCaps::from_config(config)?;
        if config.refusals == Refusals::Charged
            && let Some(algorithm) = config.algorithm.filter(|a| *a != Algorithm::FixedWindow)
        {
            return Err(RulesError::new(
                "envoy.algorithm",
                format!(
                    "{algorithm} cannot count refusals (envoy.refusals = \"charged\" counts as the reference's fixed windows); use fixed_window or refusals = \"free\""
                ),
            ));
        }
        let domains = compile::rules(config, &limiter, caps)?;
        let near_ratio = compile::near_limit_ratio(config.near_limit_ratio)?;
        let trees = compile::trees(config, &limiter)?;

        Ok(Snapshot {
            limiter,
            domains,
            trees,
            response_headers: config.response_headers,
            limit_headers: LimitHeaders::from_config(config)?,
            overrides: Overrides::new(
                config.algorithm.unwrap_or(Algorithm::FixedWindow),
                config.on_store_error.unwrap_or(OnStoreError::Allow),
                config.shadow,
                config.current_limit_name,
                config.override_counters,
            ),
            shadow: config.shadow,
            quota_mode: config.quota_mode,
            refusals: config.refusals,
            caps,
            clock: Arc::new(SystemClock),
            needs_domain: config.healthy_with_at_least_one_config_loaded,
            near_ratio,
            dynamic_metadata: config.response_dynamic_metadata,
        })
    }

    /// The same snapshot reading `clock` for the times it computes itself (the window reset
    /// of a 0-per-unit entry, which has no counter to ask); the system clock by default.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Snapshot<St> {
        self.clock = Arc::new(clock);
        self
    }
}

impl<St> Snapshot<St> {
    /// The limiter the rules point into.
    pub fn limiter(&self) -> &Arc<Limiter<St>> {
        &self.limiter
    }

    /// Whether responses carry draft rate-limit headers for Envoy to add.
    pub fn response_headers(&self) -> bool {
        self.response_headers
    }

    /// The reference's `x-ratelimit` style headers, when enabled.
    pub(crate) fn limit_headers(&self) -> Option<&LimitHeaders> {
        self.limit_headers.as_ref()
    }

    /// How many descriptors a call may carry, and entries a descriptor.
    pub(crate) fn caps(&self) -> DescriptorCaps {
        self.caps
    }

    /// The snapshot's clock's time.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Whether global shadow mode is on.
    pub(crate) fn global_shadow(&self) -> bool {
        self.shadow
    }

    /// `[envoy] near_limit_ratio`, in the reference's single precision.
    pub(crate) fn near_ratio(&self) -> f32 {
        self.near_ratio
    }

    /// Whether responses carry dynamic metadata (`[envoy] response_dynamic_metadata`).
    pub(crate) fn dynamic_metadata(&self) -> bool {
        self.dynamic_metadata
    }

    /// Whether global quota mode is on (`[envoy] quota_mode`).
    pub(crate) fn global_quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// Whether refused descriptors are charged (`[envoy] refusals = "charged"`).
    pub(crate) fn charges_refusals(&self) -> bool {
        self.refusals == Refusals::Charged
    }

    /// The limit override of each descriptor of `request`, validated; `None` where a
    /// descriptor has none or the domain is not configured (the reference ignores overrides
    /// then, answering as for any unknown domain).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an invalid override (see `matching/overrides.rs`).
    pub(crate) fn overrides(
        &self,
        request: &RateLimitRequest,
    ) -> Result<Vec<Option<Arc<Override>>>, Status> {
        if !self.knows(&request.domain) {
            return Ok(vec![None; request.descriptors.len()]);
        }
        self.overrides.resolve(request, |d, unit| {
            let (rule, parts) = self.imported_counter(&request.domain, &d.entries, unit)?;
            Some(SharedWith {
                limit: rule.limit.clone(),
                parts: parts.iter().map(|(p, _)| (*p).into()).collect(),
            })
        })
    }

    /// The imported limit whose counter an override of `unit` on a descriptor of `domain`
    /// with these `entries` shares (`[envoy] override_counters = "shared"`), with its key
    /// parts: the limit the descriptor would be decided by without the override, when it is
    /// an imported one of the same unit, not in shadow mode of its own, keyed by the
    /// descriptor's own values (not a `share_threshold` pattern, which the reference's key
    /// of an override does not take). `None` otherwise, a `[[envoy.rules]]` rule's limit
    /// included (tollgate's own, counted as it says).
    fn imported_counter<'a>(
        &'a self,
        domain: &str,
        entries: &'a [Entry],
        unit: crate::Unit,
    ) -> Option<(&'a Rule, Vec<(&'a str, &'a str)>)> {
        if self
            .domains
            .get(domain)
            .is_some_and(|rules| rules.iter().any(|rule| rule.matches(entries)))
        {
            return None;
        }
        let (Target::Limited(rule), parts, _) = self.trees.get(domain)?.find(entries)? else {
            return None;
        };
        let own_values = parts.len() == entries.len()
            && parts.iter().zip(entries).all(|((_, v), e)| *v == e.value);
        (rule.unit == Some(unit) && !rule.own_shadow && own_values).then_some((rule, parts))
    }

    /// The limit that decides a descriptor of `domain` with these `(key, value)` entries, and
    /// the key parts it is counted under, as a `ShouldRateLimit` call would find them
    /// (`[[envoy.rules]]` first, then the imported tree). `None` when no limit does: nothing
    /// matches, or an imported entry is `unlimited` or allows 0 requests per unit (which
    /// refuses every request without a limit). For tools that replay traffic through the
    /// rules (`tollgate replay` on an Envoy directory).
    pub fn limit_for(
        &self,
        domain: &str,
        descriptor: &[(&str, &str)],
    ) -> Option<(Arc<str>, KeyParts)> {
        let entries: Vec<Entry> = descriptor
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect();
        match self.find(domain, &entries)?.found {
            Found::Limited(rule, parts) => Some((
                rule.limit.clone(),
                parts
                    .into_iter()
                    .map(|(p, v)| (p.to_owned(), v.to_owned()))
                    .collect(),
            )),
            Found::Unlimited(_) | Found::Blocked { .. } => None,
        }
    }

    /// Whether the service is healthy by this config: always, unless `[envoy]
    /// healthy_with_at_least_one_config_loaded` asks for at least one domain (a YAML file of
    /// `config_dir`, or a `[[envoy.rules]]` rule) and there is none.
    pub fn healthy(&self) -> bool {
        !self.needs_domain || !self.domains.is_empty() || !self.trees.is_empty()
    }

    /// The domains with rules or an imported tree, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self
            .domains
            .keys()
            .chain(self.trees.keys())
            .map(|d| &**d)
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether `domain` has rules or an imported tree.
    fn knows(&self, domain: &str) -> bool {
        self.domains.contains_key(domain) || self.trees.contains_key(domain)
    }

    /// What decides `descriptor`, how it counts in the reference's statistics, and its YAML
    /// `metadata`: its limit override when it has one, else [`Snapshot::find`].
    pub(crate) fn find_for<'a, 'o>(
        &'a self,
        domain: &'a str,
        descriptor: &'a RateLimitDescriptor,
        limit_override: Option<&'o Override>,
    ) -> Option<Hit<'o, 'a>>
    where
        'a: 'o,
    {
        match limit_override {
            Some(o) => {
                let parts = match o.parts(domain, descriptor) {
                    Some(parts) => parts,
                    // On an imported limit's counter: its parts, as found when resolved.
                    None => self
                        .trees
                        .get(domain)
                        .and_then(|tree| tree.find(&descriptor.entries))
                        .map(|(_, parts, _)| parts)
                        .unwrap_or_default(),
                };
                Some(Hit {
                    found: Found::Limited(&o.rule, parts),
                    counted: Some(Counted::Override),
                    metadata: None,
                })
            }
            None => self.find(domain, &descriptor.entries),
        }
    }

    /// The first rule of `domain` whose descriptor shape `entries` has, else the imported
    /// tree's match; with how that match counts in the reference's statistics and its YAML
    /// `metadata`, so that neither needs a second match.
    pub(crate) fn find<'a>(&'a self, domain: &str, entries: &'a [Entry]) -> Option<Hit<'a, 'a>> {
        if let Some(rule) = self
            .domains
            .get(domain)
            .and_then(|rules| rules.iter().find(|rule| rule.matches(entries)))
        {
            return Some(Hit {
                found: Found::Limited(rule, rule.parts(entries)),
                counted: rule.stat.as_ref().map(Counted::Rule),
                metadata: None,
            });
        }
        let (target, parts, shared) = self.trees.get(domain)?.find(entries)?;
        let counted = counted(target, &parts, shared, entries);
        let metadata = match target {
            Target::Limited(rule) => rule.metadata.as_deref(),
            Target::Blocked { metadata, .. } => metadata.as_deref(),
            Target::Unlimited { .. } | Target::Nothing => None,
        };
        let found = match target {
            Target::Limited(rule) => Found::Limited(rule, parts),
            Target::Unlimited { replaces } => Found::Unlimited(replaces),
            Target::Blocked {
                unit,
                shadow,
                own_shadow,
                quota_mode,
                name,
                replaces,
                ..
            } => Found::Blocked {
                unit: *unit,
                shadow: *shadow,
                own_shadow: *own_shadow,
                quota_mode: *quota_mode,
                name,
                replaces,
            },
            Target::Nothing => return None,
        };
        Some(Hit {
            found,
            counted,
            metadata,
        })
    }
}

/// How a descriptor whose `entries` matched `target` of an imported tree, with these key
/// `parts` (`shared`: one of them a `share_threshold` wildcard's pattern), counts in the
/// reference's statistics (`None`: not counted).
fn counted<'a>(
    target: &'a Target,
    parts: &[(&'a str, &'a str)],
    shared: bool,
    entries: &'a [Entry],
) -> Option<Counted<'a>> {
    let stat = match target {
        Target::Limited(rule) => rule.stat.as_ref()?,
        Target::Blocked { stat, .. } => stat,
        Target::Unlimited { .. } | Target::Nothing => return None,
    };
    Some(match stat {
        // Each level labelled by the value its key takes: the request's, or the
        // pattern of a `share_threshold` wildcard (as the reference labels it).
        StatKey::Detailed(base) => {
            Counted::Detailed(base, parts.iter().map(|&(_, v)| v).collect(), shared)
        }
        // `value_to_metric`: the request's `key_value` where the level takes it.
        StatKey::Valued(base, template) => Counted::Valued(
            base,
            template
                .iter()
                .zip(entries)
                .map(|(fixed, e)| match fixed {
                    Some(level) => level.to_string(),
                    None => level(&e.key, Some(&e.value)),
                })
                .collect(),
        ),
        StatKey::Fixed(..) => Counted::Rule(stat),
    })
}

impl<St> fmt::Debug for Snapshot<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("limiter", &self.limiter)
            .field("domains", &self.domains)
            .field("trees", &self.trees)
            .field("response_headers", &self.response_headers)
            .field("limit_headers", &self.limit_headers)
            .field("overrides", &self.overrides)
            .field("shadow", &self.shadow)
            .field("caps", &self.caps)
            .field("clock", &self.clock)
            .field("needs_domain", &self.needs_domain)
            .field("near_ratio", &self.near_ratio)
            .field("dynamic_metadata", &self.dynamic_metadata)
            .finish()
    }
}
