//! One `ShouldRateLimit` call: descriptors to limits, limits to one answer.
//!
//! Matched descriptors become (limit, key, cost) entries of one request prepared by the core
//! ([`Limiter::prepare_with`], one [`Ask`] per entry) and decided in one atomic store call,
//! all or nothing, each entry at its own descriptor's `hits_addend` (or the request's); a
//! rule in shadow mode makes its entry a shadow entry ([`Ask::shadow`]), which the limiter
//! decides after the others and never lets refuse; a descriptor's `limit` override is a limit
//! made for the request ([`Ask::limit`]), keyed and validated by the core like the others. Validation, shadow counting and failure
//! policies are the limiter's, as for every face.
//!
//! Descriptors naming the same limit and key are one check of their summed cost (Envoy's own
//! service counts each descriptor, so the same counter hit twice takes two units). They are
//! found through a hash map, not by comparing each descriptor with every earlier one: that
//! was quadratic, and 30,000 descriptors held a runtime thread for 8 s. A call's size is
//! capped before anything else (`caps.rs`), and every step here is linear in it.
//!
//! A descriptor whose own `hits_addend` is 0 is **check only**, as in the reference: it asks
//! whether its key has a unit left (with counted refusals, whether its count is past the
//! limit, below) and charges nothing. Such descriptors are peeked (at one
//! unit, so a key with nothing left answers `OVER_LIMIT` and `limit_remaining` is the key's
//! current remaining) in a store call of their own, before the charging one; an enforced one
//! that is over makes the request over limit, and then, all or nothing, nothing is charged.
//! The two calls are not one atomic step, which costs nothing: the check-only entries write
//! nothing, so at worst they see the state of a moment earlier.
//!
//! A descriptor whose cost exceeds its limit's capacity can never pass: when its rule is
//! enforced, the request is over limit and nothing is charged; a shadow one is reported as
//! refusing and charged nothing.
//!
//! **Quota descriptors** (`quota_mode: true`, a `quota_mode` rule, or every descriptor with
//! `[envoy] quota_mode`) follow the reference's rule for the overall code: `OVER_LIMIT` when
//! a descriptor that is not a quota descriptor is over its limit, or when there are quota
//! descriptors and every one of them is. A quota descriptor over its limit is answered
//! `OVER_LIMIT` but charged nothing, and does not refuse the request while another passes:
//! the decided ones are the request's any-of group ([`tollgate::Need::OneOf`]), decided in the
//! same atomic store call. Quota descriptors decided outside that call count as the
//! reference counts them: a 0-per-unit or too costly one as over, a check-only one as its
//! peek says, a shadow one as passing, and with global quota mode an unmatched one (no limit)
//! as passing; one that passes makes the group's members in the call optional
//! ([`tollgate::Need::Optional`]), one that is over leaves the group to the others.
//!
//! **Counted refusals** (`[envoy] refusals = "charged"`): the charging call counts refusals
//! ([`tollgate::Request::count_refusals`]): every descriptor's counter takes its hits, over
//! limit or not, each on its own, even when another descriptor refuses the request; the
//! overall code is then read from the answers by the same rules. The check-only peek counts
//! too: there a counter can pass its limit, and the reference answers `hits_addend` 0 with
//! `OVER_LIMIT` only when the count is **past** the limit (`limitAfterIncrease > limit`),
//! `OK` with 0 remaining at it; a peek of a counting request answers exactly that. (By
//! default a count never passes the limit, and a check-only descriptor is over once no unit
//! is left: the only answer that lets the check-then-charge pattern admit exactly the limit.)
//!
//! Imported (YAML) entries follow the reference: an `unlimited` entry is OK and never counted;
//! an entry of 0 requests per unit is over limit like a too costly one (nothing charged),
//! with the time to the end of its unit-aligned window as `duration_until_reset`; when a
//! matched limit `replaces` another matched one by name, the replaced descriptor is not
//! decided (it is answered as unmatched).

