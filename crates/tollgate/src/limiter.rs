//! The facade a service holds: named limits, a store and (optionally) a clock.
//!
//! It owns the protocol of a check, the same for every face (library, tower layer, HTTP API,
//! Envoy service):
//! 1. [`Limiter::prepare`] turns names and key parts into a [`Request`]: each key built once,
//!    everything that can be wrong with the request found once, as a typed [`CheckError`];
//! 2. [`Limiter::decide`] runs it with an [`Op`] (check or peek): one store call for the
//!    enforced limits, each limit's failure policy when the store fails, shadow limits after,
//!    every decision counted through the `metrics` facade;
//! 3. the [`Verdict`] says what happened, and its [`Outcome`](crate::Outcome) which of the three answers it is.
//!
//! It decides nothing itself: the store does, atomically.
//!
//! Time: by default the store's own (Redis `TIME`), so that instances whose clocks disagree
//! still agree on every decision. [`LimiterBuilder::clock`] makes the limiter pass its clock's
//! `now` on every call instead, for tests and simulations.
//!
//! Beside it in `limiter/`: the builder, the steps of a call (prepare, the store call, leased
//! entries, pacing), and what the limiter keeps between calls: the deny cache, the top-refused-keys
//! sketch (`/v1/top`) and [`CheckError`](crate::CheckError), what a call that cannot be made
//! answers.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use crate::lease::tier::LeaseTier;
use crate::limiter::deny_cache::DenyCache;
use crate::limiter::top_denied::{LimitActivity, Span, TopKey};
use crate::log_throttle::LogThrottle;
use crate::verdict::LimitDecision;
use crate::{
    CheckError, Clock, Limit, MemoryStore, Namespace, Op, Request, Store, StoreError, SystemClock,
    Timestamp, Verdict,
};

#[cfg(feature = "tokio")]
mod acquire;
mod builder;
pub(crate) mod check_error;
mod decision_counters;
pub(crate) mod deny_cache;
mod leased;
mod name_copy;
mod pacing;
mod prepare;
mod store_call;
pub(crate) mod top_denied;

pub use builder::LimiterBuilder;
pub(crate) use store_call::store_latency;
use store_call::{limit_decision, policy_denial};

/// One (limit name, key parts) pair of [`Limiter::prepare_keyed`].
pub(crate) type KeyedLimit<'a, V> = (&'a str, &'a [(&'a str, V)]);

/// One (limit name, key parts, cost) triple of [`Limiter::prepare_keyed_costs`].
pub type CostedLimit<'a, V> = (&'a str, &'a [(&'a str, V)], u64);

/// Hashes limit names, looked up on every decision (twice: the limit, its activity): short
/// strings the process's own config chose, so a fast hasher with a random seed suffices.
type NameHasher = foldhash::fast::RandomState;

/// Named limits over a store.
///
/// It reports through the `metrics` crate's recorder (`tollgate_decisions_total` and the
/// others docs/service.md lists). A limit's `tollgate_decisions_total` handles are taken on
/// its first decision and kept: install the recorder before the first check, as the
/// `metrics` crate asks, or that limit's decisions are counted by the recorder in place
/// then (none, by default).
pub struct Limiter<S> {
    store: S,
    limits: HashMap<Arc<str>, Limit, NameHasher>,
    namespace: Namespace,
    clock: Option<Arc<dyn Clock>>,
    /// The `local` policy's store, made on first use.
    local: OnceLock<MemoryStore>,
    /// Refusals answered without a store call, when enabled.
    deny_cache: Option<DenyCache>,
    /// Units taken ahead for lease-mode limits (`crate::lease`).
    leases: LeaseTier,
    /// Per limit: the most refused keys, the refusal ratio and the decision counters.
    activity: HashMap<Arc<str>, LimitActivity, NameHasher>,
    /// Store-failure warnings: one a second at most, the rest counted
    /// (`tollgate_store_errors_total`) and summed into the next one.
    warnings: LogThrottle,
}

