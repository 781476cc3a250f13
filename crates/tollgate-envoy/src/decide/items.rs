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

/// What makes two items one item: their counter, and whether the rule is a shadow rule.
type SameKey<'a> = (Counter<'a>, bool);

fn same_key<'a>(item: &Item<'a>) -> SameKey<'a> {
    (counter(item), item.rule.shadow)
}

/// The counter an item counts on: its limit and its key parts.
type Counter<'a> = (&'a str, Vec<(&'a str, &'a str)>);

/// `item`'s [`Counter`]: its parts in name order, stable (a name given twice keeps its
/// values' order), as the core builds the key of a limit that takes every part it is given;
/// a keyed limit names each part once and follows its own order, whatever the descriptor's.
/// (A limit override's rule names the override's own limit, whose name is its counter's.)
fn counter<'a>(item: &Item<'a>) -> Counter<'a> {
    let mut parts = item.parts.clone();
    parts.sort_by(|a, b| a.0.cmp(b.0));
    (&*item.rule.limit, parts)
}

/// `batch` as store calls in turn that each name a counter at most once: the core takes no
/// (limit, key) twice in one request. Merging leaves items on one counter only across what
/// it keeps apart, a shadow rule and an enforced one, or a check-only descriptor and a
/// charging one; a batch holding only one of each kind is one call, the batch itself, at no
/// cost (every call but those). Enforced items come first: an item goes to the call after
/// the last one that holds its counter, taking enforced items before shadow ones, each in
/// batch order. So in a batch of charging items (merged: each counter once per kind) every
/// enforced item is in the first call, and a shadow item whose counter an enforced one holds
/// in the second.
pub(super) fn rounds<'c, 'b, 'a>(batch: &'c [&'b Item<'a>]) -> Rounds<'c, 'b, 'a> {
    let mixed = |kind: fn(&Item<'_>) -> bool| {
        batch.iter().any(|i| kind(i)) && !batch.iter().all(|i| kind(i))
    };
    if !mixed(|i| i.rule.shadow) && !mixed(|i| i.cost == 0) {
        return Rounds::One(batch);
    }
    let mut rounds: Vec<Vec<&'b Item<'a>>> = Vec::new();
    let mut held: HashMap<Counter<'a>, usize> = HashMap::with_capacity(batch.len());
    let enforced = batch.iter().filter(|i| !i.rule.shadow);
    let shadow = batch.iter().filter(|i| i.rule.shadow);
    for &item in enforced.chain(shadow) {
        let calls = held.entry(counter(item)).or_insert(0);
        if rounds.len() == *calls {
            rounds.push(Vec::new());
        }
        rounds[*calls].push(item);
        *calls += 1;
    }
    Rounds::Many(rounds)
}

/// The store calls [`rounds`] makes of a batch.
pub(super) enum Rounds<'c, 'b, 'a> {
    /// The batch itself, one call.
    One(&'c [&'b Item<'a>]),
    /// Calls in turn.
    Many(Vec<Vec<&'b Item<'a>>>),
}

impl<'b, 'a> Rounds<'_, 'b, 'a> {
    /// Each call's items, in turn.
    pub(super) fn calls(&self) -> impl Iterator<Item = &[&'b Item<'a>]> {
        let (one, many) = match self {
            Rounds::One(batch) => (Some(*batch), &[][..]),
            Rounds::Many(calls) => (None, calls.as_slice()),
        };
        one.into_iter().chain(many.iter().map(Vec::as_slice))
    }
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

    fn slots(rounds: &Rounds<'_, '_, '_>) -> Vec<Vec<usize>> {
        rounds
            .calls()
            .map(|call| call.iter().map(|i| i.slots[0]).collect())
            .collect()
    }

    /// Calls that each name a counter once: one call when the batch holds one kind of item
    /// (merged items: no counter twice), else enforced items first, and an item in the call
    /// after the last that holds its counter.
    #[test]
    fn rounds_name_each_counter_once_enforced_first() {
        let keyed = rule("keyed", Some(&["a"]), false);
        let shadow = rule("keyed", Some(&["a"]), true);
        let other = rule("other", Some(&["a"]), true);
        let one = |slot, rule| item(slot, rule, vec![("a", "1")]);
        let check_only = |slot, rule| Item::new(slot, rule, vec![("a", "1")], 0, false);

        let (a, b) = (one(0, &keyed), item(1, &keyed, vec![("a", "2")]));
        assert_eq!(slots(&rounds(&[&a, &b])), [[0, 1]]);
        let (s, t) = (one(0, &shadow), one(1, &other));
        assert_eq!(slots(&rounds(&[&s, &t])), [[0, 1]]);

        // A shadow item before the enforced one on its counter goes after it; a shadow item
        // on another counter stays in the first call.
        let (s, t, e) = (one(0, &shadow), one(1, &other), one(2, &keyed));
        assert_eq!(slots(&rounds(&[&s, &t, &e])), [vec![2, 1], vec![0]]);

        // Each kind on one counter: four calls, enforced ones first.
        let (sc, ec, s, e) = (
            check_only(0, &shadow),
            check_only(1, &keyed),
            one(2, &shadow),
            one(3, &keyed),
        );
        assert_eq!(slots(&rounds(&[&sc, &ec, &s, &e])), [[1], [3], [0], [2]]);
    }
}
