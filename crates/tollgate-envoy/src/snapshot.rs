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
use envoy_types::pb::google::protobuf::Struct;
use tollgate::{
    Algorithm, Clock, Limit, Limiter, OnStoreError, Store, SystemClock, Timestamp, validate_name,
};
use tonic::Status;

use crate::caps::DescriptorCaps;
use crate::config::Refusals;
use crate::limit_headers::LimitHeaders;
use crate::overrides::{Override, Overrides};
use crate::reference_metrics::{Counted, Stat, StatKey, level};
use crate::tree::{Level, Target};
use crate::{EnvoyRules, RulesError, Unit};

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

/// What a descriptor matched.
#[derive(Debug)]
pub(crate) enum Found<'a> {
    /// A limit decides it, keyed by these parts.
    Limited(&'a Rule, Vec<(&'a str, &'a str)>),
    /// An imported `unlimited` entry.
    Unlimited,
    /// An imported entry of 0 requests per unit.
    Blocked {
        /// Its unit.
        unit: Unit,
        /// Whether it is in shadow mode (its own or global).
        shadow: bool,
        /// Whether it is in shadow mode of its own (`shadow_mode: true`).
        own_shadow: bool,
        /// Whether it is a quota descriptor of its own (`quota_mode: true`).
        quota_mode: bool,
        /// Its `current_limit.name`.
        name: &'a Arc<str>,
    },
}

/// One compiled rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) entries: Box<[RuleEntry]>,
    pub(crate) limit: Arc<str>,
    /// Whether its descriptors are shadow entries (its own shadow mode, or global).
    pub(crate) shadow: bool,
    /// Whether it is in shadow mode of its own (a shadow rule or limit, `shadow_mode: true`),
    /// not only by `[envoy] shadow`.
    pub(crate) own_shadow: bool,
    /// Whether its descriptors are quota descriptors of their own (`quota_mode`; global
    /// quota mode is the snapshot's).
    pub(crate) quota_mode: bool,
    /// What `current_limit.name` shows.
    pub(crate) shown: Arc<str>,
    /// The largest cost the limit can ever admit.
    pub(crate) capacity: u64,
    /// Whether the limit takes every key part it is given (no fixed key shape).
    pub(crate) open_key: bool,
    /// An imported limit's `rate_limit.name`, what `replaces` refers to.
    pub(crate) name: Option<Arc<str>>,
    /// An imported limit's `replaces`: names dropped when both match one request.
    pub(crate) replaces: Box<[Arc<str>]>,
    /// An imported limit's YAML unit, reported as is.
    pub(crate) unit: Option<Unit>,
    /// A limit made at run time (a request's limit override), not the limiter's.
    pub(crate) own: Option<Arc<Limit>>,
    /// The reference's statistics key (none for an override's rule).
    pub(crate) stat: Option<StatKey>,
    /// An imported limit's YAML `metadata` (`[envoy] response_dynamic_metadata`).
    pub(crate) metadata: Option<Arc<Struct>>,
}

