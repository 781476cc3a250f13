//! [`RateLimit`]: the service that decides, per request, in `call`.
//!
//! The key comes from the request, so nothing can be decided in `poll_ready`, which only
//! asks the inner service. `call` takes the inner service that was made ready and leaves a
//! clone in its place (`std::mem::replace`), then, in the returned future: extracts the key,
//! checks every limit of the layer in one store call, and either answers itself (429, 503, or
//! the key error's status) or calls the inner service with the [`Verdict`] in the request's
//! extensions. Every response it lets through or makes carries the rate-limit fields.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, header};
use tollgate::{CheckError, POLICY_RETRY_AFTER, Verdict};
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::headers::{self, RATELIMIT_POLICY};
use crate::layer::Config;
use crate::{KeyParts, RateLimited, Rejection, ResponseBody};

/// Rate limits the requests of `S`. Made by [`crate::RateLimitLayer`].
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        RateLimit { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqB: Send + 'static,
    ResB: 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        ResponseFuture::new(async move { config.handle(inner, request).await })
    }
}

/// What to do with a request once the limiter has spoken.
enum Outcome {
    Pass(Option<Verdict>),
    Refuse(Rejection, Option<Verdict>),
}

impl Config {
    async fn handle<S, ReqB, ResB>(
        &self,
        mut inner: S,
        request: Request<ReqB>,
    ) -> Result<Response<ResponseBody<ResB>>, S::Error>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>>,
    {
        let (mut parts, body) = request.into_parts();
        let outcome = self.decide(&parts).await;
        let outcome = match outcome {
            Outcome::Refuse(rejection, verdict) if self.shadow => {
                self.count_shadow(&rejection, verdict.as_ref());
                Outcome::Pass(verdict)
            }
            other => other,
        };
        match outcome {
            Outcome::Refuse(rejection, verdict) => Ok(self.refuse(rejection, verdict.as_ref())),
            Outcome::Pass(verdict) => {
                if let Some(v) = &verdict {
                    parts.extensions.insert(v.clone());
                }
                let response = inner.call(Request::from_parts(parts, body)).await?;
                let mut response = response.map(ResponseBody::inner);
                self.write_headers(response.headers_mut(), verdict.as_ref());
                Ok(response)
            }
        }
    }

    async fn decide(&self, parts: &http::request::Parts) -> Outcome {
        let cost = (self.cost)(parts).max(1);
        let mut key = KeyParts::new();
        if let Err(error) = self.key.extract(parts, &mut key) {
            tracing::debug!(cause = %error, "no rate-limit key");
            return Outcome::Refuse(Rejection::NoKey(error), None);
        }
        let names: Vec<&str> = self.limits.iter().map(|n| &**n).collect();
        let key: Vec<(&str, &[u8])> = key.iter().collect();
        let verdict = match self.limiter.check_all(&names, &key, cost).await {
            Ok(verdict) => verdict,
            Err(CheckError::CostExceedsCapacity {
                limit,
                cost,
                capacity,
            }) => {
                return Outcome::Refuse(
                    Rejection::TooCostly {
                        limit,
                        cost,
                        capacity,
                    },
                    None,
                );
            }
            Err(error) => {
                tracing::error!(cause = %error, "rate-limit check failed: the layer is misconfigured");
                return Outcome::Refuse(Rejection::Invalid(Arc::new(error)), None);
            }
        };
        if verdict.is_allowed() {
            return Outcome::Pass(Some(verdict));
        }
        let retry_after = verdict.retry_after().unwrap_or(POLICY_RETRY_AFTER);
        let rejection = if verdict.is_store_failure() {
            Rejection::StoreUnavailable {
                error: verdict.store_error(),
                retry_after,
            }
        } else {
            Rejection::RateLimited(RateLimited {
                limit: verdict.decisive().limit.clone(),
                retry_after,
            })
        };
        tracing::debug!(limit = %verdict.decisive().limit, ?retry_after, "request refused");
        Outcome::Refuse(rejection, Some(verdict))
    }

    fn refuse<B>(
        &self,
        rejection: Rejection,
        verdict: Option<&Verdict>,
    ) -> Response<ResponseBody<B>> {
        let mut response = (self.responder)(&rejection).map(ResponseBody::refusal);
        if let Some(retry_after) = rejection.retry_after() {
            response
                .headers_mut()
                .entry(header::RETRY_AFTER)
                .or_insert_with(|| headers::retry_after_value(retry_after));
        }
        self.write_headers(response.headers_mut(), verdict);
        response.extensions_mut().insert(rejection);
        response
    }

    fn write_headers(&self, headers: &mut http::HeaderMap, verdict: Option<&Verdict>) {
        headers.insert(RATELIMIT_POLICY, self.policy.clone());
        if let Some(verdict) = verdict {
            headers::write_verdict(headers, verdict, self.headers);
        }
    }

    /// Shadow mode: counts, per limit, a refusal that was not made.
    fn count_shadow(&self, rejection: &Rejection, verdict: Option<&Verdict>) {
        let denied: Vec<String> = match verdict {
            Some(v) => v
                .decisions()
                .iter()
                .filter(|d| !d.decision.allowed)
                .map(|d| d.limit.to_string())
                .collect(),
            None => self.limits.iter().map(|l| l.to_string()).collect(),
        };
        for limit in denied {
            tracing::debug!(%limit, reason = %rejection.detail(), "shadow mode: would refuse");
            metrics::counter!("tollgate_shadow_denied_total", "limit" => limit).increment(1);
        }
    }
}
