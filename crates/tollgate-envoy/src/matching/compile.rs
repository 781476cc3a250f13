//! A snapshot's compilation: `[[envoy.rules]]` validated against the limiter's limits, and
//! the imported trees, so that a call never meets an unknown limit or a missing key part.

use std::collections::HashMap;

use tollgate::{Algorithm, Limit, Limiter, Store, validate_name};

use super::rule::{Rule, RuleEntry};
use super::tree::Level;
use crate::config::caps::DescriptorCaps;
use crate::config::{Refusals, RuleConfig};
use crate::metrics::{Stat, StatKey, level};
use crate::{EnvoyRules, RulesError};

/// The `[[envoy.rules]]` of `config`, by domain, each domain's in config order.
pub(super) fn rules<St: Store>(
    config: &EnvoyRules,
    limiter: &Limiter<St>,
    caps: DescriptorCaps,
) -> Result<HashMap<Box<str>, Vec<Rule>>, RulesError> {
    let mut domains: HashMap<Box<str>, Vec<Rule>> = HashMap::new();
    for (i, rule) in config.rules.iter().enumerate() {
        let compiled = compile_rule(&format!("envoy.rules[{i}]"), rule, config, limiter, caps)?;
        domains
            .entry(rule.domain.as_str().into())
            .or_default()
            .push(compiled);
    }
    Ok(domains)
}

/// One `[[envoy.rules]]` entry, `at` its field path.
fn compile_rule<St: Store>(
    at: &str,
    rule: &RuleConfig,
    config: &EnvoyRules,
    limiter: &Limiter<St>,
    caps: DescriptorCaps,
) -> Result<Rule, RulesError> {
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
    Ok(Rule {
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
    })
}

/// The imported trees of `config`, by domain.
pub(super) fn trees<St: Store>(
    config: &EnvoyRules,
    limiter: &Limiter<St>,
) -> Result<HashMap<Box<str>, Level>, RulesError> {
    let mut trees: HashMap<Box<str>, Level> = HashMap::new();
    for domain in &config.imported.domains {
        let tree = Level::compile(domain, limiter, config.shadow, config.current_limit_name)?;
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
    Ok(trees)
}

/// `[envoy] near_limit_ratio`: 0 < r ≤ 1, default [`crate::NEAR_LIMIT_RATIO`]; kept in single
/// precision, as the reference's `float32`.
pub(super) fn near_limit_ratio(configured: Option<f64>) -> Result<f32, RulesError> {
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