impl<S: Store> Limiter<S> {
    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The key prefix every key of this limiter starts with (limits made for a request,
    /// asked through [`Limiter::prepare_with`], are keyed in it too).
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The limit named `name`.
    pub fn get(&self, name: &str) -> Option<&Limit> {
        self.limits.get(name)
    }

    /// Every limit, in no particular order.
    pub fn limits(&self) -> impl Iterator<Item = &Limit> {
        self.limits.values()
    }

    /// Checks one unit against `limit` for `key`, consuming it when allowed.
    ///
    /// ```
    /// use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Outcome, Quota};
    ///
    /// # tokio_test();
    /// # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let limiter = Limiter::builder(MemoryStore::new())
    ///     .limit(Limit::new("sms", Algorithm::Gcra, Quota::per_minute(2)?)?)
    ///     .build()?;
    /// let key = [("user", "42")];
    /// assert_eq!(limiter.check("sms", &key).await?.outcome(), Outcome::Allowed);
    /// assert_eq!(limiter.check("sms", &key).await?.outcome(), Outcome::Allowed);
    /// match limiter.check("sms", &key).await?.outcome() {
    ///     Outcome::Limited { retry_after } => assert!(retry_after.as_secs() <= 30),
    ///     other => panic!("expected a refusal, got {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap() }
    /// ```
    ///
    /// # Errors
    /// [`CheckError`] for an unknown limit or a missing key part. Store failures do not
    /// surface as errors: the limit's policy decides, and the verdict's [`Outcome`](crate::Outcome) says so.
    pub async fn check<V: AsRef<[u8]>>(
        &self,
        limit: &str,
        key: &[(&str, V)],
    ) -> Result<Verdict, CheckError> {
        self.check_all_n(&[limit], key, 1).await
    }

    /// Checks `cost` units against `limit` for `key`.
    ///
    /// # Errors
    /// As [`Limiter::check`], and [`CheckError::ZeroCost`] / [`CheckError::CostExceedsCapacity`].
    pub async fn check_n<V: AsRef<[u8]>>(
        &self,
        limit: &str,
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        self.check_all_n(&[limit], key, cost).await
    }

    /// Checks one unit against every limit in `limits`, all or nothing: either every limit
    /// admits and all are charged, or none is charged. Each limit takes the key parts it is
    /// keyed by from `key`.
    ///
    /// # Errors
    /// As [`Limiter::check`], and [`CheckError::NoLimits`] / [`CheckError::DuplicateLimit`].
    pub async fn check_all<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
    ) -> Result<Verdict, CheckError> {
        self.check_all_n(limits, key, 1).await
    }

