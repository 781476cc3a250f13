//! The facade a service holds: named limits, a store and (optionally) a clock.
//!
//! It turns names and key parts into a [`Request`], asks the store, applies each limit's
//! failure policy when the store fails, and counts every decision through the `metrics`
//! facade. It decides nothing itself: the store does, atomically.
//!
//! Time: by default the store's own (Redis `TIME`), so that instances whose clocks disagree
//! still agree on every decision. [`LimiterBuilder::clock`] makes the limiter pass its clock's
//! `now` on every call instead, for tests and simulations.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::store::Decisions;
use crate::verdict::{LimitDecision, Source};
use crate::{
    CheckError, Clock, Decision, Entry, Key, Limit, LimitError, MemoryStore, Namespace,
    OnStoreError, Request, Store, StoreError, SystemClock, Timestamp, Verdict,
};

/// One (limit name, key parts) pair of [`Limiter::check_keyed`].
pub type KeyedLimit<'a, V> = (&'a str, &'a [(&'a str, V)]);

/// At most one store-failure warning is logged per this interval; the rest are counted
/// (`tollgate_store_errors_total`) and summed into the next warning.
const WARN_INTERVAL_US: u64 = 1_000_000;

/// How long a request denied by a `deny` policy is told to wait.
pub const POLICY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Named limits over a store.
pub struct Limiter<S> {
    store: S,
    limits: HashMap<Arc<str>, Limit>,
    namespace: Namespace,
    clock: Option<Arc<dyn Clock>>,
    /// The `local` policy's store, made on first use.
    local: OnceLock<MemoryStore>,
    /// When the last store-failure warning was logged (µs), and failures since.
    last_warning: AtomicU64,
    unlogged_failures: AtomicU64,
}

/// Configures a [`Limiter`].
pub struct LimiterBuilder<S> {
    store: S,
    limits: Vec<Limit>,
    namespace: Namespace,
    clock: Option<Arc<dyn Clock>>,
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

