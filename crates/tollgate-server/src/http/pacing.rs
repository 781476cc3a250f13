//! `POST /v1/acquire` and `POST /v1/adjust`: pacing and settling over HTTP, thin glue over
//! [`crate::limits::Limits::reserve`] and [`crate::limits::Limits::adjust`].
//!
//! An acquire is answered as a check of its one limit (200, 429, 503, the same headers), with
//! the wait until its slot. With `"hold": true` the service sleeps that wait before answering,
//! and a client that goes away while held gives its slot back (the request's future is
//! dropped, [`tollgate::Limiter::acquire`] cancels). Without it the client sleeps the wait
//! itself; a slot it then does not use is lost (there is no cancel over HTTP). `max_wait_ms`
//! is bounded by `server.max_acquire_wait`, so a held connection is held that long at most,
//! and at most half of the listener's connections hold one at once (`held_acquires.rs`).
//!
//! An adjust answers the key's state after (200), 400 for what the core refuses (a `delta`
//! beyond the limit's capacity, an unknown limit, a missing key part) and 503 when the store
//! failed: a settlement has no failure policy, nothing was settled, and the caller decides.

use std::sync::Arc;

use axum::extract::State;
use tollgate::{CheckError, SettleError};

use super::api::{self, AcquireRequest, AdjustBody, AdjustRequest};
use super::body::Body;
use super::response::{ApiError, Reply};
use super::state::AppState;
use crate::limits::bounded_key;

/// One line a second for held acquires refused (a flood of them meets the cap on each).
static HELD_FULL_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();

/// `POST /v1/acquire`.
pub(super) async fn acquire(
    State(state): State<Arc<AppState>>,
    body: Result<Body, ApiError>,
) -> Result<Reply, ApiError> {
    let body = body?.0;
    let request: AcquireRequest = api::parse(&body).map_err(ApiError::BadRequest)?;
    let asked = request
        .into_acquire(state.max_acquire_wait)
        .map_err(ApiError::BadRequest)?;
    let key = bounded_key(&asked.key).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // Held while this handler waits, answered or dropped with its client.
    let _hold = match asked.hold {
        true => Some(state.held_acquires.try_hold().ok_or_else(|| {
            metrics::counter!("tollgate_held_acquires_refused_total").increment(1);
            if let Some(skipped) = HELD_FULL_LOG.admit() {
                tracing::warn!(
                    cap = state.held_acquires.cap(),
                    skipped,
                    "held /v1/acquire refused: half of server.max_connections already wait \
                     for their slots (counted in tollgate_held_acquires_refused_total)"
                );
            }
            ApiError::HeldAcquiresFull(state.held_acquires.cap())
        })?),
        false => None,
    };
    let limits = state.limits.load_full();
    let reservation = limits
        .reserve(&asked.limit, &key, asked.cost, asked.max_wait, asked.hold)
        .await
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(Reply::Acquired {
        verdict: Box::new(reservation.verdict()),
        wait: reservation.wait(),
        held: asked.hold && reservation.wait().is_some(),
    })
}

/// `POST /v1/adjust`.
pub(super) async fn adjust(
    State(state): State<Arc<AppState>>,
    body: Result<Body, ApiError>,
) -> Result<Reply, ApiError> {
    let body = body?.0;
    let request: AdjustRequest = api::parse(&body).map_err(ApiError::BadRequest)?;
    let (limit, key, delta) = request.into_parts();
    let key = bounded_key(&key).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let limits = state.limits.load_full();
    let decision = limits
        .adjust(&limit, &key, delta)
        .await
        .map_err(|e| match e {
            // The core checks `|delta|` as a cost: say it of the field the caller wrote.
            SettleError::Check(CheckError::CostExceedsCapacity {
                limit, capacity, ..
            }) => ApiError::BadRequest(format!(
                "delta {delta} is beyond what limit {limit:?} can ever admit: at most \
                 {capacity} units are charged or given back at once"
            )),
            SettleError::Check(e) => ApiError::BadRequest(e.to_string()),
            SettleError::Store(e) => ApiError::StoreUnavailable(e),
        })?;
    Reply::json(AdjustBody::new(limit, delta, &decision))
}
