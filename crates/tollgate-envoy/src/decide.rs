//! One `ShouldRateLimit` call: descriptors to limits, limits to one answer.
//!
//! Enforced descriptors (rules without `shadow`) are checked all or nothing: every
//! descriptor becomes one (limit, key) pair of one [`Limiter::check_keyed`] call, a single
//! atomic store call, whatever key parts each descriptor fills. The one exception is a request
//! whose descriptors carry different `hits_addend`s (one call has one cost): its descriptors
//! go into one batch per cost, every batch is peeked first, and only if all admit are they
//! checked in turn. That is all or nothing except under a race (a concurrent caller taking the
//! last units between the peek and a later batch's check leaves earlier batches charged).
//!
//! Descriptors naming the same limit and key are one check of their summed cost (Envoy's own
//! service counts each descriptor, so the same counter hit twice takes two units).
//!
//! A descriptor whose cost exceeds its limit's capacity can never pass: the request is over
//! limit and nothing is charged. Shadow descriptors are checked one by one after the enforced
//! ones, and charged only when the enforced ones admitted (a request refused anyway would not
//! have reached a shadow limit either); their denials are counted, never reported.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Decision, Limiter, Quota, Source, Store, Verdict};
use tonic::Status;

use crate::Snapshot;
use crate::snapshot::Rule;

/// What one matched descriptor got.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) limit: Arc<str>,
    pub(crate) quota: Quota,
    pub(crate) decision: Decision,
    pub(crate) source: Source,
    pub(crate) shadow: bool,
}

/// The answer to a request before it is put in protobuf.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Whether every enforced descriptor admits.
    pub(crate) allowed: bool,
    /// One per descriptor, in order; `None` where no rule matched.
    pub(crate) outcomes: Vec<Option<Outcome>>,
}

/// One matched descriptor.
#[derive(Debug)]
struct Item<'a> {
    /// The descriptors (indexes) this item decides: several when they name the same limit
    /// and key, which are then one check of their summed cost.
    slots: Vec<usize>,
    rule: &'a Rule,
    parts: Vec<(&'a str, &'a str)>,
    cost: u64,
}

/// Descriptors one `check_keyed` can take: those of one cost.
#[derive(Debug, Default)]
struct Batch<'i, 'a> {
    items: Vec<&'i Item<'a>>,
}

/// Decides `request` with the rules and limiter of `snapshot`.
///
/// # Errors
/// `INVALID_ARGUMENT` for an empty domain or no descriptor; `UNAVAILABLE` when the store
/// failed and a limit's `deny` policy refused; `INTERNAL` if the limiter refuses a request the
/// snapshot should have made valid.
pub(crate) async fn decide<St: Store>(
    snapshot: &Snapshot<St>,
    request: &RateLimitRequest,
) -> Result<Answer, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument("domain must not be empty"));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument("descriptors must not be empty"));
    }
    let default_cost = u64::from(request.hits_addend.max(1));
    let found: Vec<Item<'_>> = request
        .descriptors
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.is_negative_hits)
        .filter_map(|(slot, d)| {
            let rule = snapshot.find(&request.domain, &d.entries)?;
            let cost = d
                .hits_addend
                .as_ref()
                .map(|v| v.value)
                .filter(|&v| v > 0)
                .unwrap_or(default_cost);
            Some(Item {
                slots: vec![slot],
                rule,
                parts: rule.parts(&d.entries),
                cost,
            })
        })
        .collect();
    let items = merge_same_key(found);
    let limiter = snapshot.limiter();
    let mut outcomes = vec![None; request.descriptors.len()];
    let (enforced, shadow): (Vec<&Item<'_>>, Vec<&Item<'_>>) =
        items.iter().partition(|i| !i.rule.shadow);
    let allowed = enforce(limiter, &enforced, &mut outcomes).await?;
    for item in shadow {
        let outcome = shadow_check(limiter, item, allowed).await?;
        fill(&mut outcomes, item, &outcome);
    }
    Ok(Answer { allowed, outcomes })
}

