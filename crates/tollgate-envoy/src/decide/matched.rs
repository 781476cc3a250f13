//! [`Matched`]: the one pass over a request's descriptors, each to its rule (or to a fixed
//! answer), with what the reference's quota rules need to know before any store call.

use std::collections::HashSet;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::Struct;
use tollgate::Store;

use super::answer::Fixed;
use super::items::{Item, descriptor_cost};
use super::{Group, window_reset};
use crate::Snapshot;
use crate::matching::{Found, Override};
use crate::metrics::Counted;

/// What the descriptors of a request matched.
pub(super) struct Matched<'a, 'o> {
    /// The descriptors decided by a limit, in order, replaced ones dropped.
    pub(super) found: Vec<Item<'o>>,
    /// The descriptors answered without a limiter decision, in slot order.
    pub(super) fixed: Vec<(usize, Fixed)>,
    /// One per descriptor: whether it is a quota descriptor.
    pub(super) quota: Vec<bool>,
    /// One per descriptor: how it counts in the reference's statistics.
    pub(super) counted: Vec<Option<Counted<'a>>>,
    /// One per descriptor: the YAML `metadata` of the entry that decides it; empty (no
    /// allocation) unless responses carry dynamic metadata.
    pub(super) metadata: Vec<Option<&'a Struct>>,
    /// The quota descriptors already decided outside the store calls.
    pub(super) group: Group,
}

impl<'a: 'o, 'o> Matched<'a, 'o> {
    /// Matches every descriptor of `request` (`overrides`: each one's `limit` override, if
    /// any, as `Snapshot::overrides` built them).
    pub(super) fn collect<St: Store>(
        snapshot: &'a Snapshot<St>,
        request: &'a RateLimitRequest,
        overrides: &'o [Option<Arc<Override>>],
    ) -> Self {
        let n = request.descriptors.len();
        let default_cost = u64::from(request.hits_addend.max(1));
        let global_quota = snapshot.global_quota_mode();
        let mut matched = Matched {
            found: Vec::new(),
            fixed: Vec::new(),
            quota: vec![false; n],
            counted: Vec::with_capacity(n),
            metadata: if snapshot.dynamic_metadata() {
                vec![None; n]
            } else {
                Vec::new()
            },
            group: Group::default(),
        };
        matched.counted.resize_with(n, || None);
        // Every matched limit's `replaces`, an `unlimited` or 0-per-unit one's included: the
        // reference's `constructLimitsToCheck` records them before it sets the unlimited
        // ones aside, then drops every matched limit they name.
        let mut replacing: HashSet<&'o str> = HashSet::new();
        let counting = snapshot.charges_refusals();
        for (slot, d) in request.descriptors.iter().enumerate() {
            if d.is_negative_hits {
                continue;
            }
            let Some(hit) = snapshot.find_for(&request.domain, d, overrides[slot].as_deref())
            else {
                continue;
            };
            matched.counted[slot] = hit.counted;
            if let Some(metadata) = matched.metadata.get_mut(slot) {
                *metadata = hit.metadata;
            }
            match hit.found {
                Found::Unlimited(replaces) => {
                    replacing.extend(replaces.iter().map(|r| &**r));
                    matched.fixed.push((slot, Fixed::Unlimited));
                }
                Found::Blocked {
                    unit,
                    shadow,
                    own_shadow,
                    quota_mode,
                    name,
                    replaces,
                } => {
                    replacing.extend(replaces.iter().map(|r| &**r));
                    matched.quota[slot] = quota_mode || global_quota;
                    let reset = window_reset(unit, snapshot.now());
                    let name = name.clone();
                    // Check only with counted refusals: a count of 0 is not past a limit
                    // of 0, the reference's answer (OK, nothing left).
                    let over = !(counting && descriptor_cost(d, default_cost) == 0);
                    let blocked = Fixed::Blocked {
                        unit,
                        shadow,
                        own_shadow,
                        over,
                        name,
                        reset,
                    };
                    matched.fixed.push((slot, blocked));
                }
                Found::Limited(rule, parts) => {
                    replacing.extend(rule.replaces.iter().map(|r| &**r));
                    matched.quota[slot] = rule.quota_mode || global_quota;
                    matched.found.push(Item::new(
                        slot,
                        rule,
                        parts,
                        descriptor_cost(d, default_cost),
                        matched.quota[slot],
                    ));
                }
            }
        }
        if !replacing.is_empty() {
            matched.drop_replaced(&replacing);
        }
        // The 0-per-unit quota descriptors left: members of the group decided outside the
        // calls, passing when shadow (or not over).
        for (slot, f) in &matched.fixed {
            if let Fixed::Blocked { shadow, over, .. } = f
                && matched.quota[*slot]
            {
                matched.group.outside(*shadow || !*over);
            }
        }
        if global_quota {
            matched.limitless_are_quota();
        }
        // Shadow quota descriptors always answer OK: passing members of the group.
        if matched.found.iter().any(|i| i.quota && i.rule.shadow) {
            matched.group.outside(true);
        }
        matched
    }

    /// Drops the descriptors whose limit a matched limit `replaces` (by its YAML name; one
    /// without a name is never replaced): counted and 0-per-unit ones, not `unlimited` ones,
    /// which the reference has already set aside. They are answered as unmatched (no
    /// statistics, no metadata), and are quota descriptors only by global quota mode.
    fn drop_replaced(&mut self, replacing: &HashSet<&str>) {
        let named = |name: &str| !name.is_empty() && replacing.contains(name);
        let mut dropped = Vec::new();
        self.found.retain(|item| {
            let replaced = item.rule.name.as_deref().is_some_and(named);
            if replaced {
                dropped.extend_from_slice(&item.slots);
            }
            !replaced
        });
        self.fixed.retain(|(slot, f)| {
            let replaced = matches!(f, Fixed::Blocked { name, .. } if named(name));
            if replaced {
                dropped.push(*slot);
            }
            !replaced
        });
        for slot in dropped {
            self.quota[slot] = false;
            self.counted[slot] = None;
            if let Some(metadata) = self.metadata.get_mut(slot) {
                *metadata = None;
            }
        }
    }

    /// Global quota mode: the reference counts a descriptor with no limit (unmatched,
    /// whitelisted, replaced, negative hits) as a quota descriptor that passes; an
    /// `unlimited` one not at all.
    fn limitless_are_quota(&mut self) {
        let mut decided = vec![false; self.quota.len()];
        for item in &self.found {
            decided[item.slots[0]] = true;
        }
        for (slot, f) in &self.fixed {
            decided[*slot] = true;
            if matches!(f, Fixed::Unlimited) {
                self.quota[*slot] = false;
            }
        }
        if decided.iter().any(|d| !d) {
            self.group.outside(true);
        }
        for (slot, d) in decided.iter().enumerate() {
            if !d {
                self.quota[slot] = true;
            }
        }
    }
}
