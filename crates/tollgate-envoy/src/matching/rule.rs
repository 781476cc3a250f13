//! [`Rule`]: one compiled rule, `[[envoy.rules]]` or imported, and how a descriptor matches
//! it.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::google::protobuf::Struct;
use tollgate::{Algorithm, Limit, Quota};

use crate::Unit;
use crate::metrics::StatKey;

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
    /// The limit's quota, what `current_limit` shows.
    pub(crate) quota: Quota,
    /// Whether the limit is a fixed window: its count is in units and its decision shows it
    /// (`limit - remaining`), which is what answers each of several descriptors on one
    /// counter at its own rate (`decide/rates.rs`).
    pub(crate) fixed_window: bool,
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
            quota: *limit.quota(),
            fixed_window: limit.algorithm() == Algorithm::FixedWindow,
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
    pub(super) key: Box<str>,
    pub(super) value: Option<Box<str>>,
    pub(crate) part: Option<Box<str>>,
}

impl Rule {
    pub(super) fn matches(&self, entries: &[Entry]) -> bool {
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