use std::collections::HashSet;
use std::collections::hash_map::{self, HashMap};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Ask, LimitDecision, Limiter, Need, Op, Outcome, Store, Verdict};
use tonic::Status;

use crate::matching::{Found, Rule};
use crate::metrics::Counted;
use crate::{Snapshot, Unit};

/// The answer to a request before it is put in protobuf.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    /// Whether every enforced descriptor admits.
    pub(crate) allowed: bool,
    /// One per descriptor, in order; `None` where no rule matched.
    pub(crate) outcomes: Vec<Option<LimitDecision>>,
    /// What the rule that decided each descriptor shows and how it counts (`None` where no
    /// rule matched).
    pub(crate) shown: Vec<Option<Shown>>,
    /// Descriptors answered without a limiter decision (imported `unlimited` or 0 per unit),
    /// in slot order.
    pub(crate) fixed: Vec<(usize, Fixed)>,
    /// One per descriptor: whether it is a quota descriptor (its own `quota_mode` or global),
    /// whose refusal does not choose the limit headers' descriptor on its own.
    pub(crate) quota: Vec<bool>,
    /// One per descriptor: how it counts in the reference's statistics, as the match that
    /// decided it found (`None`: matched nothing, or not counted).
    pub(crate) counted: Vec<Option<Counted<'a>>>,
}

/// What a decided descriptor's status shows of its rule, and how its statistics count.
#[derive(Debug, Clone)]
pub(crate) struct Shown {
    /// `current_limit.name` (`[envoy] current_limit_name`).
    pub(crate) name: Arc<str>,
    /// The YAML unit of an imported limit, shown as is in `current_limit` (a 30-day `month`
    /// has no exact equivalent in [`crate::rate_unit`]).
    pub(crate) unit: Option<Unit>,
    /// Whether the rule is in shadow mode of its own (`shadow_mode: true`, a shadow rule or
    /// limit), not only by `[envoy] shadow`: only those count `shadow_mode` statistics.
    pub(crate) own_shadow: bool,
}

/// An answer that needs no counter.
#[derive(Debug, Clone)]
pub(crate) enum Fixed {
    /// OK, with `limit_remaining` at its maximum.
    Unlimited,
    /// Over limit (OK when shadow), 0 per `unit`.
    Blocked {
        /// The unit.
        unit: Unit,
        /// Shadow mode (its own or global).
        shadow: bool,
        /// Shadow mode of its own (`shadow_mode: true`).
        own_shadow: bool,
        /// `current_limit.name`: the YAML `rate_limit.name`, empty when none.
        name: Arc<str>,
        /// Until the end of the unit-aligned window, as the reference answers.
        reset: Duration,
    },
}

/// One matched descriptor.
#[derive(Debug)]
struct Item<'a> {
    /// The descriptors (indexes) this item decides: several when they name the same limit
    /// and key, which are then one check of their summed cost.
    slots: Vec<usize>,
    rule: &'a Rule,
    parts: Vec<(&'a str, &'a str)>,
    /// The hits to charge; 0 for a check-only descriptor (`hits_addend` 0).
    cost: u64,
    /// A quota descriptor (its own `quota_mode` or global quota mode).
    quota: bool,
}

