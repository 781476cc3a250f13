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
//! service counts each descriptor, so the same counter hit twice takes two units), each
//! answered as the reference counts them, one after the other at its own rate (`rates.rs`,
//! which also sets the limit such an item is decided at when a `limit` override shares the
//! counter at another rate). They are found through a hash map, not by comparing each descriptor with every earlier one: that
//! was quadratic, and 30,000 descriptors held a runtime thread for 8 s. A call's size is
//! capped before anything else (`caps.rs`), and every step here is linear in it.
//!
//! Merging keeps two kinds apart on one counter: a shadow rule's descriptor and an enforced
//! one's (two rules naming one limit), and a check-only descriptor and a charging one. The
//! core takes no (limit, key) twice in one request, so a store call holding both is split
//! (`items::rounds`): peeks in any order; in the charging call, a shadow descriptor on an
//! enforced one's counter is decided after it, on the count it left, as the limiter decides
//! every shadow entry after the enforced ones (charged only when the request passed, or
//! when refusals are charged). Such a call was `INVALID_ARGUMENT`.
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
//! refusing and charged nothing. With counted refusals (below) it is charged all the same,
//! and answered over.
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
//! overall code is then read from the answers by the same rules. So does a descriptor of a
//! cost its limit can never admit (the reference's `INCRBY` comes before its over-limit
//! test): the core takes no cost above a limit's capacity, so it is charged on its counter
//! at a limit wide enough for the cost, and answered over at its own (`rates.rs`). The
//! check-only peek counts too: there a counter can pass its limit, and the reference
//! answers `hits_addend` 0 with `OVER_LIMIT` only when the count is **past** the limit
//! (`limitAfterIncrease > limit`), `OK` with 0 remaining at it; a peek of a counting request answers exactly that. A refused
//! descriptor of more than one hit has its count read back after the call (its decision is
//! clamped at 0 remaining), so that its hits are split into near and over limit as the
//! reference's statistics split them (`calls.rs`, `metrics/hits.rs`). (By
//! default a count never passes the limit, and a check-only descriptor is over once no unit
//! is left: the only answer that lets the check-then-charge pattern admit exactly the limit.)
//!
//! Imported (YAML) entries follow the reference: an `unlimited` entry is OK and never counted;
//! an entry of 0 requests per unit is over limit like a too costly one (nothing charged),
//! with the time to the end of its unit-aligned window as `duration_until_reset` (with
//! counted refusals a check-only one is OK with nothing left: a count of 0 is not past 0);
//! when a matched entry `replaces` another matched one by name, the replaced descriptor is
//! not decided (it is answered as unmatched). As in the reference's `constructLimitsToCheck`,
//! every matched entry's `replaces` counts, an `unlimited` or 0-per-unit one's included, and
//! counted and 0-per-unit entries can be replaced (`unlimited` ones are set aside first).
//!
//! The files: `answer.rs` (what a call answers before protobuf), `matched.rs` (descriptors
//! to items, the one pass over the request, replaced ones dropped), `items.rs` (merging
//! items), `rates.rs` (several descriptors on one counter), `calls.rs` (the store calls:
//! peeks and the charging call).

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::Store;
use tonic::Status;

use crate::{Snapshot, Unit};

mod answer;
mod calls;
mod items;
mod matched;
mod rates;

pub(crate) use answer::{Answer, Fixed, Shown};
pub(crate) use items::descriptor_cost;

use calls::Calls;
use items::{Item, merge_same_key};
use matched::Matched;

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
    let Matched {
        found,
        fixed,
        quota,
        counted,
        metadata,
        mut group,
    } = Matched::collect(snapshot, request, &overrides);
    // Check-only descriptors are decided apart: merged among themselves (same key: one peek),
    // never with a charging descriptor of the same key.
    let (check_only, charged): (Vec<Item<'_>>, Vec<Item<'_>>) =
        found.into_iter().partition(|i| i.cost == 0);
    let check_only = merge_same_key(check_only);
    let mut charged = merge_same_key(charged);
    for item in &mut charged {
        rates::effective(item, snapshot.limiter());
    }
    // A 0-per-unit descriptor (not shadow) refuses the request unless it is a quota one.
    let mut vetoed = fixed.iter().any(|(slot, f)| {
        matches!(
            f,
            Fixed::Blocked {
                shadow: false,
                over: true,
                ..
            }
        ) && !quota[*slot]
    });
    let mut answer = Answer::new(request.descriptors.len(), fixed, quota, counted, metadata);
    for item in charged.iter().filter(|i| i.too_costly() && !i.rule.shadow) {
        if item.quota {
            group.outside(false);
        } else {
            vetoed = true;
        }
    }
    let calls = Calls {
        limiter: snapshot.limiter(),
        counting: snapshot.charges_refusals(),
    };
    if calls.counting {
        // Charged anyway, as the reference charges it (`rates::charge_anyway`).
        for item in charged.iter_mut().filter(|i| i.too_costly()) {
            rates::charge_anyway(item, snapshot.limiter());
        }
    }
    let (too_costly, fits): (Vec<&Item<'_>>, Vec<&Item<'_>>) =
        charged.iter().partition(|i| i.too_costly());
    if vetoed && !calls.counting {
        // Can never pass: charge nothing, report each limit's current state.
        answer.allowed = false;
        let all: Vec<&Item<'_>> = charged.iter().chain(&check_only).collect();
        calls.report(&mut answer, &all, group.passed).await?;
    } else {
        let peeked: Vec<&Item<'_>> = check_only.iter().collect();
        calls.report(&mut answer, &too_costly, group.passed).await?;
        vetoed |= calls.check_only(&mut answer, &peeked, &mut group).await?;
        calls.charge(&mut answer, &fits, &group, vetoed).await?;
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

/// The time from `now` to the end of the current window of a fixed window of `period`
/// (windows aligned to the epoch, as the core counts them): 0 < time ≤ period. Rounded up to
/// whole seconds, it is the reference's `unit - now % unit` for a YAML unit.
pub(crate) fn window_end(period: Duration, now: tollgate::Timestamp) -> Duration {
    let period = u64::try_from(period.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(period - now.as_micros() % period)
}

/// The time from `now` to the end of `unit`'s window, windows aligned to the epoch in whole
/// seconds: what the reference answers for every limit (`unit - now % unit`, 1..=unit).
pub(crate) fn window_reset(unit: Unit, now: tollgate::Timestamp) -> Duration {
    let period = unit.period().as_secs().max(1);
    let secs = now.as_micros() / 1_000_000;
    Duration::from_secs(period - secs % period)
}