/// Checks the enforced descriptors all or nothing; fills their outcomes.
async fn enforce<St: Store>(
    limiter: &Limiter<St>,
    items: &[&Item<'_>],
    outcomes: &mut [Option<Outcome>],
) -> Result<bool, Status> {
    if items.is_empty() {
        return Ok(true);
    }
    if items.iter().any(|i| i.cost > i.rule.capacity) {
        // Can never pass: charge nothing, report each limit's current state.
        for item in items {
            let cap = item.rule.capacity;
            let verdict = call(limiter, &[item], item.cost.min(cap), false).await?;
            if verdict.is_store_failure() {
                return Err(unavailable());
            }
            let mut outcome = outcome(item, &verdict, 0);
            if item.cost > cap {
                outcome.decision.allowed = false;
            }
            fill(outcomes, item, &outcome);
        }
        return Ok(false);
    }
    let batches = batches(items);
    let mut verdicts = Vec::with_capacity(batches.len());
    if let [batch] = &batches[..] {
        verdicts.push(call(limiter, &batch.items, batch.items[0].cost, true).await?);
    } else {
        for batch in &batches {
            let cost = batch.items[0].cost;
            verdicts.push(call(limiter, &batch.items, cost, false).await?);
        }
        if verdicts.iter().all(Verdict::is_allowed) {
            for (batch, verdict) in batches.iter().zip(&mut verdicts) {
                let cost = batch.items[0].cost;
                *verdict = call(limiter, &batch.items, cost, true).await?;
                if !verdict.is_allowed() {
                    break;
                }
            }
        }
    }
    if verdicts.iter().any(Verdict::is_store_failure) {
        return Err(unavailable());
    }
    for (batch, verdict) in batches.iter().zip(&verdicts) {
        for (i, item) in batch.items.iter().enumerate() {
            fill(outcomes, item, &outcome(item, verdict, i));
        }
    }
    Ok(verdicts.iter().all(Verdict::is_allowed))
}

/// Checks one shadow descriptor on its own (charging only if the request is admitted);
/// counts a would-be denial.
async fn shadow_check<St: Store>(
    limiter: &Limiter<St>,
    item: &Item<'_>,
    admitted: bool,
) -> Result<Outcome, Status> {
    let cap = item.rule.capacity;
    let charge = admitted && item.cost <= cap;
    let verdict = call(limiter, &[item], item.cost.min(cap), charge).await?;
    let mut outcome = outcome(item, &verdict, 0);
    if item.cost > cap {
        outcome.decision.allowed = false;
    }
    if admitted && !outcome.decision.allowed && !verdict.is_store_failure() {
        metrics::counter!("tollgate_shadow_denied_total", "limit" => item.rule.limit.to_string())
            .increment(1);
        tracing::debug!(limit = %item.rule.limit, "shadow limit would deny");
    }
    Ok(outcome)
}

/// Descriptors that name the same limit (same rule kind: enforced or shadow) and the same
/// key count the same units twice: they become one item of their summed cost, so that a
/// request cannot pass each check alone and fail their sum.
fn merge_same_key(found: Vec<Item<'_>>) -> Vec<Item<'_>> {
    let mut items: Vec<Item<'_>> = Vec::with_capacity(found.len());
    for item in found {
        match items.iter_mut().find(|i| same_key(i, &item)) {
            Some(same) => {
                same.cost = same.cost.saturating_add(item.cost);
                same.slots.extend(item.slots);
            }
            None => items.push(item),
        }
    }
    items
}

fn same_key(a: &Item<'_>, b: &Item<'_>) -> bool {
    if a.rule.limit != b.rule.limit || a.rule.shadow != b.rule.shadow {
        return false;
    }
    if a.rule.open_key {
        // The key is built from the parts in the order given.
        return a.parts == b.parts;
    }
    let mut x = a.parts.clone();
    let mut y = b.parts.clone();
    x.sort_unstable();
    y.sort_unstable();
    x == y
}

fn fill(outcomes: &mut [Option<Outcome>], item: &Item<'_>, outcome: &Outcome) {
    for &slot in &item.slots {
        outcomes[slot] = Some(outcome.clone());
    }
}

/// Groups items into one batch per cost.
fn batches<'i, 'a>(items: &[&'i Item<'a>]) -> Vec<Batch<'i, 'a>> {
    let mut batches: Vec<Batch<'i, 'a>> = Vec::new();
    for &item in items {
        match batches.iter_mut().find(|b| b.items[0].cost == item.cost) {
            Some(batch) => batch.items.push(item),
            None => batches.push(Batch { items: vec![item] }),
        }
    }
    batches
}

/// Checks (or peeks) `items`, each with its own key, at one cost, in one store call.
async fn call<St: Store>(
    limiter: &Limiter<St>,
    items: &[&Item<'_>],
    cost: u64,
    charge: bool,
) -> Result<Verdict, Status> {
    let pairs: Vec<(&str, &[(&str, &str)])> = items
        .iter()
        .map(|i| (&*i.rule.limit, i.parts.as_slice()))
        .collect();
    let result = if charge {
        limiter.check_keyed(&pairs, cost).await
    } else {
        limiter.peek_keyed(&pairs, cost).await
    };
    result.map_err(|error| {
        tracing::error!(%error, "limiter refused a request built from validated rules");
        Status::internal("rate limit check failed")
    })
}

fn outcome(item: &Item<'_>, verdict: &Verdict, i: usize) -> Outcome {
    let d = &verdict.decisions()[i];
    Outcome {
        limit: d.limit.clone(),
        quota: item.rule.quota,
        decision: d.decision,
        source: d.source,
        shadow: item.rule.shadow,
    }
}

fn unavailable() -> Status {
    Status::unavailable("rate limit store unavailable and a limit's failure policy is deny")
}
