//! The set of limits the service enforces, swapped whole on reload.
//!
//! A [`Limits`] is immutable: a reload builds a new one over the **same** store (so counters
//! survive) and swaps it in atomically; requests in flight finish on the set they started
//! with. It also holds the Envoy rules compiled over the same limiter (one
//! [`tollgate_envoy::Snapshot`]), so the HTTP API and the gRPC service share every counter
//! and a reload swaps limits and rules together: no call sees new rules with old limits.
//!
//! What a check means is the core's: [`Limits::prepare`] bounds the request's shape (how many
//! limits and key parts one JSON body may carry) and hands the rest to
//! [`Limiter::prepare`]; the limiter decides, applies failure policies and handles shadow
//! limits. Every input is validated before the first store call, so a bad request changes
//! nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    BoxStore, CheckError, Clock, Decision, LimitError, Limiter, Namespace, Request, Reservation,
    SettleError, Span, StoreError, TopKey,
};
use tollgate_envoy::{EnvoyRules, RulesError, Snapshot};

use crate::config::LimitConfig;
use crate::store::AnyStore;

/// The most limits one request may name.
pub const MAX_LIMITS_PER_REQUEST: usize = 16;
/// The most key parts one request may carry.
pub const MAX_KEY_PARTS: usize = 16;

/// Named limits over the shared store, and the Envoy rules over them.
pub struct Limits {
    limiter: Arc<Limiter<BoxStore>>,
    configs: Vec<LimitConfig>,
    envoy: Arc<Snapshot<BoxStore>>,
}

/// Why a limit set cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// The limiter refused the limits (two share a name).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// An `[envoy]` rule does not fit the limits.
    #[error(transparent)]
    Envoy(#[from] RulesError),
}

/// Why a request cannot be checked as asked (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// More limits than one request may name.
    #[error("at most {MAX_LIMITS_PER_REQUEST} limits per request")]
    TooManyLimits,
    /// More key parts than one request may carry.
    #[error("at most {MAX_KEY_PARTS} key parts per request")]
    TooManyKeyParts,
    /// What the core refuses: unknown limit, missing or too long key part, bad cost.
    #[error(transparent)]
    Check(#[from] CheckError),
}

impl Limits {
    /// Builds the limiter for `configs` over `store`, and compiles the Envoy `rules` over it.
    /// A shadow limit is a shadow limit whichever API asks.
    ///
    /// # Errors
    /// [`LimitsError`] if two limits share a name or a rule does not fit the limits (the
    /// config loader refuses both first).
    pub fn build(
        configs: Vec<LimitConfig>,
        rules: &EnvoyRules,
        store: AnyStore,
        namespace: Namespace,
        clock: Option<impl Clock + Clone>,
    ) -> Result<Limits, LimitsError> {
        let mut builder = Limiter::builder(store.boxed().clone())
            .namespace(namespace)
            .deny_cache(store.deny_cache_entries())
            .limits(configs.iter().map(|c| c.limit.clone().shadow(c.shadow)));
        if let Some(clock) = &clock {
            builder = builder.clock(clock.clone());
        }
        let limiter = Arc::new(builder.build()?);
        let mut envoy = Snapshot::new(rules, Arc::clone(&limiter))?;
        // The times the Envoy service computes itself (a block list's window reset) on the
        // limiter's clock when it has one.
        if let Some(clock) = clock {
            envoy = envoy.with_clock(clock);
        }
        let envoy = Arc::new(envoy);
        store.hear_resets_for(&limiter);
        Ok(Limits {
            limiter,
            configs,
            envoy,
        })
    }

    /// The Envoy rules compiled over this set's limiter, for the gRPC service.
    pub fn envoy(&self) -> &Arc<Snapshot<BoxStore>> {
        &self.envoy
    }

    /// The limits as configured, in file order.
    pub fn configs(&self) -> &[LimitConfig] {
        &self.configs
    }