/// Decides `request` with the rules and limiter of `snapshot`.
///
/// # Errors
/// `INVALID_ARGUMENT` for an empty domain, no descriptor, more descriptors or entries than
/// the snapshot's caps allow, or a descriptor the limiter refuses (a value longer than
/// [`tollgate::MAX_KEY_VALUE`]); `UNAVAILABLE` when the store failed and a limit's `deny`
/// policy refused.
pub(crate) async fn decide<'a, St: Store>(
    snapshot: &'a Snapshot<St>,
    request: &'a RateLimitRequest,
) -> Result<Answer<'a>, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument("domain must not be empty"));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument("descriptors must not be empty"));
    }
    snapshot.caps().check(request)?;
    // Per-request limit overrides (matching/overrides.rs), validated before anything is decided.
    let overrides = snapshot.overrides(request)?;
    let default_cost = u64::from(request.hits_addend.max(1));
    let now = snapshot.now();
    let global_quota = snapshot.global_quota_mode();
    let mut quota = vec![false; request.descriptors.len()];
    let mut group = Group::default();
    let mut fixed = Vec::new();
    let mut found: Vec<Item<'_>> = Vec::new();
    let mut counted = Vec::with_capacity(request.descriptors.len());
    counted.resize_with(request.descriptors.len(), || None);
    for (slot, d) in request.descriptors.iter().enumerate() {
        if d.is_negative_hits {
            continue;
        }
        let Some((matched, counts)) =
            snapshot.find_for(&request.domain, d, overrides[slot].as_deref())
        else {
            continue;
        };
        counted[slot] = counts;
        match matched {
            Found::Unlimited => fixed.push((slot, Fixed::Unlimited)),
            Found::Blocked {
                unit,
                shadow,
                own_shadow,
                quota_mode,
                name,
            } => {
                quota[slot] = quota_mode || global_quota;
                if quota[slot] {
                    group.outside(shadow);
                }
                let reset = window_reset(unit, now);
                fixed.push((
                    slot,
                    Fixed::Blocked {
                        unit,
                        shadow,
                        own_shadow,
                        name: name.clone(),
                        reset,
                    },
                ));
            }
            Found::Limited(rule, parts) => {
                let cost = descriptor_cost(d, default_cost);
                quota[slot] = rule.quota_mode || global_quota;
                found.push(Item {
                    slots: vec![slot],
                    rule,
                    parts,
                    cost,
                    quota: quota[slot],
                });
            }
        }
    }
    let found = drop_replaced(found);
    if global_quota {
        // The reference counts a descriptor with no limit (unmatched, whitelisted, replaced,
        // negative hits) as a quota descriptor that passes; an `unlimited` one not at all.
        let mut decided = vec![false; request.descriptors.len()];
        for item in &found {
            decided[item.slots[0]] = true;
        }
        for (slot, f) in &fixed {
            decided[*slot] = true;
            if matches!(f, Fixed::Unlimited) {
                quota[*slot] = false;
            }
        }
        if decided.iter().any(|d| !d) {
            group.outside(true);
        }
        for (slot, d) in decided.iter().enumerate() {
            if !d {
                quota[slot] = true;
            }
        }
    }
    // Shadow quota descriptors always answer OK: passing members of the group.
    if found.iter().any(|i| i.quota && i.rule.shadow) {
        group.outside(true);
    }
    let counting = snapshot.charges_refusals();
    // Check-only descriptors are decided apart: merged among themselves (same key: one peek),
    // never with a charging descriptor of the same key.
    let (check_only, charged): (Vec<Item<'_>>, Vec<Item<'_>>) =
        found.into_iter().partition(|i| i.cost == 0);
    let check_only = merge_same_key(check_only);
    let charged = merge_same_key(charged);
    let limiter = snapshot.limiter();
    // A 0-per-unit descriptor (not shadow) refuses the request unless it is a quota one.
    let mut vetoed = fixed
        .iter()
        .any(|(slot, f)| matches!(f, Fixed::Blocked { shadow: false, .. }) && !quota[*slot]);
    let mut answer = Answer {
        allowed: true,
        outcomes: vec![None; request.descriptors.len()],
        shown: vec![None; request.descriptors.len()],
        fixed,
        quota,
        counted,
    };
    let (fits, too_costly): (Vec<&Item<'_>>, Vec<&Item<'_>>) =
        charged.iter().partition(|i| i.cost <= i.rule.capacity);
    let peeked: Vec<&Item<'_>> = check_only.iter().collect();
    for item in too_costly.iter().filter(|i| !i.rule.shadow) {
        if item.quota {
            group.outside(false);
        } else {
            vetoed = true;
        }
    }
    let mode = Mode {
        counting: false,
        optional: group.passed,
    };
    if vetoed && !counting {
        // Can never pass: charge nothing, report each limit's current state.
        answer.allowed = false;
        let all: Vec<&Item<'_>> = charged.iter().chain(&check_only).collect();
        if !all.is_empty() {
            let verdict = run(limiter, &all, Op::Peek, mode).await?;
            answer.fill(&all, &verdict);
        }
    } else {
        if !too_costly.is_empty() {
            let verdict = run(limiter, &too_costly, Op::Peek, mode).await?;
            answer.fill(&too_costly, &verdict);
        }
        if !peeked.is_empty() {
            // Check only: whether a unit is left, charging nothing; when refusals are
            // charged, whether the count is past the limit (the reference's answer).
            let mode = Mode { counting, ..mode };
            let verdict = run(limiter, &peeked, Op::Peek, mode).await?;
            answer.fill(&peeked, &verdict);
            for (item, d) in peeked.iter().zip(verdict.decisions()) {
                if item.rule.shadow {
                    continue;
                }
                if item.quota {
                    group.outside(d.decision.is_allowed());
                } else if !d.decision.is_allowed() {
                    vetoed = true;
                }
            }
        }
        // The group refuses already when all of it outside the call refused and none of it
        // is in the call.
        let in_call = fits.iter().any(|i| i.quota && !i.rule.shadow);
        let group_refused = group.members > 0 && !group.passed && !in_call;
        answer.allowed = !vetoed && !group_refused;
        if !fits.is_empty() {
            // Every descriptor that can pass, each at its own cost: one atomic store call
            // (a peek when the request is already refused: all or nothing; a check anyway
            // when refusals are charged, as the reference charges every descriptor).
            let op = if answer.allowed || counting {
                Op::Check
            } else {
                Op::Peek
            };
            let mode = Mode {
                counting,
                optional: group.passed,
            };
            let verdict = run(limiter, &fits, op, mode).await?;
            answer.fill(&fits, &verdict);
            answer.allowed &= verdict.outcome() == Outcome::Allowed;
        }
    }
    for item in too_costly {
        for &slot in &item.slots {
            if let Some(d) = &mut answer.outcomes[slot] {
                // Can never pass: refused, whatever the peek at its capacity said.
                d.decision = d.decision.never();
            }
        }
    }
    Ok(answer)
}