    /// Builds the limiter.
    ///
    /// # Errors
    /// [`LimitError::InvalidName`] naming `name` when two limits share a name.
    pub fn build(self) -> Result<Limiter<S>, LimitError> {
        let mut limits = HashMap::with_capacity(self.limits.len());
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
        Ok(Limiter {
            store: self.store,
            limits,
            namespace: self.namespace,
            clock: self.clock,
            local: OnceLock::new(),
            last_warning: AtomicU64::new(0),
            unlogged_failures: AtomicU64::new(0),
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
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
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
    /// use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};
    ///
    /// # tokio_test();
    /// # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let limiter = Limiter::builder(MemoryStore::new())
    ///     .limit(Limit::new("sms", Algorithm::Gcra, Quota::per_minute(2)?)?)
    ///     .build()?;
    /// let key = [("user", "42")];
    /// assert!(limiter.check("sms", &key).await?.is_allowed());
    /// assert!(limiter.check("sms", &key).await?.is_allowed());
    /// let third = limiter.check("sms", &key).await?;
    /// assert!(!third.is_allowed());
    /// assert!(third.retry_after().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap() }
    /// ```
    ///
    /// # Errors
    /// [`CheckError`] for an unknown limit or a missing key part. Store failures do not
    /// surface: the limit's policy decides.
    pub async fn check<V: AsRef<[u8]>>(
        &self,
        limit: &str,
        key: &[(&str, V)],
    ) -> Result<Verdict, CheckError> {
        self.check_all(&[limit], key, 1).await
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
        self.check_all(&[limit], key, cost).await
    }

    /// Checks `cost` units against every limit in `limits`, all or nothing: either every limit
    /// admits and all are charged, or none is charged. Each limit takes the key parts it is
    /// keyed by from `key`.
    ///
    /// # Errors
    /// As [`Limiter::check_n`], and [`CheckError::NoLimits`] / [`CheckError::DuplicateLimit`].
    pub async fn check_all<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.request(limits, key, cost)?;
        let now = self.now();
        let started = Instant::now();
        let result = self.store.check(&request, now).await;
        metrics::histogram!("tollgate_store_latency_seconds").record(started.elapsed());
        Ok(self.verdict(&request, result, true))
    }

    /// Checks `cost` units against several (limit, key) pairs, each with its own key parts,
    /// all or nothing in one store call: either every pair admits and all are charged, or none
    /// is. One limit may appear with different keys.
    ///
    /// # Errors
    /// As [`Limiter::check_all`].
    pub async fn check_keyed<V: AsRef<[u8]>>(
        &self,
        items: &[KeyedLimit<'_, V>],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.request_keyed(items, cost)?;
        let started = Instant::now();
        let result = self.store.check(&request, self.now()).await;
        metrics::histogram!("tollgate_store_latency_seconds").record(started.elapsed());
        Ok(self.verdict(&request, result, true))
    }

    /// Answers as [`Limiter::check_keyed`] would, consuming nothing.
    ///
    /// # Errors
    /// As [`Limiter::check_all`].
    pub async fn peek_keyed<V: AsRef<[u8]>>(
        &self,
        items: &[KeyedLimit<'_, V>],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.request_keyed(items, cost)?;
        let result = self.store.peek(&request, self.now()).await;
        Ok(self.verdict(&request, result, false))
    }

    /// Answers as [`Limiter::check_all`] would, consuming nothing.
    ///
    /// # Errors
    /// As [`Limiter::check_all`].
    pub async fn peek<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.request(limits, key, cost)?;
        let result = self.store.peek(&request, self.now()).await;
        Ok(self.verdict(&request, result, false))
    }

    /// Forgets `key`'s state for each of `limits`.
    ///
    /// # Errors
    /// As [`Limiter::check_all`], and [`CheckError::Store`] when the store fails.
    pub async fn reset<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
    ) -> Result<(), CheckError> {
        let request = self.request(limits, key, 1)?;
        if let Some(local) = self.local.get() {
            local.reset_now(&request);
        }
        self.store.reset(&request).await?;
        Ok(())
    }

    /// The key `limit` uses for `key` (for operators inspecting Redis).
    ///
    /// # Errors
    /// [`CheckError::UnknownLimit`] or [`CheckError::MissingKeyPart`].
    pub fn key<V: AsRef<[u8]>>(&self, limit: &str, key: &[(&str, V)]) -> Result<Key, CheckError> {
        let limit = self
            .limits
            .get(limit)
            .ok_or_else(|| CheckError::UnknownLimit(limit.to_owned()))?;
        self.key_for(limit, key)
    }

    fn key_for<V: AsRef<[u8]>>(&self, limit: &Limit, key: &[(&str, V)]) -> Result<Key, CheckError> {
        let Some(names) = limit.key_parts() else {
            return Ok(Key::new(&self.namespace, limit, key));
        };
        let mut parts: SmallVec<[(&str, &[u8]); 4]> = SmallVec::new();
        for name in names {
            let value = key.iter().find(|(n, _)| *n == &**name).ok_or_else(|| {
                CheckError::MissingKeyPart {
                    limit: limit.name().to_owned(),
                    part: name.to_string(),
                }
            })?;
            parts.push((name, value.1.as_ref()));
        }
        Ok(Key::new(&self.namespace, limit, &parts))
    }

    fn request<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Request<'_>, CheckError> {
        let items: SmallVec<[KeyedLimit<'_, V>; 2]> =
            limits.iter().map(|&name| (name, key)).collect();
        self.request_keyed(&items, cost)
    }

    fn request_keyed<V: AsRef<[u8]>>(
        &self,
        items: &[KeyedLimit<'_, V>],
        cost: u64,
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &(name, key) in items {
            let limit = self
                .limits
                .get(name)
                .ok_or_else(|| CheckError::UnknownLimit(name.to_owned()))?;
            entries.push(Entry {
                limit,
                key: self.key_for(limit, key)?,
            });
        }
        Request::new(entries, cost)
    }

    fn now(&self) -> Option<Timestamp> {
        self.clock.as_ref().map(|c| c.now())
    }

    /// Turns the store's answer, or its failure, into a verdict, and counts it.
    fn verdict(
        &self,
        request: &Request<'_>,
        result: Result<Decisions, StoreError>,
        charge: bool,
    ) -> Verdict {
        let decisions = match result {
            Ok(decisions) => request
                .entries()
                .iter()
                .zip(decisions)
                .map(|(e, decision)| LimitDecision {
                    limit: e.limit.name_arc().clone(),
                    decision,
                    source: Source::Store,
                })
                .collect(),
            Err(error) => {
                metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().as_str())
                    .increment(1);
                self.warn_rate_limited(&error);
                self.apply_policies(request, &error, charge)
            }
        };
        let verdict = Verdict::new(decisions);
        if charge {
            for d in verdict.decisions() {
                let outcome = match (d.source, d.decision.allowed) {
                    (Source::Store, true) => "allowed",
                    (Source::Store, false) => "denied",
                    (Source::Policy { .. }, true) => "store_error_allowed",
                    (Source::Policy { .. }, false) => "store_error_denied",
                };
                metrics::counter!(
                    "tollgate_decisions_total",
                    "limit" => std::sync::Arc::clone(&d.limit),
                    "outcome" => outcome
                )
                .increment(1);
            }
        }
        verdict
    }

    /// Logs a store failure, at most once per second: a dead store under load would otherwise
    /// write one line per request.
    fn warn_rate_limited(&self, error: &StoreError) {
        let now = SystemClock.now().as_micros();
        let last = self.last_warning.load(Ordering::Relaxed);
        if now.saturating_sub(last) < WARN_INTERVAL_US
            || self
                .last_warning
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.unlogged_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let also = self.unlogged_failures.swap(0, Ordering::Relaxed);
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
        charge: bool,
    ) -> SmallVec<[LimitDecision; 2]> {
        let kind = error.kind();
        let entries = request.entries();
        let any_deny = entries
            .iter()
            .any(|e| e.limit.policy() == OnStoreError::Deny);
        let local_entries = entries
            .iter()
            .filter(|e| e.limit.policy() == OnStoreError::Local)
            .cloned();
        let mut local_decisions = match Request::new(local_entries, request.cost()) {
            Ok(local_request) => {
                let store = self.local.get_or_init(MemoryStore::new);
                let now = self.now().unwrap_or_else(|| SystemClock.now());
                if charge && !any_deny {
                    store
                        .check_at(&local_request, now)
                        .unwrap_or_else(|_| deny_all(&local_request))
                } else {
                    store.peek_at(&local_request, now)
                }
            }
            Err(_) => Decisions::new(), // no local limit in this request
        }
        .into_iter();
        entries
            .iter()
            .map(|e| {
                let policy = e.limit.policy();
                let limit = e.limit.quota().limit();
                let decision = match policy {
                    OnStoreError::Allow => Decision {
                        allowed: true,
                        limit,
                        remaining: limit,
                        reset_after: Duration::ZERO,
                        retry_after: None,
                    },
                    OnStoreError::Deny => policy_denial(limit),
                    OnStoreError::Local => local_decisions
                        .next()
                        .unwrap_or_else(|| policy_denial(limit)),
                };
                LimitDecision {
                    limit: e.limit.name_arc().clone(),
                    decision,
                    source: Source::Policy {
                        policy,
                        error: kind,
                    },
                }
            })
            .collect()
    }
}

fn policy_denial(limit: u64) -> Decision {
    Decision {
        allowed: false,
        limit,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: Some(POLICY_RETRY_AFTER),
    }
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