    /// Prepares a check: the request's shape bounded here, everything else by the core.
    ///
    /// # Errors
    /// The first problem, as an [`AskError`].
    pub fn prepare<'a>(
        &'a self,
        names: &[&str],
        key: &[(&str, &str)],
        cost: u64,
    ) -> Result<Request<'a>, AskError> {
        if names.len() > MAX_LIMITS_PER_REQUEST {
            return Err(AskError::TooManyLimits);
        }
        if key.len() > MAX_KEY_PARTS {
            return Err(AskError::TooManyKeyParts);
        }
        Ok(self.limiter.prepare(names, key, cost)?)
    }

    /// The limiter that decides this set's requests ([`Limiter::decide`]).
    pub fn limiter(&self) -> &Limiter<BoxStore> {
        &self.limiter
    }

    /// Reserves `cost` units of `limit` for `key`, a slot within `max_wait`
    /// ([`Limiter::reserve`]); with `hold`, sleeps until the slot begins, giving it back if
    /// the caller goes away first ([`Limiter::acquire`]).
    ///
    /// # Errors
    /// What the core refuses (as for a check), and a limit that hands out no slots.
    pub async fn reserve(
        &self,
        limit: &str,
        key: &[(&str, &str)],
        cost: u64,
        max_wait: Duration,
        hold: bool,
    ) -> Result<Reservation, CheckError> {
        if hold {
            self.limiter.acquire(limit, key, cost, max_wait).await
        } else {
            self.limiter.reserve(limit, key, cost, max_wait).await
        }
    }

    /// Charges (`delta > 0`) or refunds (`delta < 0`) units of `limit` for `key`
    /// ([`Limiter::adjust`]); answers the key's state after.
    ///
    /// # Errors
    /// What the core refuses (as for a check), or the store's failure.
    pub async fn adjust(
        &self,
        limit: &str,
        key: &[(&str, &str)],
        delta: i64,
    ) -> Result<Decision, SettleError> {
        self.limiter.adjust(limit, key, delta).await
    }

    /// Forgets the key's state for every limit of `request`.
    ///
    /// # Errors
    /// The store's failure.
    pub async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.limiter.reset(request).await
    }
}

impl Limits {
    /// The most refused keys of `limit` over `span` (`None`: unknown limit).
    pub fn top_denied(&self, limit: &str, k: usize, span: Span) -> Option<Vec<TopKey>> {
        self.limiter.top_denied(limit, k, span)
    }

    /// `limit`'s refusal ratio over the last minute.
    pub fn deny_ratio(&self, limit: &str) -> Option<f64> {
        self.limiter.deny_ratio(limit)
    }

    /// Refusals held by the deny cache.
    pub fn deny_cache_len(&self) -> usize {
        self.limiter.deny_cache_len()
    }

    /// Gives back every unspent unit of every lease (this set is being replaced, or the
    /// service is stopping); failures are logged (their units stay counted until their
    /// window ends).
    pub async fn return_leases(&self, why: &'static str) {
        match self.limiter.return_leases().await {
            Ok(0) => {}
            Ok(units) => tracing::info!(units, why, "leases given back"),
            Err(e) => tracing::warn!(cause = %e, why, "could not give every lease back"),
        }
    }

    /// Gives back the units of expired leases (the service's periodic sweep).
    pub async fn return_expired_leases(&self) {
        if let Err(e) = self.limiter.return_expired_leases().await {
            tracing::debug!(cause = %e, "could not give expired leases back");
        }
    }

    /// Units held in leases.
    pub fn leased_units(&self) -> u64 {
        self.limiter.leased_units()
    }
}

/// The key parts as the core takes them, at most [`MAX_KEY_PARTS`].
///
/// # Errors
/// [`AskError::TooManyKeyParts`].
pub fn bounded_key(key: &[(String, String)]) -> Result<Vec<(&str, &str)>, AskError> {
    if key.len() > MAX_KEY_PARTS {
        return Err(AskError::TooManyKeyParts);
    }
    Ok(key.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect())
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("limiter", &self.limiter)
            .field("envoy", &self.envoy)
            .finish()
    }
}
