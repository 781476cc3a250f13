//! Several descriptors of one call on one counter, each answered at its own rate.
//!
//! The reference counts a call's descriptors one after another (an `INCRBY` each, in one
//! pipeline). When two descriptors of a call name the same counter (the same counter hit
//! twice, or a `limit` override counting on a YAML limit's counter, `[envoy]
//! override_counters`), the second sees the first's hits, and each is judged at its own
//! rate. The core refuses one key twice in a request, so such descriptors are one item of
//! their summed cost (`items.rs`); this file gives each its reference answer back:
//!
//! - **Admission stays atomic.** With `count` the counter before the call and `cum_k` the
//!   hits of descriptors 1..=k, descriptor k passes when `count + cum_k ≤ L_k`. All of them
//!   pass when `count + Σ ≤ min_k(L_k − cum_k) + Σ`: one check of the sum at that
//!   *effective* limit, in the same single store call. With one rate it is the rate itself.
//! - **Each descriptor's answer.** The count before the call is read back from the item's
//!   decision: a fixed window's remaining is its limit minus its count, exact unless clamped
//!   at 0. When it is clamped, one peek at a *wide* limit (the largest rate plus the sum plus
//!   one, never clamped where it matters) reads the count after the call: a moment later,
//!   which can change no admission, only what a refused call reports. Then descriptor k is
//!   over when `count + cum_k > L_k` (check only: `count + 1 > L_k`, with counted refusals
//!   `count > L_k`, as for one descriptor), and its remaining is `L_k − count − cum_k` when
//!   the call charged, `L_k − count` when it did not.
//!
//! Only fixed windows count in units, and only they share a counter between rates; an item
//! of another algorithm (the same counter hit twice) answers each of its descriptors with the
//! item's decision.

use std::sync::Arc;

use tollgate::{Decision, Limit, LimitDecision, LimitError, Limiter, Quota, Source, Store};

use super::items::Item;
use crate::matching::Rule;

/// Sets `item`'s capacity, and the limit it is decided at, when its descriptors count at
/// different rates (see the module docs). An item some descriptor of which can never pass
/// gets a capacity below its cost (it is then reported, never charged).
pub(super) fn effective<St: Store>(item: &mut Item<'_>, limiter: &Limiter<St>) {
    let first = item.rule.capacity;
    if item.cost == 0
        || !item.rule.fixed_window
        || item.each.iter().all(|(r, _)| r.capacity == first)
    {
        return;
    }
    let mut cum: u64 = 0;
    let mut least = i128::MAX;
    for (rule, cost) in &item.each {
        cum = cum.saturating_add(*cost);
        least = least.min(i128::from(rule.capacity) - i128::from(cum));
    }
    let capacity = u64::try_from(least + i128::from(item.cost)).unwrap_or(0);
    if least < 0 {
        item.capacity = capacity;
        return;
    }
    match base(item, limiter).map(|base| at(base, capacity)) {
        Some(Ok(limit)) => {
            item.capacity = capacity;
            item.limit = Some(Arc::new(limit));
        }
        // A rate the core cannot express: the item cannot be decided, so it never passes.
        _ => item.capacity = 0,
    }
}

/// With counted refusals, lets `item`, too costly to ever pass, be charged as the reference
/// charges it (its `INCRBY` comes before its over-limit test, `fixed_cache_impl.go`): the
/// core takes no cost above a limit's capacity, so the item is decided on its counter at a
/// limit of its largest rate plus its cost (`never`), and each of its descriptors answered
/// at its own rate from the count read back (over, with 0 remaining). Left too costly
/// (reported, charged nothing) when the core cannot express that limit.
pub(super) fn charge_anyway<St: Store>(item: &mut Item<'_>, limiter: &Limiter<St>) {
    if !item.rule.fixed_window {
        return;
    }
    let Some(units) = widest(item).checked_add(item.cost) else {
        return;
    };
    if let Some(Ok(limit)) = base(item, limiter).map(|base| at(base, units)) {
        item.capacity = units;
        item.limit = Some(Arc::new(limit));
        item.never = true;
    }
}

/// Whether `item`'s descriptors are answered each on its own from `d`, its decision: several
/// descriptors on a fixed window, or one charged though too costly, and a decision from the
/// store's count (not a failure policy's, nor a lease's).
pub(super) fn splits(item: &Item<'_>, d: &LimitDecision) -> bool {
    (item.slots.len() > 1 || item.never) && item.rule.fixed_window && from_store(d)
}

/// Whether `d` comes from the store's count (or the deny cache's memory of it).
fn from_store(d: &LimitDecision) -> bool {
    matches!(d.source, Source::Store | Source::DenyCache)
}

