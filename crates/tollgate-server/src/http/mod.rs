//! The HTTP API: what a request may carry, what it is answered, and the handlers between.
//!
//! - [`api`]: the JSON bodies, in and out (parsed by hand, naming the field at fault);
//! - [`response`]: the one place that decides status codes ([`Reply`], [`ApiError`]);
//! - [`state`]: [`AppState`], what every handler shares (the limit set, the store, the status
//!   figures), built once at start-up and read by the reloader and the background tasks too;
//! - `handlers`: the routes ([`router`]) and their handlers, thin glue between JSON and
//!   [`crate::limits::Limits`];
//! - `pacing`: `POST /v1/acquire` and `POST /v1/adjust`, slots and settlements;
//! - `held_acquires`: how many acquires may hold their connection at once;
//! - `status_body`: `GET /v1/status` and `GET /v1/history`, the status page's JSON, built from
//!   [`crate::status`]'s figures;
//! - `watch_lane`: the thread those reads (and `/metrics`, `/v1/top`, `/v1/limits`) are
//!   rendered on, apart from the checks' workers.
//!
//! Below the router, `crate::connection` bounds what a client may hold and writes its
//! errors with [`ApiError`] too, so every error a client sees has the same body.

pub mod api;
mod body;
mod handlers;
mod held_acquires;
mod pacing;
pub mod response;
pub mod state;
pub mod status_body;
mod verdict_json;
mod watch_lane;

pub use body::MAX_BODY;
pub use handlers::router;
pub(crate) use held_acquires::HeldAcquires;
pub use response::{ApiError, Reply};
pub use state::AppState;
