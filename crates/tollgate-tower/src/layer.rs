//! [`RateLimitLayer`]: the configuration, checked once when it is built.
//!
//! A layer checks a fixed set of limits, all or nothing, in one store call per request. Put
//! one layer on each route (or group of routes) that shares limits: a global limit on an
//! endpoint and a per-client limit are two limits of one layer, so that a client refused by
//! its own limit costs the global one nothing.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use http::HeaderValue;
use http::request::Parts;
use tollgate::{Limiter, Store};
use tower_layer::Layer;

use crate::checker::Checker;
use crate::headers::{self, HeaderOptions};
use crate::respond::{Responder, problem_json};
use crate::{ConfigError, KeyExtractor, RateLimit, Rejection};

/// The cost of a request, from its head (e.g. by `Content-Length` or by route weight).
pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// Rate limits the requests of the services it wraps.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(crate) config: Arc<Config>,
}

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: Arc<dyn Checker>,
    pub(crate) limits: Arc<[Arc<str>]>,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) cost: CostFn,
    pub(crate) headers: HeaderOptions,
    pub(crate) policy: HeaderValue,
    pub(crate) shadow: bool,
    pub(crate) responder: Responder,
}

impl RateLimitLayer {
    /// Checks `limits` of `limiter` together, keyed by what `key` extracts, at cost 1.
    ///
    /// # Errors
    /// [`ConfigError`] when no limit is given, a limit is unknown or named twice, a limit is
    /// keyed by a part `key` does not give, or two extractors give the same part.
    pub fn new<St, I, N, K>(
        limiter: Arc<Limiter<St>>,
        limits: I,
        key: K,
    ) -> Result<RateLimitLayer, ConfigError>
    where
        St: Store,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
        K: KeyExtractor,
    {
        let names: Vec<Arc<str>> = limits.into_iter().map(|n| Arc::from(n.as_ref())).collect();
        if names.is_empty() {
            return Err(ConfigError::NoLimits);
        }
        let given: Vec<&str> = key.part_names();
        let mut seen = HashSet::new();
        if let Some(dup) = given.iter().find(|p| !seen.insert(**p)) {
            return Err(ConfigError::DuplicateKeyPart((*dup).to_owned()));
        }
        let mut quotas = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(ConfigError::DuplicateLimit(name.to_string()));
            }
            let limit = limiter
                .get(name)
                .ok_or_else(|| ConfigError::UnknownLimit(name.to_string()))?;
            if let Some(part) = limit
                .key_parts()
                .into_iter()
                .flatten()
                .find(|p| !given.contains(&&***p))
            {
                return Err(ConfigError::MissingKeyPart {
                    limit: name.to_string(),
                    part: part.to_string(),
                    given: given.iter().map(|g| (*g).to_owned()).collect(),
                });
            }
            quotas.push((&**name, *limit.quota()));
        }
        let policy = headers::policy_value(quotas.iter().map(|(n, q)| (*n, q)));
        Ok(RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                limits: names.into(),
                key: Arc::new(key),
                cost: Arc::new(|_: &Parts| 1),
                headers: HeaderOptions::default(),
                policy,
                shadow: false,
                responder: Arc::new(problem_json),
            }),
        })
    }

    /// Each request costs what `cost` says. A cost of 0 counts as 1: a free pass is
    /// expressed by not applying the layer, not by a cost. A cost above what a limit can ever
    /// admit is refused with 413 ([`Rejection::TooCostly`]).
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

    /// Shadow mode: decide, count and send headers as usual, but never refuse. Would-be
    /// refusals are counted in `tollgate_shadow_denied_total{limit}`.
    pub fn shadow(mut self, shadow: bool) -> Self {
        Arc::make_mut(&mut self.config).shadow = shadow;
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

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.config.clone())
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.limits)
            .field("key_parts", &self.key.part_names())
            .field("headers", &self.headers)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}
