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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::ask::Asked;
use crate::deny_cache::DenyCache;
use crate::lease_tier::LeaseTier;
use crate::log_throttle::LogThrottle;
use crate::top_denied::{LimitActivity, Span, TopKey};
use crate::verdict::{LimitDecision, Source};
use crate::{
    Ask, CheckError, Clock, Decision, Decisions, Entry, Key, Limit, LimitError, MAX_KEY_VALUE,
    MemoryStore, Namespace, Need, OnStoreError, Op, Request, Store, StoreError, SystemClock,
    Timestamp, Verdict,
};

mod leased;
mod name_copy;

/// One (limit name, key parts) pair of [`Limiter::prepare_keyed`].
pub type KeyedLimit<'a, V> = (&'a str, &'a [(&'a str, V)]);

/// One (limit name, key parts, cost) triple of [`Limiter::prepare_keyed_costs`].
pub type CostedLimit<'a, V> = (&'a str, &'a [(&'a str, V)], u64);

/// How long a request denied by a `deny` policy is told to wait.
pub const POLICY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Hashes limit names, looked up on every decision (twice: the limit, its activity): short
/// strings the process's own config chose, so a fast hasher with a random seed suffices.
type NameHasher = foldhash::fast::RandomState;

/// Named limits over a store.
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
    /// Per limit: the most refused keys and the refusal ratio.
    activity: HashMap<Arc<str>, LimitActivity, NameHasher>,
    /// Store-failure warnings: one a second at most, the rest counted
    /// (`tollgate_store_errors_total`) and summed into the next one.
    warnings: LogThrottle,
}

/// Configures a [`Limiter`].
pub struct LimiterBuilder<S> {
    store: S,
    limits: Vec<Limit>,
    namespace: Namespace,
    clock: Option<Arc<dyn Clock>>,
    deny_cache: Option<usize>,
}

impl<S: Store> LimiterBuilder<S> {
    /// Adds a limit.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Adds limits.
    pub fn limits(mut self, limits: impl IntoIterator<Item = Limit>) -> Self {
        self.limits.extend(limits);
        self
    }

    /// The key prefix (default `tollgate`).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = namespace;
        self
    }

    /// Decide at this clock's time instead of the store's.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Remembers up to `entries` refusals and answers them without a store call while they
    /// hold: exact (a refusal of cost `c` holds for every cost ≥ `c` until its
    /// `retry_after`, whatever other instances do), and worth it in front of a remote store,
    /// where it turns an abusive client's flood of refused requests into no store traffic at
    /// all. `0` turns it off (the default). Resets on other instances must be forwarded with
    /// [`Limiter::forget_denial`]; see the crate docs of `deny_cache` for the bound when they
    /// are not.
    pub fn deny_cache(mut self, entries: usize) -> Self {
        self.deny_cache = (entries > 0).then_some(entries);
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    /// [`LimitError::InvalidName`] naming `name` when two limits share a name.
    pub fn build(self) -> Result<Limiter<S>, LimitError> {
        let mut limits =
            HashMap::with_capacity_and_hasher(self.limits.len(), NameHasher::default());
        for limit in self.limits {
            let name = limit.name_arc().clone();
            if limits.insert(name.clone(), limit).is_some() {
                return Err(LimitError::InvalidName {
                    field: "name",
                    value: name.to_string(),
                    reason: "is used by two limits",
                });
            }
        }
        let activity = limits
            .keys()
            .map(|name| (Arc::clone(name), LimitActivity::default()))
            .collect();
        Ok(Limiter {
            store: self.store,
            activity,
            limits,
            namespace: self.namespace,
            clock: self.clock,
            local: OnceLock::new(),
            deny_cache: self.deny_cache.map(DenyCache::new),
            leases: LeaseTier::new(),
            warnings: LogThrottle::default(),
        })
    }
}

