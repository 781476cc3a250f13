//! The reference service's matching, over the imported descriptor trees.
//!
//! A request's descriptor is walked down its domain's tree one entry per level, as the
//! reference does: at each level the entry's key and value are looked up exactly first, then
//! against the wildcard values of that key (file order; each `*` matches any run of
//! characters), then the key alone (the key-only default). The descriptor matches only if the
//! node reached by its **last** entry has a `rate_limit`: a shorter or longer descriptor, or a
//! node with neither `rate_limit` nor children (a whitelist entry), matches nothing.
//!
//! The counter key is the value of every entry down to the match (the reference's cache key),
//! except that a `share_threshold` wildcard contributes its pattern, so all values matching it
//! share one counter.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::google::protobuf::Struct;
use tollgate::{Limiter, Store};

use super::rule::Rule;
use crate::metrics::{Stat, StatKey, level as stat_level};
use crate::yaml::imported::{Descriptor, Domain, part_name};
use crate::{CurrentLimitName, RulesError, Unit};

/// One level of a tree.
#[derive(Debug, Default)]
pub(crate) struct Level {
    exact: HashMap<(Box<str>, Box<str>), Node>,
    wildcards: Vec<Wildcard>,
    default: HashMap<Box<str>, Node>,
}

/// A wildcard entry: its key, its value split at each `*`, its node.
#[derive(Debug)]
struct Wildcard {
    key: Box<str>,
    pieces: Box<[Box<str>]>,
    node: Node,
}

#[derive(Debug)]
struct Node {
    /// This level's key part name (`d<depth>`).
    part: Box<str>,
    /// The value this entry gives the key instead of the request's (a shared wildcard).
    shared: Option<Box<str>>,
    target: Target,
    children: Level,
}

/// What [`Level::find`] finds: the target, the key parts (name, value) it is counted by,
/// and whether a `share_threshold` wildcard gave a level its pattern.
pub(crate) type TreeMatch<'a> = (&'a Target, Vec<(&'a str, &'a str)>, bool);

/// What a matching descriptor gets.
#[derive(Debug)]
pub(crate) enum Target {
    /// No `rate_limit` here: matches nothing.
    Nothing,
    /// Decided by a generated limit.
    Limited(Rule),
    /// `unlimited: true`: OK, never counted.
    Unlimited {
        /// Its `replaces`: the reference drops the limits they name though it decides
        /// nothing itself.
        replaces: Box<[Arc<str>]>,
    },
    /// `requests_per_unit: 0`: always over limit (unless shadow), never counted.
    Blocked {
        /// Its YAML `metadata`, for the response's dynamic metadata when it passes (shadow).
        metadata: Option<Arc<Struct>>,
        /// The limit's unit, for the answer.
        unit: Unit,
        /// `shadow_mode`, or global shadow mode.
        shadow: bool,
        /// `shadow_mode`.
        own_shadow: bool,
        /// `quota_mode`.
        quota_mode: bool,
        /// `current_limit.name`: `rate_limit.name`, empty when none (also what another
        /// entry's `replaces` names it by).
        name: Arc<str>,
        /// Its `replaces`.
        replaces: Box<[Arc<str>]>,
        /// Its statistics key.
        stat: StatKey,
    },
}

impl Level {
    /// Compiles `domain`'s tree against the generated limits of `limiter`.
    pub(crate) fn compile<St: Store>(
        domain: &Domain,
        limiter: &Limiter<St>,
        global_shadow: bool,
        names: CurrentLimitName,
    ) -> Result<Level, RulesError> {
        let how = How {
            limiter,
            global_shadow,
            names,
        };
        Level::build(domain, &domain.descriptors, &[], &[], &how)
    }

    /// Adds the top-level entries of `other`, a tree of the same domain from another file
    /// (`[envoy] merge_domain_config`; the loader refused the same key and value in both).
    /// Wildcards keep file order: this tree's first.
    pub(crate) fn extend(&mut self, other: Level) {
        self.exact.extend(other.exact);
        self.wildcards.extend(other.wildcards);
        self.default.extend(other.default);
    }

    /// `above` is the statistics key of the levels above (`key` or `key_value` as written),
    /// `valued` whether each of them takes the request's value instead (`value_to_metric`).
    fn build<St: Store>(
        domain: &Domain,
        list: &[Descriptor],
        above: &[String],
        valued: &[bool],
        how: &How<'_, St>,
    ) -> Result<Level, RulesError> {
        let depth = above.len();
        let mut level = Level::default();
        for d in list {
            // The reference's statistics key: `key` or `key_value` of every level down here.
            let mut levels = above.to_vec();
            levels.push(stat_level(&d.key, d.value.as_deref()));
            // `value_to_metric`: this level shows the request's value where the config gives
            // none, or only a pattern of values that do not share a counter (the reference's).
            let wildcard = d.value.as_deref().is_some_and(|v| v.contains('*'));
            let mut valued = valued.to_vec();
            valued
                .push(d.value_to_metric && (d.value.is_none() || (wildcard && !d.share_threshold)));
            let stat = stat_key(Stat::new(&domain.name, &levels), d, &levels, &valued);
            let target = target(domain, d, stat, how)?;
            let wildcard = d.value.as_deref().filter(|v| v.contains('*'));
            let node = Node {
                part: part_name(depth).into(),
                shared: wildcard.filter(|_| d.share_threshold).map(Into::into),
                target,
                children: Level::build(domain, &d.descriptors, &levels, &valued, how)?,
            };
            let key: Box<str> = d.key.as_str().into();
            match (&d.value, wildcard) {
                (_, Some(pattern)) => {
                    let pieces = pattern.split('*').map(Into::into).collect();
                    level.wildcards.push(Wildcard { key, pieces, node });
                }
                (Some(value), None) => {
                    level.exact.insert((key, value.as_str().into()), node);
                }
                (None, None) => {
                    level.default.insert(key, node);
                }
            }
        }
        Ok(level)
    }