/// The quota descriptors decided outside the charging call (see the module docs).
#[derive(Debug, Default)]
struct Group {
    /// How many.
    members: usize,
    /// Whether one of them passed.
    passed: bool,
}

impl Group {
    /// One more member outside the call, which passed or not.
    fn outside(&mut self, passed: bool) {
        self.members += 1;
        self.passed |= passed;
    }
}

/// How a call's request is prepared.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// Count refusals (`[envoy] refusals = "charged"`): a check charges every entry, a peek
    /// answers from the count as it stands ([`tollgate::Request::count_refusals`]).
    counting: bool,
    /// A quota descriptor outside the call passed: the quota ones in it are optional.
    optional: bool,
}

/// The time from `now` to the end of `unit`'s window, windows aligned to the epoch in whole
/// seconds: what the reference answers for every limit (`unit - now % unit`, 1..=unit).
pub(crate) fn window_reset(unit: Unit, now: tollgate::Timestamp) -> Duration {
    let period = unit.period().as_secs().max(1);
    let secs = now.as_micros() / 1_000_000;
    Duration::from_secs(period - secs % period)
}

impl Answer<'_> {
    fn fill(&mut self, batch: &[&Item<'_>], verdict: &Verdict) {
        for (item, d) in batch.iter().zip(verdict.decisions()) {
            for &slot in &item.slots {
                self.outcomes[slot] = Some(d.clone());
                self.shown[slot] = Some(Shown {
                    name: item.rule.shown.clone(),
                    unit: item.rule.unit,
                    own_shadow: item.rule.own_shadow,
                });
            }
        }
    }
}

