//! [`RateLimitLayer`]: the configuration, checked once when it is built.
//!
//! A layer checks a fixed set of limits, all or nothing, in one store call per request. Put
//! one layer on each route (or group of routes) that shares limits: a global limit on an
//! endpoint and a per-client limit are two limits of one layer, so that a client refused by
//! its own limit costs the global one nothing.
//!
//! What makes a layer unusable is found here, once, by the core itself: the layer asks the
//! limiter to prepare a check with the parts its key extractor gives, so "unknown limit" or
//! "keyed by a part nobody gives" mean exactly what they mean for every other face.
//!
//! The layer is generic over the limiter's store, so a layer over a known store costs no
//! boxing; [`tollgate::BoxStore`] gives one layer type for a store chosen at run time.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use http::request::Parts;
use tollgate::{BoxStore, CheckError, Limiter, Store, wire};
use tower_layer::Layer;

use crate::headers::HeaderOptions;
use crate::pacing::{Pacer, pacer};
use crate::respond::{Responder, problem_json};
use crate::{ConfigError, KeyExtractor, RateLimit, Rejection};

/// The cost of a request, from its head (e.g. by `Content-Length` or by route weight).
pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// Rate limits the requests of the services it wraps, with the limits of a
/// [`Limiter`] over store `St`.
pub struct RateLimitLayer<St = BoxStore> {
    pub(crate) config: Arc<Config<St>>,
}

pub(crate) struct Config<St> {
    pub(crate) limiter: Arc<Limiter<St>>,
    pub(crate) limits: Arc<[Arc<str>]>,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) cost: CostFn,
    pub(crate) headers: HeaderOptions,
    pub(crate) policy: HeaderValue,
    pub(crate) responder: Responder,
    /// Every limit is a shadow limit: a request with no key, or whose check the limiter will
    /// not make (a key value too long), passes instead of being refused.
    pub(crate) all_shadow: bool,
    /// Set by [`RateLimitLayer::delay_up_to`]: requests wait for their slot.
    pub(crate) pacer: Option<Pacer>,
}

impl<St> Clone for RateLimitLayer<St> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<St> Clone for Config<St> {
    fn clone(&self) -> Self {
        Config {
            limiter: Arc::clone(&self.limiter),
            limits: Arc::clone(&self.limits),
            key: Arc::clone(&self.key),
            cost: Arc::clone(&self.cost),
            headers: self.headers,
            policy: self.policy.clone(),
            responder: Arc::clone(&self.responder),
            all_shadow: self.all_shadow,
            pacer: self.pacer.clone(),
        }
    }
}

impl<St: Store> RateLimitLayer<St> {
    /// Checks `limits` of `limiter` together, keyed by what `key` extracts, at cost 1.
    ///
    /// # Errors
    /// [`ConfigError`] when no limit is given, a limit is unknown or named twice, a limit is
    /// keyed by a part `key` does not give, or two extractors give the same part.
    pub fn new<I, N, K>(
        limiter: Arc<Limiter<St>>,
        limits: I,
        key: K,
    ) -> Result<RateLimitLayer<St>, ConfigError>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
        K: KeyExtractor,
    {
        let names: Vec<Arc<str>> = limits.into_iter().map(|n| Arc::from(n.as_ref())).collect();
        let given: Vec<&str> = key.part_names();
        let mut seen = HashSet::new();
        if let Some(dup) = given.iter().find(|p| !seen.insert(**p)) {
            return Err(ConfigError::DuplicateKeyPart((*dup).to_owned()));
        }
        // The core's own validation, with the parts the extractor gives (values do not
        // matter here): exactly what a request would meet.
        let sample: Vec<(&str, &str)> = given.iter().map(|p| (*p, "")).collect();
        let refs: Vec<&str> = names.iter().map(|n| &**n).collect();
        let request = limiter
            .prepare(&refs, &sample, 1)
            .map_err(|e| ConfigError::from_check(e, &given))?;
        let policy = wire::policy_of_request(&request);
        let all_shadow = request.entries().iter().all(|e| e.is_shadow());
        drop(request);
        Ok(RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                limits: names.into(),
                key: Arc::new(key),
                cost: Arc::new(|_: &Parts| 1),
                headers: HeaderOptions::default(),
                // Only printable ASCII is written, always a valid header value.
                policy: HeaderValue::try_from(policy)
                    .unwrap_or_else(|_| HeaderValue::from_static("")),
                responder: Arc::new(problem_json),
                all_shadow,
                pacer: None,
            }),
        })
    }

    /// Each request costs what `cost` says. A cost of 0 counts as 1: a free pass is
    /// expressed by not applying the layer, not by a cost. A cost above what an enforced limit
    /// can ever admit is refused with 413 ([`Rejection::TooCostly`]); above a shadow limit's,
    /// it is that limit's would-be refusal, counted, and the enforced limits decide.
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        Arc::make_mut(&mut self.config).cost = Arc::new(cost);
        self
    }

    /// Drops the remaining count from the headers (public endpoints).
    pub fn hide_remaining(mut self, hide: bool) -> Self {
        Arc::make_mut(&mut self.config).headers.hide_remaining = hide;
        self
    }

    /// Also sends `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    pub fn legacy_headers(mut self, legacy: bool) -> Self {
        Arc::make_mut(&mut self.config).headers.legacy = legacy;
        self
    }

    /// Builds refusals with `respond` instead of [`problem_json`]. The layer still adds
    /// `Retry-After` (unless set) and the rate-limit fields.
    pub fn respond_with(
        mut self,
        respond: impl Fn(&Rejection) -> http::Response<bytes::Bytes> + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.config).responder = Arc::new(respond);
        self
    }

    /// The limits this layer checks, in order.
    pub fn limits(&self) -> impl Iterator<Item = &str> {
        self.config.limits.iter().map(|n| &**n)
    }

    /// The `RateLimit-Policy` value this layer sends.
    pub fn policy_header(&self) -> &HeaderValue {
        &self.config.policy
    }
}

