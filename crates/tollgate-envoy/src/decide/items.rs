//! [`Item`]: one matched descriptor (or several naming the same counter), and how items are
//! merged and costed.

use std::collections::hash_map::{self, HashMap};
use std::sync::Arc;

use tollgate::Limit;

use crate::matching::Rule;

/// One matched descriptor.
#[derive(Debug, Clone)]
pub(super) struct Item<'a> {
    /// The descriptors (indexes) this item decides: several when they name the same limit
    /// and key, which are then one check of their summed cost.
    pub(super) slots: Vec<usize>,
    /// One per slot: the rule that matched the descriptor and its cost. The rules of one
    /// item name one counter, but a `limit` override counts on it at its own rate.
    pub(super) each: Vec<(&'a Rule, u64)>,
    /// The first descriptor's rule, which decides the item unless `limit` is set.
    pub(super) rule: &'a Rule,
    pub(super) parts: Vec<(&'a str, &'a str)>,
    /// The hits to charge (the sum of `each`'s); 0 for check-only descriptors (`hits_addend`
    /// 0).
    pub(super) cost: u64,
    /// A quota descriptor (its own `quota_mode` or global quota mode).
    pub(super) quota: bool,
    /// The largest cost the item can ever admit: its rule's capacity, or what its
    /// descriptors' rates leave for their sum (`rates.rs`).
    pub(super) capacity: u64,
    /// The limit the item is decided at when its descriptors count at different rates, or
    /// when it is charged though too costly (`rates.rs`); else its rule's.
    pub(super) limit: Option<Arc<Limit>>,
    /// Too costly to ever pass, charged anyway at a wide `limit` on its counter (counted
    /// refusals, `rates::charge_anyway`): its descriptors are answered at their own rates,
    /// and its decision in the call refuses nothing.
    pub(super) never: bool,
}

impl<'a> Item<'a> {
    /// The item of one descriptor, `slot`, matched by `rule` with `parts`.
    pub(super) fn new(
        slot: usize,
        rule: &'a Rule,
        parts: Vec<(&'a str, &'a str)>,
        cost: u64,
        quota: bool,
    ) -> Self {
        Item {
            slots: vec![slot],
            each: vec![(rule, cost)],
            rule,
            parts,
            cost,
            quota,
            capacity: rule.capacity,
            limit: None,
            never: false,
        }
    }

    /// Whether the item is too costly to ever pass.
    pub(super) fn too_costly(&self) -> bool {
        self.cost > self.capacity
    }
}

/// Descriptors that name the same limit (same rule kind: enforced or shadow) and the same
/// key count the same units twice: they become one item of their summed cost, so that a
/// request cannot pass each check alone and fail their sum. Items keep the order of their
/// first descriptor. Linear: one map lookup per item.
pub(super) fn merge_same_key(found: Vec<Item<'_>>) -> Vec<Item<'_>> {
    let mut items: Vec<Item<'_>> = Vec::with_capacity(found.len());
    let mut seen: HashMap<SameKey<'_>, usize> = HashMap::with_capacity(found.len());
    for item in found {
        match seen.entry(same_key(&item)) {
            hash_map::Entry::Occupied(at) => {
                let same = &mut items[*at.get()];
                same.cost = same.cost.saturating_add(item.cost);
                same.slots.extend(item.slots);
                same.each.extend(item.each);
            }
            hash_map::Entry::Vacant(at) => {
                at.insert(items.len());
                items.push(item);
            }
        }
    }
    items
}

/// What makes two items one counter: the limit, whether the rule is a shadow rule, and the
/// key parts.
type SameKey<'a> = (&'a str, bool, Vec<(&'a str, &'a str)>);

/// `item`'s [`SameKey`]: its parts in name order, stable (a name given twice keeps its
/// values' order), as the core builds the key of a limit that takes every part it is given;
/// a keyed limit names each part once and follows its own order, whatever the descriptor's.
fn same_key<'a>(item: &Item<'a>) -> SameKey<'a> {
    let mut parts = item.parts.clone();
    parts.sort_by(|a, b| a.0.cmp(b.0));
    (&*item.rule.limit, item.rule.shadow, parts)
}

