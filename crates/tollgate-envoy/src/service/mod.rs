//! The gRPC service: `ShouldRateLimit` over the current [`Snapshot`].
//!
//! The service holds no rules itself: each call asks its source for the current snapshot
//! (one atomic load with [`arc_swap::ArcSwap`]), so the server can swap rules and limits on
//! reload without restarting the listener, and a call in flight finishes with the snapshot it
//! started with.
//!
//! Beside it: `headers.rs` (the draft rate-limit headers of an answer) and `record.rs` (an
//! answer counted in the reference's statistics).

pub(crate) mod headers;
pub(crate) mod record;

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    self, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use futures_util::FutureExt as _;
use tollgate::{LimitDecision, Store, wire};
use tonic::{Request, Response, Status};

use crate::decide::{Answer, Fixed, Shown, decide, window_end};
use crate::reply::dynamic_metadata;
use crate::service::headers::response_headers;
use crate::{Snapshot, rate_unit};

type Source<St> = Arc<dyn Fn() -> Arc<Snapshot<St>> + Send + Sync>;

/// Envoy's `RateLimitService` over tollgate limits.
///
/// Each descriptor's status has `current_limit` (the limit's name and its rate in Envoy's
/// units, see [`rate_unit`]), `limit_remaining` and `duration_until_reset` (until the key is
/// back to a full quota, or, when denied, until this cost would pass if that is later;
/// rounded up to whole seconds). A descriptor no rule matches is `OK` with no limit.
pub struct RateLimitService<St> {
    source: Source<St>,
}

impl<St: Store> RateLimitService<St> {
    /// A service reading the snapshot `snapshots` holds at each call; store a new one to swap
    /// rules and limits.
    pub fn new(snapshots: Arc<ArcSwap<Snapshot<St>>>) -> RateLimitService<St> {
        RateLimitService::from_fn(move || snapshots.load_full())
    }

    /// A service calling `current` for the snapshot at each call (for a server whose state
    /// holds the snapshot among other things).
    pub fn from_fn(
        current: impl Fn() -> Arc<Snapshot<St>> + Send + Sync + 'static,
    ) -> RateLimitService<St> {
        RateLimitService {
            source: Arc::new(current),
        }
    }

    /// Whether the current snapshot is healthy ([`Snapshot::healthy`]): what the gRPC health
    /// service reports.
    pub fn healthy(&self) -> bool {
        (self.source)().healthy()
    }

    /// The tonic server wrapping this service, to add to a `tonic::transport::Server`.
    pub fn into_server(self) -> RateLimitServiceServer<RateLimitService<St>> {
        RateLimitServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl<St: Store> rate_limit_service_server::RateLimitService for RateLimitService<St> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = std::time::Instant::now();
        let snapshot = (self.source)();
        let request = request.into_inner();
        // `should_rate_limit`'s two steps, written out: the call awaits the decision here,
        // not through a layer of its own (docs/architecture.md counts the path). A panic in
        // them (a bug) is answered `INTERNAL`, where it would reset the stream with `CANCEL`
        // and tell the caller nothing; the process's panic hook logs and counts it.
        let answer = AssertUnwindSafe(async {
            let decided = decide(&snapshot, &request).await;
            respond(&snapshot, &request, decided)
        })
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(Status::internal("the call panicked (a bug)")));
        // The reference's gRPC server counts every call and its time (its `POST /json` calls
        // the service directly, past these counters, and so does tollgate's).
        crate::metrics::grpc_call("ShouldRateLimit", started.elapsed());
        Ok(Response::new(answer?))
    }
}