/// The count before the call, read back from `d`, the decision of a cost of `cost`
/// (`charged`: whether the call counted it); `None` when `d`'s remaining is clamped at 0.
pub(super) fn count_before(d: &Decision, cost: u64, charged: bool) -> Option<u64> {
    if d.remaining == 0 && !d.is_allowed() {
        return None;
    }
    let live = d.limit.saturating_sub(d.remaining);
    Some(if charged {
        live.saturating_sub(cost)
    } else {
        live
    })
}

/// The peek that reads `item`'s count when its decision cannot tell it: a limit on the same
/// counter wider than any count that matters. `None` when the core cannot express it.
pub(super) fn wide<'a, St: Store>(item: &Item<'a>, limiter: &Limiter<St>) -> Option<Item<'a>> {
    let units = widest(item).checked_add(item.cost)?.checked_add(1)?;
    let limit = at(base(item, limiter)?, units).ok()?;
    let mut peek = Item::new(item.slots[0], item.rule, item.parts.clone(), 1, false);
    peek.capacity = units;
    peek.limit = Some(Arc::new(limit));
    Some(peek)
}

/// The count before the call, from `d`, the wide peek's decision (`charged`: whether the
/// call counted the item's hits): past every rate when even the wide limit is spent; `None`
/// when the store did not answer the peek.
pub(super) fn count_from_wide(item: &Item<'_>, d: &LimitDecision, charged: bool) -> Option<u64> {
    if !from_store(d) {
        return None;
    }
    Some(
        count_before(&d.decision, item.cost, charged)
            .unwrap_or_else(|| widest(item).saturating_add(1)),
    )
}

/// Whether `d`, the refusal of `item` (one descriptor) by a check that counted refusals,
/// hides how far past its limit the count went, which the reference's statistics split by:
/// its decision is clamped at 0 remaining, and a cost above 1 may have crossed the limit
/// (one hit past it is over whatever the count). Read back with a wide peek.
pub(super) fn crossing_unread(item: &Item<'_>, d: &LimitDecision) -> bool {
    item.slots.len() == 1
        && item.cost > 1
        && item.rule.fixed_window
        && !d.decision.is_allowed()
        && from_store(d)
}

/// One decision per descriptor of `item`, from `d` (the item's) and `count`, the counter
/// before the call (see the module docs): `(slot, its rule, its decision, the count after
/// its hits)`.
pub(super) fn answers<'a>(
    item: &Item<'a>,
    d: &LimitDecision,
    count: u64,
    charged: bool,
    counting: bool,
) -> Vec<(usize, &'a Rule, LimitDecision, u64)> {
    let reset = d.decision.reset_after;
    let mut cum: u64 = 0;
    item.slots
        .iter()
        .zip(&item.each)
        .map(|(&slot, &(rule, cost))| {
            cum = cum.saturating_add(cost);
            let needed = match (item.cost, counting) {
                (0, true) => 0,
                (0, false) => 1,
                _ => cum,
            };
            let limit = rule.capacity;
            let over = count.saturating_add(needed) > limit;
            let used = if charged {
                count.saturating_add(cum)
            } else {
                count
            };
            let remaining = limit.saturating_sub(used);
            let decision = if over {
                Decision::refused(limit, remaining, reset, reset)
            } else {
                Decision::allowed(limit, remaining, reset)
            };
            let answer = LimitDecision {
                quota: rule.quota,
                decision,
                ..d.clone()
            };
            (slot, rule, answer, used)
        })
        .collect()
}

/// The largest rate of `item`'s descriptors.
fn widest(item: &Item<'_>) -> u64 {
    item.each.iter().map(|(r, _)| r.capacity).max().unwrap_or(0)
}

/// A limit `item`'s counter is decided with: an override's own, else the limiter's.
fn base<'l, St: Store>(item: &'l Item<'_>, limiter: &'l Limiter<St>) -> Option<&'l Limit> {
    item.each
        .iter()
        .find_map(|(r, _)| r.own.as_deref())
        .or_else(|| limiter.get(&item.rule.limit))
}

