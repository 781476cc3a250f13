//! The one path of every check and peek to the store: the deny cache first, then one store
//! call (timed, unless the store answers in-process), each limit's failure policy when it
//! fails, and every decision counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::decision_counters::{self, Counted};
use super::{Limiter, name_copy, subset};
use crate::limiter::deny_cache::DenyCache;
use crate::verdict::outcome::POLICY_RETRY_AFTER;
use crate::verdict::{LimitDecision, Source};
use crate::{
    Clock, Decision, Decisions, Entry, MemoryStore, Need, OnStoreError, Op, Request, SteadyClock,
    Store, StoreError, Timestamp,
};

impl<S: Store> Limiter<S> {
    /// Asks the store (timing the call), applies the policies when it fails, and counts
    /// every decision: the one path of every check and peek.
    pub(super) async fn run(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> SmallVec<[LimitDecision; 2]> {
        // Once the leases were given back (`return_leases`: a reload replaced this limiter, or
        // a shutdown), lease-mode limits are decided as the fixed windows they count on, in
        // the one atomic call with the others: taken entry by entry, a refusal by one left
        // the others' store charges.
        let leased = op == Op::Check
            && request
                .entries()
                .iter()
                .any(|e| e.limit.lease_mode().is_some())
            && !self.leases.is_closed();
        let cached = match &self.deny_cache {
            // Boxed, as the shadow path: rare, and large enough to grow every decision's state.
            _ if leased => Ok(Box::pin(self.decide_leased(request, now)).await),
            // A refusal that charges must reach the store.
            Some(_) if request.counts_refusals() => Err(None),
            Some(cache) => {
                let asked_at = cache.time(now.map(Timestamp::as_micros));
                let hits = deny_cache_hits(cache, request, asked_at);
                if hits.iter().all(Option::is_none) {
                    Err(Some((cache, asked_at)))
                } else {
                    // Boxed: the peek it may make would otherwise be a second store call's
                    // state in every decision's.
                    Ok(Box::pin(self.answer_from_deny_cache(request, hits, now)).await)
                }
            }
            None => Err(None),
        };
        let decisions = match cached {
            Ok(decisions) => decisions,
            Err(remember) => {
                // `ask_store`'s body, written out: the everyday path awaits the store here,
                // not through a layer of its own (docs/architecture.md counts the path).
                let started = (!self.store.in_process()).then(Instant::now);
                let answer = self.store.decide(request, op, now).await;
                let decisions = self.store_answered(request, op, started, answer);
                if let Some((cache, asked_at)) = remember {
                    remember_denials(cache, request, op, &decisions, asked_at);
                }
                decisions
            }
        };
        if op == Op::Check {
            self.count_checked(request, &decisions);
        }
        decisions
    }

    /// Counts a check's decisions: for `/v1/top` and the refusal ratio, and in
    /// `tollgate_decisions_total` by outcome.
    fn count_checked(&self, request: &Request<'_>, decisions: &[LimitDecision]) {
        let minute = self.minute();
        for (e, d) in request.entries().iter().zip(decisions) {
            let counted = Counted::of(d.source, d.decision.is_allowed());
            match self.activity.get(e.limit.name()) {
                Some(activity) => {
                    activity.record(&e.key, counted == Counted::Denied, minute);
                    activity.decisions.count(&d.limit, counted);
                }
                // A limit the limiter was not built with (an Envoy override's): counted all
                // the same.
                None => decision_counters::series(&d.limit, counted).increment(1),
            }
        }
    }

    /// One store call, timed (see [`store_latency`]); each limit's policy when it fails.
    pub(super) async fn ask_store(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> SmallVec<[LimitDecision; 2]> {
        let started = (!self.store.in_process()).then(Instant::now);
        let answer = self.store.decide(request, op, now).await;
        self.store_answered(request, op, started, answer)
    }

    /// The store's answer (`started`: when the call began, if it is timed) as one decision
    /// per entry; when it failed, each limit's policy decides.
    fn store_answered(
        &self,
        request: &Request<'_>,
        op: Op,
        started: Option<Instant>,
        result: Result<Decisions, StoreError>,
    ) -> SmallVec<[LimitDecision; 2]> {
        if let Some(started) = started {
            store_latency(started, result.as_ref().err());
        }
        match result {
            Ok(decisions) => request
                .entries()
                .iter()
                .zip(decisions)
                .map(|(e, decision)| limit_decision(e, decision, Source::Store))
                .collect(),
            Err(error) => {
                metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().as_str())
                    .increment(1);
                self.warn_rate_limited(&error);
                self.apply_policies(request, &error, op)
            }
        }
    }

    /// The request refused by the refusals the deny cache holds for some of its entries
    /// (`hits`, from [`deny_cache_hits`], at least one). The refusal decides the whole
    /// request, as the store would (all or nothing); the request's other entries, if any,
    /// are peeked to report their real state (a read-only call, charging nothing).
    pub(super) async fn answer_from_deny_cache(
        &self,
        request: &Request<'_>,
        hits: SmallVec<[Option<Duration>; 2]>,
        now: Option<Timestamp>,
    ) -> SmallVec<[LimitDecision; 2]> {
        let entries = request.entries();
        let others: SmallVec<[usize; 2]> =
            (0..entries.len()).filter(|&i| hits[i].is_none()).collect();
        let mut peeked = if others.is_empty() {
            SmallVec::new()
        } else {
            self.ask_store(&subset(request, &others), Op::Peek, now)
                .await
        }
        .into_iter();
        entries
            .iter()
            .zip(hits)
            .map(|(e, hit)| match hit {
                Some(retry_after) => {
                    metrics::counter!(
                        "tollgate_deny_cache_hits_total",
                        "limit" => Arc::clone(e.limit.name_arc())
                    )
                    .increment(1);
                    // Not known here: reset at least until the refusal ends.
                    let decision =
                        Decision::refused(e.limit.quota().limit(), 0, retry_after, retry_after);
                    limit_decision(e, decision, Source::DenyCache)
                }
                None => peeked.next().unwrap_or_else(|| {
                    limit_decision(e, policy_denial(e.limit.quota().limit()), Source::DenyCache)
                }),
            })
            .collect()
    }

    /// Logs a store failure, at most once per second: a dead store under load would otherwise
    /// write one line per request.
    pub(super) fn warn_rate_limited(&self, error: &StoreError) {
        let Some(also) = self.warnings.admit() else {
            return;
        };
        tracing::warn!(
            kind = error.kind().as_str(),
            cause = %error,
            failures_since_last_warning = also,
            "store failed; limits follow their failure policy"
        );
    }

    /// Each limit's policy decides; `local` limits are checked on this instance's memory
    /// store, charged only if no other limit's policy denies.
    pub(super) fn apply_policies(
        &self,
        request: &Request<'_>,
        error: &StoreError,
        op: Op,
    ) -> SmallVec<[LimitDecision; 2]> {
        let kind = error.kind();
        let entries = request.entries();
        let any_deny = entries
            .iter()
            .any(|e| e.limit.policy() == OnStoreError::Deny);
        let local: SmallVec<[usize; 2]> = (0..entries.len())
            .filter(|&i| entries[i].limit.policy() == OnStoreError::Local)
            .collect();
        let mut local_decisions = if local.is_empty() {
            Decisions::new()
        } else {
            let store = self.local.get_or_init(MemoryStore::new);
            let now = self.now().unwrap_or_else(|| SteadyClock.now());
            let op = if any_deny { Op::Peek } else { op };
            let local_request = subset(request, &local);
            store
                .decide_at(&local_request, op, now)
                .unwrap_or_else(|_| deny_all(&local_request))
        }
        .into_iter();
        entries
            .iter()
            .map(|e| {
                let policy = e.limit.policy();
                let limit = e.limit.quota().limit();
                let decision = match policy {
                    OnStoreError::Allow => Decision::allowed(limit, limit, Duration::ZERO),
                    OnStoreError::Deny => policy_denial(limit),
                    OnStoreError::Local => local_decisions
                        .next()
                        .unwrap_or_else(|| policy_denial(limit)),
                };
                limit_decision(
                    e,
                    decision,
                    Source::Policy {
                        policy,
                        error: kind,
                    },
                )
            })
            .collect()
    }
}

/// Remembers the store's refusals (never a policy's: those say nothing of the key), and
/// forgets a key this instance just charged (a refusal of a larger cost now ends later).
pub(super) fn remember_denials(
    cache: &DenyCache,
    request: &Request<'_>,
    op: Op,
    decisions: &[LimitDecision],
    asked_at: u64,
) {
    let charged =
        op == Op::Check && request.admitted(decisions.iter().map(|d| d.decision.is_allowed()));
    for (e, d) in request.entries().iter().zip(decisions) {
        match (d.source, d.decision.refusal()) {
            // A limit kept out of the cache leaves no refusal behind (`Limit::deny_cache`).
            (Source::Store, Some(_)) if !e.limit.uses_deny_cache() => {}
            (Source::Store, Some(refusal)) => {
                cache.insert(&e.key, e.cost, asked_at, refusal.retry_after());
            }
            (Source::Store, None) if charged => cache.forget(&e.key),
            _ => {}
        }
    }
}

pub(super) fn limit_decision(
    entry: &Entry<'_>,
    decision: Decision,
    source: Source,
) -> LimitDecision {
    LimitDecision {
        limit: name_copy::name_copy(entry.limit.name_arc()),
        quota: *entry.limit.quota(),
        decision,
        source,
        shadow: entry.shadow,
        need: entry.need,
    }
}

pub(super) fn policy_denial(limit: u64) -> Decision {
    Decision::refused(limit, 0, Duration::ZERO, POLICY_RETRY_AFTER)
}

pub(super) fn deny_all(request: &Request<'_>) -> Decisions {
    request
        .entries()
        .iter()
        .map(|e| policy_denial(e.limit.quota().limit()))
        .collect()
}

/// Per entry of `request`, the wait of the refusal the deny cache holds for it at
/// `asked_at`, if any.
pub(super) fn deny_cache_hits(
    cache: &DenyCache,
    request: &Request<'_>,
    asked_at: u64,
) -> SmallVec<[Option<Duration>; 2]> {
    request
        .entries()
        .iter()
        // Only an entry that must admit decides the request alone.
        .map(|e| match e.need {
            Need::Must if e.limit.uses_deny_cache() => {
                cache.get(&e.key, e.cost, asked_at).map(|h| h.retry_after)
            }
            // A limit kept out of the cache (`Limit::deny_cache`) is always asked of the store.
            Need::Must | Need::OneOf | Need::Optional => None,
        })
        .collect()
}

/// Records a store call's latency in `tollgate_store_latency_seconds`, unless the store's
/// circuit breaker refused it at once: such a refusal never reached the store, and counted
/// as a call it would show an outage as a store answering in a microsecond (p50 and p90 at
/// the lowest bucket while Redis is down). Breaker refusals are counted on their own, as
/// `tollgate_store_errors_total{kind="circuit_open"}`.
pub(crate) fn store_latency(started: Instant, error: Option<&StoreError>) {
    if error.is_some_and(|e| e.kind() == crate::StoreErrorKind::CircuitOpen) {
        return;
    }
    metrics::histogram!("tollgate_store_latency_seconds").record(started.elapsed());
}
