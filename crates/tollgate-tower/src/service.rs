//! [`RateLimit`]: the service that decides, per request, in `call`.
//!
//! The key comes from the request, so nothing can be decided in `poll_ready`, which only
//! asks the inner service. `call` takes the inner service that was made ready and leaves a
//! clone in its place (`std::mem::replace`), then, in the returned future: extracts the key,
//! checks every limit of the layer in one store call (or, with
//! [`crate::RateLimitLayer::delay_up_to`], takes the key's next slot and sleeps until it), and
//! either answers itself (429, 503, or the key error's status) or calls the inner service with
//! the [`Verdict`] in the request's extensions. Every response it lets through or makes carries the rate-limit fields.
//!
//! Readiness: a plain check keeps the ready inner service through its store call, one round
//! trip bounded by the store's timeout, and calls it at once: giving the readiness back and
//! asking again would cost every request a second `poll_ready`, and behind a concurrency
//! limit a request already admitted could lose its place to one that came later. A paced
//! request may sleep up to `max_wait` before its call, so it drops the ready service (and
//! whatever it reserved: a concurrency permit, a buffer slot) before it asks the store, and
//! drives a clone to readiness once its slot begins; otherwise requests of other keys, or
//! of this key's next slots, waited for permits held by sleepers.
//!
//! A panic while the layer decides (in the key extractor, the cost function, the limiter or
//! the store) is caught and answered 500 (the responder's [`Rejection::Panicked`]), logged
//! and counted in `tollgate_tower_panics_total`: without it the connection closed with no
//! answer. The inner service's own panics are not the layer's to catch.

use std::any::Any;
use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, header};
use pin_project_lite::pin_project;
use tollgate::{BoxStore, CheckError, LogThrottle, Op, Outcome, Store, Verdict, wire};
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::headers::{self, RATELIMIT_POLICY};
use crate::layer::Config;
use crate::{KeyError, KeyParts, RateLimited, Rejection, ResponseBody};

/// Rate limits the requests of `S` with a limiter over store `St`. Made by
/// [`crate::RateLimitLayer`].
pub struct RateLimit<S, St = BoxStore> {
    inner: S,
    config: Arc<Config<St>>,
}