/// What descriptor `d` costs: its own `hits_addend` when set, 0 included (check only: the
/// reference's "do not increment"), else the request's (`default_cost`, at least 1).
pub(crate) fn descriptor_cost(
    d: &envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
    default_cost: u64,
) -> u64 {
    d.hits_addend.as_ref().map_or(default_cost, |v| v.value)
}

/// The cost an item is decided at: its own, one unit for a check-only item (peeked: is a
/// unit left?), or its limit's capacity for a too costly item (peeked only, to report the
/// limit's state).
pub(super) fn cost(item: &Item<'_>) -> u64 {
    item.cost.clamp(1, item.capacity.max(1))
}

#[cfg(test)]
mod tests {
    use tollgate::{Algorithm, Limit, Quota};

    use super::*;

    fn rule(name: &str, keyed_by: Option<&[&str]>, shadow: bool) -> Rule {
        let limit = Limit::new(
            name,
            Algorithm::FixedWindow,
            Quota::per_second(10).expect("quota"),
        )
        .expect("limit");
        let limit = match keyed_by {
            Some(parts) => limit.keyed_by(parts.iter().copied()).expect("keyed"),
            None => limit,
        };
        Rule::for_limit(&limit, shadow)
    }

    fn item<'a>(slot: usize, rule: &'a Rule, parts: Vec<(&'a str, &'a str)>) -> Item<'a> {
        Item::new(slot, rule, parts, 1, false)
    }

    /// 100,000 descriptors, each key twice: 50,000 items of cost 2, in first-seen order.
    /// (The former pairwise comparison made this 5 billion comparisons, each cloning and
    /// sorting two part lists.)
    #[test]
    fn merging_is_linear_and_exact_on_many_descriptors() {
        let rule = rule("l", Some(&["user"]), false);
        let values: Vec<String> = (0..50_000).map(|i| format!("u{i}")).collect();
        let found: Vec<Item<'_>> = (0..100_000)
            .map(|slot| item(slot, &rule, vec![("user", values[slot % 50_000].as_str())]))
            .collect();
        let items = merge_same_key(found);
        assert_eq!(items.len(), 50_000);
        for (i, merged) in items.iter().enumerate() {
            assert_eq!(merged.slots, [i, i + 50_000]);
            assert_eq!(merged.cost, 2);
            assert_eq!(merged.parts, [("user", values[i].as_str())]);
        }
    }

    /// Parts in another order are the same key, for a keyed limit and for an open one (whose
    /// key the core builds in name order), but a name given twice keeps its values' order;
    /// a shadow rule over the same limit is a counter apart.
    #[test]
    fn merging_follows_the_key() {
        let keyed = rule("keyed", Some(&["a", "b"]), false);
        let shadow = rule("keyed", Some(&["a", "b"]), true);
        let open = rule("open", None, false);
        let items = merge_same_key(vec![
            item(0, &keyed, vec![("a", "1"), ("b", "2")]),
            item(1, &keyed, vec![("b", "2"), ("a", "1")]),
            item(2, &shadow, vec![("a", "1"), ("b", "2")]),
            item(3, &open, vec![("a", "1"), ("b", "2")]),
            item(4, &open, vec![("b", "2"), ("a", "1")]),
            item(5, &open, vec![("a", "1"), ("b", "2")]),
            item(6, &open, vec![("a", "2"), ("a", "1")]),
            item(7, &open, vec![("a", "1"), ("a", "2")]),
        ]);
        let slots: Vec<&[usize]> = items.iter().map(|i| i.slots.as_slice()).collect();
        assert_eq!(slots, [&[0, 1][..], &[2], &[3, 4, 5], &[6], &[7]]);
        let costs: Vec<u64> = items.iter().map(|i| i.cost).collect();
        assert_eq!(costs, [2, 1, 3, 1, 1]);
    }
}