/// Answers `request` with the rules and limits of `snapshot`: what the gRPC service answers,
/// for other faces of it (the HTTP `POST /json`). Counts the reference's per-rule statistics,
/// and its `should_rate_limit` errors: `service_error` for a request refused as invalid,
/// `redis_error` when the store failed (the call then fails, or a limit's `allow` / `local`
/// policy answered).
///
/// # Errors
/// `INVALID_ARGUMENT` for a request that cannot be decided (empty domain or descriptor list,
/// an invalid limit override, a value too long), `UNAVAILABLE` when the store failed and a
/// limit's policy is `deny`.
pub async fn should_rate_limit<St: Store>(
    snapshot: &Snapshot<St>,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    let decided = decide(snapshot, request).await;
    respond(snapshot, request, decided)
}

/// The response to `request` from what [`decide`] answered, with the reference's error and
/// per-rule statistics counted.
fn respond<St: Store>(
    snapshot: &Snapshot<St>,
    request: &RateLimitRequest,
    decided: Result<Answer<'_>, Status>,
) -> Result<RateLimitResponse, Status> {
    let answer = match decided {
        Ok(answer) => answer,
        Err(status) => {
            crate::metrics::call_error(if status.code() == tonic::Code::Unavailable {
                "redis_error"
            } else {
                "service_error"
            });
            return Err(status);
        }
    };
    if !answer.allowed {
        tracing::debug!(domain = %request.domain, "over limit");
    }
    let store_failed = answer
        .outcomes
        .iter()
        .flatten()
        .any(|o| matches!(o.source, tollgate::Source::Policy { .. }));
    if store_failed {
        crate::metrics::call_error("redis_error");
    }
    record::record(
        request,
        &answer,
        &answer.counted,
        snapshot.global_shadow(),
        snapshot.near_ratio(),
    );
    Ok(response(&answer, snapshot, request))
}

fn response<St>(
    answer: &Answer<'_>,
    snapshot: &Snapshot<St>,
    request: &RateLimitRequest,
) -> RateLimitResponse {
    let now = snapshot.now();
    let mut out = RateLimitResponse {
        overall_code: if answer.allowed {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        statuses: {
            let mut statuses: Vec<DescriptorStatus> = answer
                .outcomes
                .iter()
                .zip(&answer.shown)
                .map(|(o, shown)| match (o, shown) {
                    (Some(o), Some(shown)) => status(o, shown, now),
                    _ => unmatched(),
                })
                .collect();
            for (slot, fixed) in &answer.fixed {
                let (slot, fixed) = (*slot, fixed.clone());
                if let Some(s) = statuses.get_mut(slot) {
                    *s = fixed_status(fixed);
                }
            }
            statuses
        },
        response_headers_to_add: if snapshot.response_headers() {
            response_headers(answer)
        } else {
            Vec::new()
        },
        ..RateLimitResponse::default()
    };
    if let Some(limit_headers) = snapshot.limit_headers() {
        let extra = limit_headers.for_statuses(&out.statuses, &answer.quota);
        out.response_headers_to_add.extend(extra);
    }
    if snapshot.dynamic_metadata() {
        let passed = passed(answer, &out.statuses);
        let metadata = passed
            .iter()
            .map(|&slot| answer.metadata.get(slot).copied().flatten());
        out.dynamic_metadata = Some(dynamic_metadata::of(request, metadata));
    }
    out
}

/// The descriptors that passed, as the reference counts them for the dynamic metadata: those
/// decided by a limit (not unmatched, `unlimited` or replaced) whose status is not
/// `OVER_LIMIT`, less those only global shadow mode answered `OK` (the reference keeps their
/// `OVER_LIMIT` status and changes only the overall code).
fn passed(answer: &Answer<'_>, statuses: &[DescriptorStatus]) -> Vec<usize> {
    let mut decided: Vec<Option<bool>> = answer
        .outcomes
        .iter()
        .zip(&answer.shown)
        .map(|(o, shown)| {
            o.as_ref().map(|o| {
                let own = shown.as_ref().is_some_and(|s| s.own_shadow);
                o.shadow_refused() && !own
            })
        })
        .collect();
    for (slot, fixed) in &answer.fixed {
        if let (
            Fixed::Blocked {
                shadow,
                own_shadow,
                over,
                ..
            },
            Some(d),
        ) = (fixed, decided.get_mut(*slot))
        {
            *d = Some(*over && *shadow && !*own_shadow);
        }
    }
    decided
        .iter()
        .zip(statuses)
        .enumerate()
        .filter_map(|(slot, (globally_refused, status))| {
            let ok = status.code != Code::OverLimit as i32;
            (ok && *globally_refused == Some(false)).then_some(slot)
        })
        .collect()
}

fn unmatched() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

/// An imported `unlimited` entry (OK, remaining at its maximum, as the reference answers) or
/// one of 0 per unit (over limit unless shadow, until the end of its window, as the reference
/// answers).
fn fixed_status(fixed: Fixed) -> DescriptorStatus {
    match fixed {
        Fixed::Unlimited => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        },
        Fixed::Blocked {
            unit,
            own_shadow,
            over,
            name,
            reset,
            ..
        } => DescriptorStatus {
            // Only a rule's own `shadow_mode` answers `OK`; under `[envoy] shadow` alone the
            // status stays `OVER_LIMIT` and only the overall code is `OK`, as the reference's.
            code: if own_shadow || !over {
                Code::Ok
            } else {
                Code::OverLimit
            } as i32,
            current_limit: Some(RateLimit {
                name: name.to_string(),
                requests_per_unit: 0,
                unit: envoy_unit(unit) as i32,
            }),
            duration_until_reset: Some(pb_duration(reset)),
            ..DescriptorStatus::default()
        },
    }
}