impl Rule {
    /// A rule deciding with `limit`, in shadow mode of its own when `shadow` or the limit is
    /// (entries are the caller's; `current_limit.name` shows the limit's name).
    pub(crate) fn for_limit(limit: &Limit, shadow: bool) -> Rule {
        Rule {
            entries: Box::new([]),
            limit: limit.name_arc().clone(),
            shadow: shadow || limit.is_shadow(),
            own_shadow: shadow || limit.is_shadow(),
            quota_mode: false,
            shown: limit.name_arc().clone(),
            capacity: limit.capacity(),
            open_key: limit.key_parts().is_none(),
            name: None,
            replaces: Box::new([]),
            unit: None,
            own: None,
            stat: None,
            metadata: None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct RuleEntry {
    key: Box<str>,
    value: Option<Box<str>>,
    pub(crate) part: Option<Box<str>>,
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
        let mut domains: HashMap<Box<str>, Vec<Rule>> = HashMap::new();
        for (i, rule) in config.rules.iter().enumerate() {
            let at = format!("envoy.rules[{i}]");
            if rule.domain.is_empty() {
                return Err(RulesError::new(format!("{at}.domain"), "must not be empty"));
            }
            if rule.descriptor.is_empty() {
                return Err(RulesError::new(
                    format!("{at}.descriptor"),
                    "must have at least one entry",
                ));
            }
            if rule.descriptor.len() > caps.entries() {
                return Err(RulesError::new(
                    format!("{at}.descriptor"),
                    format!(
                        "has {} entries, more than envoy.max_entries ({}): it could never match",
                        rule.descriptor.len(),
                        caps.entries()
                    ),
                ));
            }
            let limit = limiter.get(&rule.limit).ok_or_else(|| {
                RulesError::new(
                    format!("{at}.limit"),
                    format!("unknown limit {:?}", rule.limit),
                )
            })?;
            if config.refusals == Refusals::Charged {
                counts_refusals(&format!("{at}.limit"), limit)?;
            }
            let mut entries = Vec::with_capacity(rule.descriptor.len());
            let mut parts: Vec<&str> = Vec::new();
            for (j, entry) in rule.descriptor.iter().enumerate() {
                let at = format!("{at}.descriptor[{j}]");
                if entry.key.is_empty() {
                    return Err(RulesError::new(format!("{at}.key"), "must not be empty"));
                }
                if let Some(part) = &entry.part {
                    check_part(&format!("{at}.part"), part, limit, &parts)?;
                    parts.push(part);
                }
                entries.push(RuleEntry {
                    key: entry.key.as_str().into(),
                    value: entry.value.as_deref().map(Into::into),
                    part: entry.part.as_deref().map(Into::into),
                });
            }
            if let Some(needed) = limit.key_parts()
                && let Some(missing) = needed.iter().find(|n| !parts.contains(&&***n))
            {
                return Err(RulesError::new(
                    format!("{at}.descriptor"),
                    format!(
                        "limit {:?} is keyed by {missing:?}, which no entry's `part` gives",
                        limit.name()
                    ),
                ));
            }
            domains
                .entry(rule.domain.as_str().into())
                .or_default()
                .push(Rule {
                    entries: entries.into(),
                    stat: Some(StatKey::fixed(Stat::new(
                        &rule.domain,
                        &rule
                            .descriptor
                            .iter()
                            .map(|e| level(&e.key, e.value.as_deref()))
                            .collect::<Vec<_>>(),
                    ))),
                    shadow: rule.shadow || limit.is_shadow() || config.shadow,
                    quota_mode: rule.quota_mode,
                    ..Rule::for_limit(limit, rule.shadow)
                });
        }
        let near_ratio = near_limit_ratio(config.near_limit_ratio)?;
        let mut trees: HashMap<Box<str>, Level> = HashMap::new();
        for domain in &config.imported.domains {
            let tree = Level::compile(domain, &limiter, config.shadow, config.current_limit_name)?;
            // Several files of one domain (`merge_domain_config`): one tree, in file order.
            match trees.entry(domain.name.as_str().into()) {
                std::collections::hash_map::Entry::Occupied(mut merged) => {
                    merged.get_mut().extend(tree);
                }
                std::collections::hash_map::Entry::Vacant(at) => {
                    at.insert(tree);
                }
            }
        }
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

    /// The YAML `metadata` of the entry that decides `descriptor` of `domain`, as the
    /// reference attaches it to the matched limit: `None` for a `[[envoy.rules]]` rule, a
    /// limit override (in a configured domain), an `unlimited` entry, or no match.
    pub(crate) fn metadata_of<'a>(
        &'a self,
        domain: &str,
        descriptor: &'a RateLimitDescriptor,
    ) -> Option<&'a Struct> {
        if descriptor.limit.is_some() && self.knows(domain) {
            return None;
        }
        if self
            .domains
            .get(domain)
            .is_some_and(|rules| rules.iter().any(|rule| rule.matches(&descriptor.entries)))
        {
            return None;
        }
        match self.trees.get(domain)?.find(&descriptor.entries)?.0 {
            Target::Limited(rule) => rule.metadata.as_deref(),
            Target::Blocked { metadata, .. } => metadata.as_deref(),
            Target::Unlimited | Target::Nothing => None,
        }
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
    /// `INVALID_ARGUMENT` for an invalid override (see `overrides.rs`).
    pub(crate) fn overrides(
        &self,
        request: &RateLimitRequest,
    ) -> Result<Vec<Option<Arc<Override>>>, Status> {
        if !self.knows(&request.domain) {
            return Ok(vec![None; request.descriptors.len()]);
        }
        self.overrides.resolve(request)
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
        match self.find(domain, &entries)? {
            Found::Limited(rule, parts) => Some((
                rule.limit.clone(),
                parts
                    .into_iter()
                    .map(|(p, v)| (p.to_owned(), v.to_owned()))
                    .collect(),
            )),
            Found::Unlimited | Found::Blocked { .. } => None,
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

    /// What decides `descriptor`: its limit override when it has one, else [`Snapshot::find`].
    pub(crate) fn find_for<'a>(
        &'a self,
        domain: &'a str,
        descriptor: &'a RateLimitDescriptor,
        limit_override: Option<&'a Override>,
    ) -> Option<Found<'a>> {
        match limit_override {
            Some(o) => Some(Found::Limited(&o.rule, o.parts(domain, descriptor))),
            None => self.find(domain, &descriptor.entries),
        }
    }

    /// How each descriptor of `request` is counted in the reference's statistics (`None`:
    /// matched nothing).
    pub(crate) fn counted<'a>(&'a self, request: &'a RateLimitRequest) -> Vec<Option<Counted<'a>>> {
        let known = self.knows(&request.domain);
        request
            .descriptors
            .iter()
            .map(|d| {
                if d.is_negative_hits {
                    return None;
                }
                if known && d.limit.is_some() {
                    return Some(Counted::Override);
                }
                if let Some(rule) = self
                    .domains
                    .get(request.domain.as_str())
                    .and_then(|rules| rules.iter().find(|rule| rule.matches(&d.entries)))
                {
                    return rule.stat.as_ref().map(Counted::Rule);
                }
                let (target, parts) = self.trees.get(request.domain.as_str())?.find(&d.entries)?;
                let stat = match target {
                    Target::Limited(rule) => rule.stat.as_ref()?,
                    Target::Blocked { stat, .. } => stat,
                    Target::Unlimited | Target::Nothing => return None,
                };
                Some(match stat {
                    // Each level labelled by the value its key takes: the request's, or the
                    // pattern of a `share_threshold` wildcard (as the reference labels it).
                    StatKey::Detailed(base) => {
                        Counted::Detailed(base, parts.into_iter().map(|(_, v)| v).collect())
                    }
                    // `value_to_metric`: the request's `key_value` where the level takes it.
                    StatKey::Valued(base, template) => Counted::Valued(
                        base,
                        template
                            .iter()
                            .zip(&d.entries)
                            .map(|(fixed, e)| match fixed {
                                Some(level) => level.to_string(),
                                None => level(&e.key, Some(&e.value)),
                            })
                            .collect(),
                    ),
                    StatKey::Fixed(..) => Counted::Rule(stat),
                })
            })
            .collect()
    }

    /// The first rule of `domain` whose descriptor shape `entries` has, else the imported
    /// tree's match.
    pub(crate) fn find<'a>(&'a self, domain: &str, entries: &'a [Entry]) -> Option<Found<'a>> {
        if let Some(rule) = self
            .domains
            .get(domain)
            .and_then(|rules| rules.iter().find(|rule| rule.matches(entries)))
        {
            return Some(Found::Limited(rule, rule.parts(entries)));
        }
        let (target, parts) = self.trees.get(domain)?.find(entries)?;
        Some(match target {
            Target::Limited(rule) => Found::Limited(rule, parts),
            Target::Unlimited => Found::Unlimited,
            Target::Blocked {
                unit,
                shadow,
                own_shadow,
                quota_mode,
                name,
                ..
            } => Found::Blocked {
                unit: *unit,
                shadow: *shadow,
                own_shadow: *own_shadow,
                quota_mode: *quota_mode,
                name,
            },
            Target::Nothing => return None,
        })
    }
}

impl Rule {
    fn matches(&self, entries: &[Entry]) -> bool {
        self.entries.len() == entries.len()
            && self.entries.iter().zip(entries).all(|(want, got)| {
                *want.key == got.key && want.value.as_deref().is_none_or(|v| v == got.value)
            })
    }

    /// The key parts a matching descriptor gives, as `(part name, value)`.
    pub(crate) fn parts<'a>(&'a self, entries: &'a [Entry]) -> Vec<(&'a str, &'a str)> {
        self.entries
            .iter()
            .zip(entries)
            .filter_map(|(rule, got)| rule.part.as_deref().map(|p| (p, got.value.as_str())))
            .collect()
    }
}

/// `[envoy] near_limit_ratio`: 0 < r ≤ 1, default [`crate::NEAR_LIMIT_RATIO`]; kept in single
/// precision, as the reference's `float32`.
fn near_limit_ratio(configured: Option<f64>) -> Result<f32, RulesError> {
    let ratio = configured.unwrap_or(crate::NEAR_LIMIT_RATIO);
    if !(ratio > 0.0 && ratio <= 1.0) {
        return Err(RulesError::new(
            "envoy.near_limit_ratio",
            format!("{ratio} is not a share of the limit: it must be above 0 and at most 1"),
        ));
    }
    #[allow(clippy::cast_possible_truncation)]
    Ok(ratio as f32)
}

/// A key part name: valid, not given twice, and one the limit is keyed by.
fn check_part(field: &str, part: &str, limit: &Limit, seen: &[&str]) -> Result<(), RulesError> {
    validate_name("part", part).map_err(|e| {
        RulesError::new(
            field,
            format!("{part:?} is not a key part name (1-64 of A-Z a-z 0-9 _ - .): {e}"),
        )
    })?;
    if seen.contains(&part) {
        return Err(RulesError::new(field, format!("{part:?} is given twice")));
    }
    if let Some(keyed_by) = limit.key_parts()
        && !keyed_by.iter().any(|k| &**k == part)
    {
        return Err(RulesError::new(
            field,
            format!("limit {:?} is not keyed by {part:?}", limit.name()),
        ));
    }
    Ok(())
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

/// Whether `limit` can count refusals as the reference does (`[envoy] refusals =
/// "charged"`): an exact fixed window.
fn counts_refusals(at: &str, limit: &Limit) -> Result<(), RulesError> {
    if limit.algorithm() != Algorithm::FixedWindow || limit.lease_mode().is_some() {
        return Err(RulesError::new(
            at,
            format!(
                "limit {:?} ({}{}) cannot count refusals: envoy.refusals = \"charged\" counts as the reference's fixed windows; use a fixed_window limit in exact mode, or refusals = \"free\"",
                limit.name(),
                limit.algorithm(),
                if limit.lease_mode().is_some() {
                    ", lease mode"
                } else {
                    ""
                },
            ),
        ));
    }
    Ok(())
}