    /// The target of `entries`, the key parts it is counted by, and whether a level was
    /// matched by a `share_threshold` wildcard (whose pattern is then that level's value).
    pub(crate) fn find<'a>(&'a self, entries: &'a [Entry]) -> Option<TreeMatch<'a>> {
        let mut level = self;
        let mut parts = Vec::with_capacity(entries.len());
        let mut shared = false;
        for (i, entry) in entries.iter().enumerate() {
            let node = level.lookup(entry)?;
            shared |= node.shared.is_some();
            parts.push((&*node.part, node.shared.as_deref().unwrap_or(&entry.value)));
            if i + 1 == entries.len() {
                return match node.target {
                    Target::Nothing => None,
                    ref target => Some((target, parts, shared)),
                };
            }
            level = &node.children;
        }
        None
    }

    fn lookup(&self, entry: &Entry) -> Option<&Node> {
        let exact = (
            Box::from(entry.key.as_str()),
            Box::from(entry.value.as_str()),
        );
        self.exact
            .get(&exact)
            .or_else(|| {
                self.wildcards
                    .iter()
                    .find(|w| *w.key == entry.key && glob(&w.pieces, &entry.value))
                    .map(|w| &w.node)
            })
            .or_else(|| self.default.get(entry.key.as_str()))
    }
}

/// What a tree is compiled with.
struct How<'a, St> {
    limiter: &'a Limiter<St>,
    global_shadow: bool,
    names: CurrentLimitName,
}

/// Whether `value` matches the pattern split at its `*`s.
fn glob(pieces: &[Box<str>], value: &str) -> bool {
    let [first, middle @ .., last] = pieces else {
        return pieces.first().is_some_and(|p| **p == *value);
    };
    let Some(mut rest) = value.strip_prefix(&**first) else {
        return false;
    };
    for piece in middle {
        match rest.find(&**piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(&**last)
}

/// The statistics key of descriptor `d` (`stat`, its levels' keys `levels`, and for each
/// whether the request's value stands in for it, `valued`): `detailed_metric` wins over
/// `value_to_metric`, as the reference's.
fn stat_key(stat: Stat, d: &Descriptor, levels: &[String], valued: &[bool]) -> StatKey {
    if d.detailed_metric {
        StatKey::Detailed(stat)
    } else if valued.contains(&true) {
        let template = levels
            .iter()
            .zip(valued)
            .map(|(level, from_request)| (!from_request).then(|| level.as_str().into()))
            .collect();
        StatKey::Valued(stat, template)
    } else {
        StatKey::fixed(stat)
    }
}

/// What descriptor `d` of `domain` decides: nothing, unlimited, its generated limit (which
/// the limiter of `how` must hold), or a block list (0 per unit).
fn target<St: Store>(
    domain: &Domain,
    d: &Descriptor,
    stat: StatKey,
    how: &How<'_, St>,
) -> Result<Target, RulesError> {
    let shadow = d.shadow_mode || how.global_shadow;
    // `current_limit.name`: the YAML name, as the reference sends it.
    let yaml_name: Arc<str> = d
        .rate_limit
        .as_ref()
        .and_then(|rl| rl.name.as_deref())
        .unwrap_or("")
        .into();
    let metadata = d
        .metadata
        .as_ref()
        .map(|m| Arc::new(crate::reply::dynamic_metadata::to_struct(m)));
    let Some(rl) = &d.rate_limit else {
        return Ok(Target::Nothing);
    };
    let replaces: Box<[Arc<str>]> = rl.replaces.iter().map(|r| Arc::from(r.as_str())).collect();
    if rl.unlimited {
        return Ok(Target::Unlimited { replaces });
    }
    Ok(match (&rl.limit, rl.unit) {
        (Some(name), _) => {
            let limit = how.limiter.get(name).ok_or_else(|| {
                RulesError::new(
                    format!("{}: {}.rate_limit", domain.file.display(), d.path),
                    format!("generated limit {name:?} is not loaded"),
                )
            })?;
            let mut rule = Rule::for_limit(limit, d.shadow_mode);
            rule.shadow = shadow;
            rule.quota_mode = d.quota_mode;
            if how.names == CurrentLimitName::Rule {
                rule.shown = yaml_name;
            }
            rule.name = rl.name.as_deref().map(Arc::from);
            rule.replaces = replaces;
            rule.unit = rl.unit;
            rule.stat = Some(stat);
            rule.metadata = metadata;
            Target::Limited(rule)
        }
        (None, Some(unit)) => Target::Blocked {
            metadata,
            unit,
            shadow,
            own_shadow: d.shadow_mode,
            quota_mode: d.quota_mode,
            name: yaml_name,
            replaces,
            stat,
        },
        (None, None) => Target::Nothing,
    })
}

#[cfg(test)]
mod tests {
    use super::glob;

    fn g(pattern: &str, value: &str) -> bool {
        let pieces: Vec<Box<str>> = pattern.split('*').map(Into::into).collect();
        glob(&pieces, value)
    }

    /// Trailing, middle and multiple wildcards match as the reference's README describes.
    #[test]
    fn wildcards() {
        assert!(g("value*", "value1"));
        assert!(g("value*", "value"));
        assert!(!g("value*", "valu"));
        assert!(g("/api/*/action", "/api/123/action"));
        assert!(!g("/api/*/action", "/api/123/other"));
        assert!(g("/api/*/resource/*/action", "/api/v1/resource/9/action"));
        assert!(!g("a*a", "a"));
        assert!(g("plain", "plain"));
    }
}