    /// Checks `cost` units against every limit in `limits`, all or nothing.
    ///
    /// # Errors
    /// As [`Limiter::check_all`] and [`Limiter::check_n`].
    pub async fn check_all_n<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.prepare(limits, key, cost)?;
        Ok(self.decide(&request, Op::Check).await)
    }

    /// Decides a prepared request: [`Op::Check`] charges the enforced limits all or nothing,
    /// [`Op::Peek`] charges nothing. Shadow entries are decided after the enforced ones, each
    /// on its own, charged only when the enforced ones admit a check. A store failure is
    /// never an error here: each limit's [`OnStoreError`](crate::OnStoreError) policy
    /// decides, and the verdict's [`Outcome`](crate::Outcome) tells a refusal by policy
    /// ([`Outcome::Unavailable`](crate::Outcome::Unavailable)) from a refusal by a quota
    /// ([`Outcome::Limited`](crate::Outcome::Limited)).
    pub async fn decide(&self, request: &Request<'_>, op: Op) -> Verdict {
        let now = self.now();
        let entries = request.entries();
        if !entries.iter().any(|e| e.shadow) {
            return Verdict::new(self.run(request, op, now).await);
        }
        if request.counts_refusals() {
            // Every entry on its own, charged whatever it answers: shadow entries need no
            // call of their own (there is no all or nothing to keep them out of).
            let decisions = self.run(request, op, now).await;
            if op == Op::Check {
                for d in decisions.iter().filter(|d| d.shadow_refused()) {
                    count_shadow_denial(d);
                }
            }
            return Verdict::new(decisions);
        }
        // Boxed: inline, this path's locals would make every decision's state larger, and
        // a future is copied whole each time it is moved (into a task, a timeout, a caller's
        // state).
        Box::pin(self.decide_with_shadows(request, op, now)).await
    }

    /// [`Limiter::decide`] of a request with shadow entries: the enforced ones first, then
    /// each shadow entry on its own, charged only when the enforced ones admit a check.
    async fn decide_with_shadows(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Verdict {
        let entries = request.entries();
        let mut out: SmallVec<[Option<LimitDecision>; 2]> =
            SmallVec::from_elem(None, entries.len());
        let (shadow, enforced): (SmallVec<[usize; 2]>, SmallVec<[usize; 2]>) =
            (0..entries.len()).partition(|&i| entries[i].shadow);
        let mut admitted = true;
        if !enforced.is_empty() {
            let part = subset(request, &enforced);
            let decisions = self.run(&part, op, now).await;
            admitted = part.admitted(decisions.iter().map(|d| d.decision.is_allowed()));
            for (i, d) in enforced.iter().zip(decisions) {
                out[*i] = Some(d);
            }
        }
        if op == Op::Check && admitted {
            // Each shadow limit on its own: one would-be refusal must not keep another
            // shadow limit from counting.
            for &i in &shadow {
                let decisions = self.run(&subset(request, &[i]), Op::Check, now).await;
                for d in decisions {
                    if !d.decision.is_allowed() {
                        count_shadow_denial(&d);
                    }
                    out[i] = Some(d);
                }
            }
        } else {
            // A refused request would not have reached a shadow limit either: report, do
            // not charge.
            let decisions = self.run(&subset(request, &shadow), Op::Peek, now).await;
            for (i, d) in shadow.iter().zip(decisions) {
                out[*i] = Some(d);
            }
        }
        Verdict::new(out.into_iter().flatten().collect())
    }

    /// Forgets the key of every entry of `request` (in the store and in the `local`
    /// fallback).
    ///
    /// # Errors
    /// The store's failure: no policy applies to a reset.
    pub async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        if let Some(local) = self.local.get() {
            local.reset_now(request);
        }
        if let Some(cache) = &self.deny_cache {
            for e in request.entries() {
                cache.forget(&e.key);
            }
        }
        for e in request.entries() {
            self.leases.forget(&e.key);
        }
        self.store.reset(request).await
    }

    /// Forgets a refusal this instance's deny cache holds for the key whose text is `key`:
    /// the key was reset on another instance (the service hears of it through Redis
    /// pub/sub). Returns whether one was held.
    pub fn forget_denial(&self, key: &str) -> bool {
        self.deny_cache
            .as_ref()
            .is_some_and(|cache| cache.forget_text(key))
    }

    /// The `k` keys of `limit` refused most often over `span` (refusals by a quota, not by a
    /// failure policy), most refused first, each with its count and the most that count may
    /// overstate (a bounded sketch: see [`crate::TopKey`]). `None` for an unknown limit.
    pub fn top_denied(&self, limit: &str, k: usize, span: Span) -> Option<Vec<TopKey>> {
        let minute = self.minute();
        Some(self.activity.get(limit)?.top(k, span, minute))
    }

    /// The share of `limit`'s checks refused by its quota over the last minute (the current
    /// and the previous calendar minute); `None` for an unknown limit or no check.
    pub fn deny_ratio(&self, limit: &str) -> Option<f64> {
        let minute = self.minute();
        self.activity.get(limit)?.deny_ratio(minute)
    }

    /// Refusals the deny cache holds (0 when it is off).
    pub fn deny_cache_len(&self) -> usize {
        self.deny_cache.as_ref().map_or(0, DenyCache::len)
    }

    fn now(&self) -> Option<Timestamp> {
        self.clock.as_ref().map(|c| c.now())
    }

    /// The current minute (µs ÷ 60 s) on the limiter's clock, else the system's: the unit of
    /// the refusal ratio and of the recent top-k.
    fn minute(&self) -> u64 {
        self.now().unwrap_or_else(|| SystemClock.now()).as_micros() / 60_000_000
    }
}

fn count_shadow_denial(d: &LimitDecision) {
    metrics::counter!(
        "tollgate_shadow_denied_total",
        "limit" => Arc::clone(&d.limit)
    )
    .increment(1);
    tracing::debug!(limit = %d.limit, source = ?d.source, "shadow limit would refuse");
}

/// The entries at `indices` of a request, as a request of their own.
fn subset<'a>(request: &Request<'a>, indices: &[usize]) -> Request<'a> {
    let entries = indices
        .iter()
        .map(|&i| request.entries()[i].clone())
        .collect();
    Request::subset_of(request, entries)
}

impl<S> fmt::Debug for Limiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.limits.keys().map(|k| &**k).collect();
        names.sort_unstable();
        f.debug_struct("Limiter")
            .field("limits", &names)
            .field("namespace", &self.namespace)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