impl<S, St> RateLimit<S, St> {
    pub(crate) fn new(inner: S, config: Arc<Config<St>>) -> Self {
        RateLimit { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, St> Clone for RateLimit<S, St> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: fmt::Debug, St> fmt::Debug for RateLimit<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, St, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, St>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    St: Store,
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
enum Decided {
    Pass(Option<Verdict>),
    Refuse(Rejection, Option<Verdict>),
}

impl<St: Store> Config<St> {
    async fn handle<S, ReqB, ResB>(
        &self,
        inner: S,
        request: Request<ReqB>,
    ) -> Result<Response<ResponseBody<ResB>>, S::Error>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    {
        let (mut parts, body) = request.into_parts();
        // A paced request may sleep: it gives back the readiness it was called with (see the
        // module's doc) and asks again once its slot begins.
        let mut inner = match self.pacer {
            Some(_) => {
                let fresh = inner.clone();
                drop(inner);
                Readiness::Released(fresh)
            }
            None => Readiness::Ready(inner),
        };
        let decided = match CatchUnwind::new(self.decide(&parts)).await {
            Ok(decided) => decided,
            // A layer of shadow limits only never refuses, a panic included (still logged
            // and counted): a trial on live traffic must not turn a bug into 500s.
            Err(panic) if self.all_shadow => {
                let _ = panicked(&*panic);
                Decided::Pass(None)
            }
            Err(panic) => panicked(&*panic),
        };
        match decided {
            Decided::Refuse(rejection, verdict) => Ok(self.refuse(rejection, verdict.as_ref())),
            Decided::Pass(verdict) => {
                if let Some(v) = &verdict {
                    parts.extensions.insert(v.clone());
                }
                let inner = match &mut inner {
                    Readiness::Ready(inner) => inner,
                    Readiness::Released(inner) => {
                        poll_fn(|cx| inner.poll_ready(cx)).await?;
                        inner
                    }
                };
                let response = inner.call(Request::from_parts(parts, body)).await?;
                let mut response = response.map(ResponseBody::inner);
                self.write_headers(response.headers_mut(), verdict.as_ref());
                Ok(response)
            }
        }
    }

    async fn decide(&self, parts: &http::request::Parts) -> Decided {
        let cost = (self.cost)(parts).max(1);
        let mut key = KeyParts::new();
        if let Err(error) = self.key.extract(parts, &mut key) {
            if self.all_shadow {
                tracing::debug!(cause = %error, "no rate-limit key; only shadow limits: passed");
                return Decided::Pass(None);
            }
            tracing::debug!(cause = %error, "no rate-limit key");
            return Decided::Refuse(Rejection::NoKey(error), None);
        }
        let verdict = match &self.pacer {
            // The reservation validates the key and cost as a check's preparation does.
            Some(pacer) => match pacer(&key, cost).await {
                Ok(reservation) => reservation.verdict(),
                Err(error) => return self.unchecked(error),
            },
            None => {
                let names: Vec<&str> = self.limits.iter().map(|n| &**n).collect();
                let parts: Vec<(&str, &[u8])> = key.iter().collect();
                let request = match self.limiter.prepare(&names, &parts, cost) {
                    Ok(request) => request,
                    Err(error) => return self.unchecked(error),
                };
                self.limiter.decide(&request, Op::Check).await
            }
        };
        let rejection = match verdict.outcome() {
            Outcome::Allowed => return Decided::Pass(Some(verdict)),
            Outcome::Limited { retry_after } => Rejection::RateLimited(RateLimited {
                limit: verdict.decisive().limit.clone(),
                retry_after,
            }),
            Outcome::Unavailable { error, retry_after } => Rejection::StoreUnavailable {
                error: Some(error),
                retry_after,
            },
        };
        tracing::debug!(limit = %verdict.decisive().limit, reason = %rejection.detail(), "request refused");
        Decided::Refuse(rejection, Some(verdict))
    }

    /// A request the limiter would not check (a key part too long, a misconfiguration):
    /// refused, unless every limit is a shadow limit, which never refuses, as for a request
    /// with no key.
    fn unchecked(&self, error: CheckError) -> Decided {
        let rejection = rejection_of(error);
        if self.all_shadow {
            tracing::debug!(reason = %rejection.detail(), "rate-limit check not made; only shadow limits: passed");
            return Decided::Pass(None);
        }
        Decided::Refuse(rejection, None)
    }

    fn refuse<B>(
        &self,
        rejection: Rejection,
        verdict: Option<&Verdict>,
    ) -> Response<ResponseBody<B>> {
        // The responder is the caller's code: a panic in it would drop the connection with
        // no answer, the very thing the catch around deciding prevents. Answer with the
        // default body instead (which cannot panic), logged and counted like the others.
        let responded = catch_unwind(AssertUnwindSafe(|| (self.responder)(&rejection)));
        let responded = responded.unwrap_or_else(|panic| {
            let _ = panicked(&*panic);
            crate::problem_json(&rejection)
        });
        let mut response = responded.map(ResponseBody::refusal);
        if let Some(retry_after) = rejection.retry_after() {
            response
                .headers_mut()
                .entry(header::RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(wire::retry_after_secs(retry_after)));
        }
        self.write_headers(response.headers_mut(), verdict);
        response.extensions_mut().insert(rejection);
        response
    }

    fn write_headers(&self, headers: &mut http::HeaderMap, verdict: Option<&Verdict>) {
        if !self.policy.is_empty() {
            // Appended, not set: the field is a list, and a layer around this one (or one
            // inside it) adds its own limits' items; set, the outer layer's replaced the
            // inner's, and a 429 could show only a limit that admitted the request.
            headers.append(RATELIMIT_POLICY, self.policy.clone());
        }
        if let Some(verdict) = verdict {
            headers::write_verdict(headers, verdict, self.headers);
        }
    }
}

/// One line a second, with the count of those held back, for each error every request can
/// meet (a panic on some input, a misconfiguration): one line per request let a client's
/// flood fill the disk. Their counters count each.
static PANIC_LOGS: LogThrottle = LogThrottle::new();
static MISCONFIGURED_LOGS: LogThrottle = LogThrottle::new();

/// A request the core refused to prepare: the client's doing (a cost no limit admits, a key
/// part too long) or the layer's (500, logged).
fn rejection_of(error: CheckError) -> Rejection {
    match error {
        CheckError::CostExceedsCapacity {
            limit,
            cost,
            capacity,
        } => Rejection::TooCostly {
            limit,
            cost,
            capacity,
        },
        CheckError::KeyPartTooLong { part, max } => {
            Rejection::NoKey(KeyError::TooLong { part, max })
        }
        error => {
            // Described once, where it is first recorded (every request may meet it).
            static DESCRIBED: std::sync::Once = std::sync::Once::new();
            DESCRIBED.call_once(|| {
                metrics::describe_counter!(
                    "tollgate_tower_misconfigured_total",
                    "Requests the rate-limit layer could not check because its limits and keys \
                     do not fit together: answered 500"
                );
            });
            metrics::counter!("tollgate_tower_misconfigured_total").increment(1);
            if let Some(skipped) = MISCONFIGURED_LOGS.admit() {
                tracing::error!(
                    cause = %error,
                    skipped,
                    "rate-limit check failed: the layer is misconfigured"
                );
            }
            Rejection::Invalid(Arc::new(error))
        }
    }
}

/// The inner service a request will call: still holding the readiness `poll_ready` gave it,
/// or a clone to drive to readiness again (a paced request, which may sleep first).
enum Readiness<S> {
    Ready(S),
    Released(S),
}

/// The answer to a panic while the layer decided: a 500, logged with the panic's message and
/// counted (a bug of the layer's configuration, the limiter or the store; never the client's).
fn panicked(panic: &(dyn Any + Send)) -> Decided {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)");
    if let Some(skipped) = PANIC_LOGS.admit() {
        tracing::error!(
            message,
            skipped,
            "rate-limit layer panicked (a bug): deciding, or answering a refusal"
        );
    }
    // Described here, where it is first recorded: a service embedding the layer has no
    // other place that knows the name (rare: a panic is a bug).
    metrics::describe_counter!(
        "tollgate_tower_panics_total",
        "Panics in the rate-limit layer (a bug): while deciding, answered 500 (passed by a layer of shadow limits only), or in the responder, answered with the default body"
    );
    metrics::counter!("tollgate_tower_panics_total").increment(1);
    Decided::Refuse(Rejection::Panicked, None)
}

pin_project! {
    /// A future whose panic, on any poll, becomes its `Err` output instead of unwinding
    /// through the caller (`futures::FutureExt::catch_unwind`, without the dependency).
    struct CatchUnwind<F> {
        #[pin]
        future: F,
    }
}

impl<F> CatchUnwind<F> {
    fn new(future: F) -> Self {
        CatchUnwind { future }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.project().future;
        // Unwind safety: a future that panicked is dropped, never polled again; what it
        // borrowed (the layer's config, the request head) it only read. The limiter and the
        // store keep their own state consistent across a panic, as under the Envoy face's
        // catch.
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