impl<S: Store> Limiter<S> {
    /// A builder over `store`.
    pub fn builder(store: S) -> LimiterBuilder<S> {
        LimiterBuilder {
            store,
            limits: Vec::new(),
            namespace: Namespace::default(),
            clock: None,
            deny_cache: None,
        }
    }

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

    /// Prepares a check of `cost` units against `limits` for `key`: every key built once,
    /// everything a check can refuse validated once, before any store call. The request can
    /// then be decided as a check or a peek ([`Limiter::decide`]) or reset
    /// ([`Limiter::reset`]).
    ///
    /// ```
    /// use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Op, Outcome, Quota};
    ///
    /// # tokio_test();
    /// # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let limiter = Limiter::builder(MemoryStore::new())
    ///     .limit(Limit::new("api", Algorithm::SlidingLog, Quota::per_minute(10)?)?.keyed_by(["user"])?)
    ///     .build()?;
    /// let request = limiter.prepare(&["api"], &[("user", "42")], 4)?;
    /// assert_eq!(limiter.decide(&request, Op::Peek).await.decision().remaining, 10);
    /// assert_eq!(limiter.decide(&request, Op::Check).await.outcome(), Outcome::Allowed);
    /// assert_eq!(limiter.decide(&request, Op::Peek).await.decision().remaining, 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap() }
    /// ```
    ///
    /// # Errors
    /// [`CheckError`]: unknown limit, missing key part, key part too long, no limit, a limit
    /// named twice, a cost of 0 or above a limit's capacity.
    pub fn prepare<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &name in limits {
            entries.push(self.entry(name, key)?);
        }
        Request::new(entries, cost)
    }

    /// Prepares a check of `cost` units against several (limit, key) pairs, each with its own
    /// key parts, decided all or nothing in one store call. One limit may appear with
    /// different keys (an Envoy request limiting two clients at once).
    ///
    /// # Errors
    /// As [`Limiter::prepare`].
    pub fn prepare_keyed<V: AsRef<[u8]>>(
        &self,
        items: &[KeyedLimit<'_, V>],
        cost: u64,
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &(name, key) in items {
            entries.push(self.entry(name, key)?);
        }
        Request::new(entries, cost)
    }

    /// Prepares a check of several (limit, key) pairs, each with its own key parts and its
    /// own cost, decided all or nothing in one store call (an Envoy request whose
    /// descriptors ask different `hits_addend`s).
    ///
    /// # Errors
    /// As [`Limiter::prepare`], for each entry's cost.
    pub fn prepare_keyed_costs<V: AsRef<[u8]>>(
        &self,
        items: &[CostedLimit<'_, V>],
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &(name, key, cost) in items {
            entries.push(self.entry(name, key)?.with_cost(cost));
        }
        Request::with_costs(entries)
    }

    /// Prepares a check of entries built for this call ([`Ask`]): each a limit of the
    /// limiter or one made for this request, with its key parts, its own cost, a shadow flag
    /// and a [`Need`]. Keys are built and everything is validated as by
    /// [`Limiter::prepare`]: the one way in for requests that are more than names and a cost
    /// (the Envoy face's rules in shadow mode, quota descriptors, per-request `limit`
    /// overrides).
    ///
    /// # Errors
    /// As [`Limiter::prepare`], for each entry; for a limit keyed by whatever it is given,
    /// [`CheckError::KeyPartTooLong`] also for a part *name* above
    /// [`MAX_KEY_VALUE`](crate::MAX_KEY_VALUE) bytes (the name is the caller's too).
    pub fn prepare_with<'l, 'k, V: AsRef<[u8]> + 'k>(
        &'l self,
        asks: impl IntoIterator<Item = Ask<'l, 'k, V>>,
    ) -> Result<Request<'l>, CheckError> {
        let mut entries: SmallVec<[Entry<'l>; 2]> = SmallVec::new();
        for ask in asks {
            let limit = match ask.limit {
                Asked::Named(name) => self.named(name)?,
                Asked::Own(limit) => limit,
            };
            let mut entry = self.entry_for(limit, ask.key)?.with_cost(ask.cost);
            entry.shadow |= ask.shadow;
            entry.need = ask.need;
            entries.push(entry);
        }
        Request::with_costs(entries)
    }

    /// Decides a prepared request: [`Op::Check`] charges the enforced limits all or nothing,
    /// [`Op::Peek`] charges nothing. Shadow entries are decided after the enforced ones, each
    /// on its own, charged only when the enforced ones admit a check. A store failure is
    /// never an error here: each limit's [`OnStoreError`] policy decides, and the verdict's
    /// [`Outcome`](crate::Outcome) tells a refusal by policy
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

    /// The key `limit` uses for `key` (for operators inspecting Redis).
    ///
    /// # Errors
    /// [`CheckError::UnknownLimit`], [`CheckError::MissingKeyPart`] or
    /// [`CheckError::KeyPartTooLong`].
    pub fn key<V: AsRef<[u8]>>(&self, limit: &str, key: &[(&str, V)]) -> Result<Key, CheckError> {
        self.entry(limit, key).map(|e| e.key)
    }

    /// The entry for limit `name` and the parts of `key` it is keyed by: the one place a
    /// key is built from a caller's parts.
    fn entry<'l, V: AsRef<[u8]>>(
        &'l self,
        name: &str,
        key: &[(&str, V)],
    ) -> Result<Entry<'l>, CheckError> {
        self.entry_for(self.named(name)?, key)
    }

    /// The limit named `name`.
    fn named(&self, name: &str) -> Result<&Limit, CheckError> {
        self.limits
            .get(name)
            .ok_or_else(|| CheckError::UnknownLimit(name.to_owned()))
    }

    /// The entry for `limit` (the limiter's or one made for a request) and the parts of
    /// `key` it is keyed by.
    fn entry_for<'l, V: AsRef<[u8]>>(
        &self,
        limit: &'l Limit,
        key: &[(&str, V)],
    ) -> Result<Entry<'l>, CheckError> {
        let mut parts: SmallVec<[(&str, &[u8]); 4]> = SmallVec::new();
        match limit.key_parts() {
            Some(names) => {
                for part in names {
                    let value = key.iter().find(|(n, _)| *n == &**part).ok_or_else(|| {
                        CheckError::MissingKeyPart {
                            limit: limit.name().to_owned(),
                            part: part.to_string(),
                        }
                    })?;
                    parts.push((part, value.1.as_ref()));
                }
            }
            None => {
                // Keyed by whatever it is given: the names are the caller's too.
                if let Some((name, _)) = key.iter().find(|(n, _)| n.len() > MAX_KEY_VALUE) {
                    return Err(CheckError::KeyPartTooLong {
                        part: name.chars().take(32).collect(),
                        max: MAX_KEY_VALUE,
                    });
                }
                parts.extend(key.iter().map(|(n, v)| (*n, v.as_ref())));
            }
        }
        if let Some((part, _)) = parts.iter().find(|(_, v)| v.len() > MAX_KEY_VALUE) {
            return Err(CheckError::KeyPartTooLong {
                part: (*part).to_owned(),
                max: MAX_KEY_VALUE,
            });
        }
        Ok(Entry::new(limit, Key::new(&self.namespace, limit, &parts)))
    }

    fn now(&self) -> Option<Timestamp> {
        self.clock.as_ref().map(|c| c.now())
    }

    /// The current minute (µs ÷ 60 s) on the limiter's clock, else the system's: the unit of
    /// the refusal ratio and of the recent top-k.
    fn minute(&self) -> u64 {
        self.now().unwrap_or_else(|| SystemClock.now()).as_micros() / 60_000_000
    }

    /// Asks the store (timing the call), applies the policies when it fails, and counts
    /// every decision: the one path of every check and peek.
    async fn run(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> SmallVec<[LimitDecision; 2]> {
        let leased = op == Op::Check
            && request
                .entries()
                .iter()
                .any(|e| e.limit.lease_mode().is_some());
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
                let decisions = self.ask_store(request, op, now).await;
                if let Some((cache, asked_at)) = remember {
                    remember_denials(cache, request, op, &decisions, asked_at);
                }
                decisions
            }
        };
        if op == Op::Check {
            let minute = self.minute();
            for (e, d) in request.entries().iter().zip(&decisions) {
                let refused = !d.decision.is_allowed()
                    && matches!(d.source, Source::Store | Source::DenyCache | Source::Lease);
                if let Some(activity) = self.activity.get(e.limit.name()) {
                    activity.record(&e.key, refused, minute);
                }
            }
            for d in &decisions {
                let outcome = match (d.source, d.decision.is_allowed()) {
                    (Source::Store | Source::DenyCache | Source::Lease, true) => "allowed",
                    (Source::Store | Source::DenyCache | Source::Lease, false) => "denied",
                    (Source::Policy { .. }, true) => "store_error_allowed",
                    (Source::Policy { .. }, false) => "store_error_denied",
                };
                metrics::counter!(
                    "tollgate_decisions_total",
                    "limit" => Arc::clone(&d.limit),
                    "outcome" => outcome
                )
                .increment(1);
            }
        }
        decisions
    }

    /// One store call, timed (see [`store_latency`]); each limit's policy when it fails.
    async fn ask_store(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> SmallVec<[LimitDecision; 2]> {
        let started = (!self.store.in_process()).then(Instant::now);
        let result = self.store.decide(request, op, now).await;
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
    async fn answer_from_deny_cache(
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
    fn warn_rate_limited(&self, error: &StoreError) {
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
    fn apply_policies(
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
            let now = self.now().unwrap_or_else(|| SystemClock.now());
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
fn remember_denials(
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
            (Source::Store, Some(refusal)) => {
                cache.insert(&e.key, e.cost, asked_at, refusal.retry_after());
            }
            (Source::Store, None) if charged => cache.forget(&e.key),
            _ => {}
        }
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

fn limit_decision(entry: &Entry<'_>, decision: Decision, source: Source) -> LimitDecision {
    LimitDecision {
        limit: name_copy::name_copy(entry.limit.name_arc()),
        quota: *entry.limit.quota(),
        decision,
        source,
        shadow: entry.shadow,
        need: entry.need,
    }
}

fn policy_denial(limit: u64) -> Decision {
    Decision::refused(limit, 0, Duration::ZERO, POLICY_RETRY_AFTER)
}

fn deny_all(request: &Request<'_>) -> Decisions {
    request
        .entries()
        .iter()
        .map(|e| policy_denial(e.limit.quota().limit()))
        .collect()
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

impl<S> fmt::Debug for LimiterBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("limits", &self.limits.len())
            .finish_non_exhaustive()
    }
}

/// Records a store call's latency in `tollgate_store_latency_seconds`, unless the store's
/// circuit breaker refused it at once: such a refusal never reached the store, and counted
/// as a call it would show an outage as a store answering in a microsecond (p50 and p90 at
/// the lowest bucket while Redis is down). Breaker refusals are counted on their own, as
/// `tollgate_store_errors_total{kind="circuit_open"}`.
/// Per entry of `request`, the wait of the refusal the deny cache holds for it at
/// `asked_at`, if any.
fn deny_cache_hits(
    cache: &DenyCache,
    request: &Request<'_>,
    asked_at: u64,
) -> SmallVec<[Option<Duration>; 2]> {
    request
        .entries()
        .iter()
        // Only an entry that must admit decides the request alone.
        .map(|e| match e.need {
            Need::Must => cache.get(&e.key, e.cost, asked_at).map(|h| h.retry_after),
            Need::OneOf | Need::Optional => None,
        })
        .collect()
}

pub(crate) fn store_latency(started: Instant, error: Option<&StoreError>) {
    if error.is_some_and(|e| e.kind() == crate::StoreErrorKind::CircuitOpen) {
        return;
    }
    metrics::histogram!("tollgate_store_latency_seconds").record(started.elapsed());
}