impl<St: Store + Clone> RateLimitLayer<St> {
    /// Delays a request until its slot of the layer's limit instead of refusing it, when the
    /// slot begins within `max_wait`: the request takes the key's next free slot
    /// ([`Limiter::acquire`]), sleeps until it, then reaches the inner service. Requests whose
    /// slot is further away are refused as usual (429 with `Retry-After`). A request dropped
    /// while it waits (the client went away, a timeout layer above) gives its slot back when
    /// no later slot was handed out after it (dropped after its slot began, while it waits
    /// for the inner service's readiness, it is not). For a route in front of an upstream that must
    /// see a smooth rate: concurrent requests, on every instance, go one slot apart.
    ///
    /// Only for a layer of one limit whose algorithm hands out slots (GCRA, token bucket).
    /// A shadow limit never delays (it is checked). The layer's cost function still applies.
    ///
    /// # Errors
    /// [`ConfigError::DelayNeedsOneLimit`] for a layer of several limits,
    /// [`ConfigError::CannotDelay`] for a limit with another algorithm,
    /// [`ConfigError::Invalid`] with [`CheckError::MaxWaitTooLong`] for a `max_wait` above an
    /// hour ([`tollgate::rules::DEBT_HORIZON_US`]), the longest a reservation may wait.
    pub fn delay_up_to(mut self, max_wait: Duration) -> Result<Self, ConfigError> {
        let [limit] = &*self.config.limits else {
            return Err(ConfigError::DelayNeedsOneLimit(self.config.limits.len()));
        };
        let longest = Duration::from_micros(tollgate::rules::DEBT_HORIZON_US);
        if max_wait > longest {
            return Err(ConfigError::Invalid(CheckError::MaxWaitTooLong {
                limit: limit.to_string(),
                max_wait,
                longest,
            }));
        }
        let algorithm = self
            .config
            .limiter
            .limits()
            .find(|l| l.name() == &**limit)
            .map(|l| l.algorithm())
            .ok_or_else(|| ConfigError::UnknownLimit(limit.to_string()))?;
        if !algorithm.reserves() {
            return Err(ConfigError::CannotDelay {
                limit: limit.to_string(),
                algorithm: algorithm.name().to_owned(),
            });
        }
        let pacer = pacer(&self.config.limiter, limit, max_wait);
        Arc::make_mut(&mut self.config).pacer = Some(pacer);
        Ok(self)
    }
}

impl<S, St> Layer<S> for RateLimitLayer<St> {
    type Service = RateLimit<S, St>;

    fn layer(&self, inner: S) -> RateLimit<S, St> {
        RateLimit::new(inner, self.config.clone())
    }
}

impl<St> fmt::Debug for RateLimitLayer<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl<St> fmt::Debug for Config<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.limits)
            .field("key_parts", &self.key.part_names())
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl ConfigError {
    /// The layer's reading of what the core refused when preparing a check with the parts
    /// the key extractor gives.
    fn from_check(error: CheckError, given: &[&str]) -> ConfigError {
        match error {
            CheckError::NoLimits => ConfigError::NoLimits,
            CheckError::UnknownLimit(name) => ConfigError::UnknownLimit(name),
            CheckError::DuplicateLimit(name) => ConfigError::DuplicateLimit(name),
            CheckError::MissingKeyPart { limit, part } => ConfigError::MissingKeyPart {
                limit,
                part,
                given: given.iter().map(|g| (*g).to_owned()).collect(),
            },
            other => ConfigError::Invalid(other),
        }
    }
}