/// Drops the items whose imported limit another matched item `replaces` (by name).
fn drop_replaced(found: Vec<Item<'_>>) -> Vec<Item<'_>> {
    let replaced: HashSet<&str> = found
        .iter()
        .flat_map(|i| i.rule.replaces.iter().map(|r| &**r))
        .collect();
    if replaced.is_empty() {
        return found;
    }
    let keep: Vec<bool> = found
        .iter()
        .map(|i| {
            i.rule
                .name
                .as_deref()
                .is_none_or(|n| !replaced.contains(&n))
        })
        .collect();
    found
        .into_iter()
        .zip(keep)
        .filter_map(|(item, keep)| keep.then_some(item))
        .collect()
}

/// Descriptors that name the same limit (same rule kind: enforced or shadow) and the same
/// key count the same units twice: they become one item of their summed cost, so that a
/// request cannot pass each check alone and fail their sum. Items keep the order of their
/// first descriptor. Linear: one map lookup per item.
fn merge_same_key(found: Vec<Item<'_>>) -> Vec<Item<'_>> {
    let mut items: Vec<Item<'_>> = Vec::with_capacity(found.len());
    let mut seen: HashMap<SameKey<'_>, usize> = HashMap::with_capacity(found.len());
    for item in found {
        match seen.entry(same_key(&item)) {
            hash_map::Entry::Occupied(at) => {
                let same = &mut items[*at.get()];
                same.cost = same.cost.saturating_add(item.cost);
                same.slots.extend(item.slots);
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

/// `item`'s [`SameKey`]: its parts in the order given for a limit that takes every part it
/// is given (its key is built in that order), else sorted (the key follows the limit's own
/// order of parts, whatever the descriptor's).
fn same_key<'a>(item: &Item<'a>) -> SameKey<'a> {
    let mut parts = item.parts.clone();
    if !item.rule.open_key {
        parts.sort_unstable();
    }
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
fn cost(item: &Item<'_>) -> u64 {
    item.cost.clamp(1, item.rule.capacity.max(1))
}

/// Prepares `batch` (each item with its own key and cost, shadow rules as shadow entries) and
/// decides it with `op` in one store call.
async fn run<St: Store>(
    limiter: &Limiter<St>,
    batch: &[&Item<'_>],
    op: Op,
    mode: Mode,
) -> Result<Verdict, Status> {
    let need = if mode.optional {
        Need::Optional
    } else {
        Need::OneOf
    };
    let asks = batch.iter().map(|item| {
        let rule = item.rule;
        let ask = match &rule.own {
            // A descriptor's `limit` override: a limit made for this request (matching/overrides.rs).
            Some(own) => Ask::limit(own, &item.parts),
            None => Ask::named(&rule.limit, &item.parts),
        };
        let ask = ask.cost(cost(item)).shadow(rule.shadow);
        if item.quota && !rule.shadow {
            ask.need(need)
        } else {
            ask
        }
    });
    let mut request = limiter
        .prepare_with(asks)
        .map_err(|error| Status::invalid_argument(error.to_string()))?;
    if mode.counting {
        // A check charges every descriptor; a peek (check only) answers from the count as
        // it stands, refused only past the limit.
        request
            .count_refusals()
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
    }
    let verdict = limiter.decide(&request, op).await;
    if let Outcome::Unavailable { .. } = verdict.outcome() {
        return Err(Status::unavailable(
            "rate limit store unavailable and a limit's failure policy is deny",
        ));
    }
    Ok(verdict)
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
        Item {
            slots: vec![slot],
            rule,
            parts,
            cost: 1,
            quota: false,
        }
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

    /// Parts in another order are the same key for a keyed limit, not for an open one; a
    /// shadow rule over the same limit is a counter apart.
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
        ]);
        let slots: Vec<&[usize]> = items.iter().map(|i| i.slots.as_slice()).collect();
        assert_eq!(slots, [&[0, 1][..], &[2], &[3, 5], &[4]]);
        let costs: Vec<u64> = items.iter().map(|i| i.cost).collect();
        assert_eq!(costs, [2, 1, 2, 1]);
    }
}