fn envoy_unit(unit: crate::Unit) -> Unit {
    match unit {
        crate::Unit::Second => Unit::Second,
        crate::Unit::Minute => Unit::Minute,
        crate::Unit::Hour => Unit::Hour,
        crate::Unit::Day => Unit::Day,
        crate::Unit::Week => Unit::Week,
        crate::Unit::Month => Unit::Month,
        crate::Unit::Year => Unit::Year,
    }
}

/// A decided descriptor's status; `shown.unit` is an imported limit's own unit, shown with
/// its `requests_per_unit` instead of the rate computed from the quota. `now`: when a fixed
/// window's status is answered.
fn status(o: &LimitDecision, shown: &Shown, now: tollgate::Timestamp) -> DescriptorStatus {
    let d = &o.decision;
    let rate = match shown.unit {
        Some(unit) => crate::RateUnit {
            unit: envoy_unit(unit),
            requests_per_unit: u32::try_from(o.quota.limit()).unwrap_or(u32::MAX),
        },
        None => rate_unit(&o.quota),
    };
    let mut until_reset = d
        .retry_after()
        .map_or(d.reset_after, |wait| d.reset_after.max(wait));
    // A fixed window with no count is already "back to a full quota" (0); the reference
    // answers the end of the unit's window whatever the count (a descriptor a refused call
    // did not charge, a check only, a too costly one on a fresh key), and so does this.
    if until_reset.is_zero()
        && let Some(period) = shown.window
    {
        until_reset = window_end(period, now);
    }
    // A refusal only `[envoy] shadow` hides keeps its `OVER_LIMIT` (the reference changes only
    // the overall code); a rule's own `shadow_mode` answers `OK`.
    let globally_hidden = o.shadow_refused() && !shown.own_shadow;
    DescriptorStatus {
        code: if o.shown_allowed() && !globally_hidden {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        current_limit: Some(RateLimit {
            name: shown.name.to_string(),
            requests_per_unit: rate.requests_per_unit,
            unit: rate.unit as i32,
        }),
        limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(pb_duration(until_reset)),
        quota: None,
    }
}

fn pb_duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(wire::ceil_secs(d)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

impl<St> Clone for RateLimitService<St> {
    fn clone(&self) -> Self {
        RateLimitService {
            source: self.source.clone(),
        }
    }
}

impl<St> fmt::Debug for RateLimitService<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService").finish_non_exhaustive()
    }
}