/// `base` at `units` per its period: the same name, key and policy, so the same counter.
/// Kept out of the deny cache, which remembers a refusal by key whatever the rate.
fn at(base: &Limit, units: u64) -> Result<Limit, LimitError> {
    let quota = Quota::new(units, base.quota().period())?;
    let mut limit = Limit::new(base.name(), base.algorithm(), quota)?;
    if let Some(parts) = base.key_parts() {
        limit = limit.keyed_by(parts.iter().map(|p| &**p))?;
    }
    Ok(limit
        .on_store_error(base.policy())
        .shadow(base.is_shadow())
        .deny_cache(false))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::{Algorithm, MemoryStore};

    use super::*;

    /// A fixed-window rule of `per_minute` on counter `c`, as an override makes it.
    fn rule(per_minute: u64) -> Rule {
        let limit = Limit::new(
            "c",
            Algorithm::FixedWindow,
            Quota::per_minute(per_minute).expect("quota"),
        )
        .expect("limit");
        let mut rule = Rule::for_limit(&limit, false);
        rule.own = Some(Arc::new(limit));
        rule
    }

    /// One item of `each` (rule, cost), merged as `merge_same_key` merges them.
    fn item<'a>(each: &[(&'a Rule, u64)]) -> Item<'a> {
        let mut item = Item::new(0, each[0].0, Vec::new(), each[0].1, false);
        for (slot, &(rule, cost)) in each.iter().enumerate().skip(1) {
            item.slots.push(slot);
            item.each.push((rule, cost));
            item.cost += cost;
        }
        item
    }

    fn limiter() -> Limiter<MemoryStore> {
        Limiter::builder(MemoryStore::new())
            .build()
            .expect("limiter")
    }

    /// The effective limit admits the sum exactly when each descriptor, counted in turn, is
    /// within its own rate: min_k(L_k − cum_k) + sum.
    #[test]
    fn the_effective_limit_is_the_tightest_turn() {
        let (ten, five) = (rule(10), rule(5));
        let cases: [(&[(&Rule, u64)], u64); 4] = [
            (&[(&ten, 1), (&five, 1)], 5),  // min(10 − 1, 5 − 2) + 2
            (&[(&five, 1), (&ten, 1)], 6),  // min(5 − 1, 10 − 2) + 2
            (&[(&ten, 3), (&five, 2)], 5),  // min(7, 0) + 5
            (&[(&five, 2), (&ten, 7)], 10), // min(3, 1) + 9
        ];
        let limiter = limiter();
        for (each, capacity) in cases {
            let mut item = item(each);
            effective(&mut item, &limiter);
            assert_eq!(item.capacity, capacity, "{each:?}");
            let limit = item.limit.as_ref().expect("an effective limit");
            assert_eq!(limit.quota().limit(), capacity);
            assert_eq!(limit.name(), "c", "the same counter");
            assert!(!limit.uses_deny_cache());
        }
    }

    /// One rate: the item's own rule decides. A descriptor that can never pass (its turn
    /// is past its rate before anything is counted): too costly.
    #[test]
    fn one_rate_needs_nothing_and_an_impossible_turn_is_too_costly() {
        let (ten, five) = (rule(10), rule(5));
        let limiter = limiter();
        let mut same = item(&[(&ten, 4), (&ten, 5)]);
        effective(&mut same, &limiter);
        assert_eq!((same.capacity, same.limit.is_none()), (10, true));
        let mut never = item(&[(&ten, 4), (&five, 2)]);
        effective(&mut never, &limiter);
        assert!(
            never.too_costly(),
            "6 counted before the 5-rate one passes: {}",
            never.capacity
        );
        assert!(never.limit.is_none());
    }

    /// The count before the call read back from a decision, and when it cannot be.
    #[test]
    fn the_count_is_read_back_unless_clamped() {
        let reset = Duration::from_secs(30);
        let allowed = Decision::allowed(10, 6, reset);
        assert_eq!(count_before(&allowed, 2, true), Some(2), "10 − 6 − 2");
        assert_eq!(
            count_before(&allowed, 2, false),
            Some(4),
            "a peek charged nothing"
        );
        let refused = Decision::refused(10, 3, reset, reset);
        assert_eq!(count_before(&refused, 5, false), Some(7));
        let clamped = Decision::refused(10, 0, reset, reset);
        assert_eq!(count_before(&clamped, 5, true), None);
    }

    /// Each descriptor answered in turn at its own rate, charged or not, check only.
    #[test]
    fn each_answers_in_turn() {
        let (ten, five) = (rule(10), rule(5));
        let merged = item(&[(&ten, 1), (&five, 1)]);
        let d = LimitDecision {
            limit: "c".into(),
            quota: Quota::per_minute(5).expect("quota"),
            decision: Decision::refused(5, 0, Duration::from_secs(9), Duration::from_secs(9)),
            source: Source::Store,
            shadow: false,
            need: tollgate::Need::Must,
        };
        let seen = |count, charged| {
            answers(&merged, &d, count, charged, false)
                .into_iter()
                .map(|(slot, rule, d, _)| {
                    (
                        slot,
                        rule.capacity,
                        d.decision.is_allowed(),
                        d.decision.remaining,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(seen(4, false), [(0, 10, true, 6), (1, 5, false, 1)]);
        assert_eq!(seen(4, true), [(0, 10, true, 5), (1, 5, false, 0)]);
        assert_eq!(seen(2, true), [(0, 10, true, 7), (1, 5, true, 1)]);
        let check_only = item(&[(&ten, 0), (&five, 0)]);
        let peek = |count, counting| {
            answers(&check_only, &d, count, false, counting)
                .into_iter()
                .map(|(_, _, d, _)| d.decision.is_allowed())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            peek(5, false),
            [true, false],
            "a unit left of 10, none of 5"
        );
        assert_eq!(
            peek(5, true),
            [true, true],
            "counted: over only past the rate"
        );
        assert_eq!(peek(6, true), [true, false]);
    }
}
