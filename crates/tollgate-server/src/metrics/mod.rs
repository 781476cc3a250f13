//! Prometheus exposition for `GET /metrics`.
//!
//! The core [`tollgate::Limiter`] records decisions, store errors and store latency through
//! the process-wide `metrics` facade; the recorder that receives them is installed once per
//! process ([`handle`]), so every server in the process (several, in tests) renders the same
//! registry. Tests use distinct limit names to tell their series apart.
//!
//! This module adds only what the core does not count: the service's own series
//! (`tollgate_reloads_total`, `tollgate_keys`, the store's health and settings, which
//! alerts compare against). It never counts a decision a second time; shadow limits'
//! would-be denials (`tollgate_shadow_denied_total`) are the limiter's.
//!
//! - `names`: the series' names, as constants;
//! - `describe`: every series' HELP text, as tables;
//! - `recorder`: the global recorder, installed once ([`handle`]): Prometheus's, teed
//!   (`tee_recorder`) so the status page sees decisions and store latencies too
//!   ([`crate::status::observed`]);
//! - `record`: the functions that set the service's own series;
//! - `process`: the process's own figures (memory, CPU, file descriptors), read from `/proc`
//!   at each scrape and appended as text.
//!
//! Each file uses its siblings by name (`super::names::…`), never through this table of
//! contents, so that no two of them depend on each other.

mod describe;
mod names;
pub(crate) mod process;
mod record;
mod recorder;
pub(crate) mod tee_recorder;

pub use names::*;
pub use record::{
    Route, build_info, circuit_open, config_reload, deny_cache_entries, deny_ratio, http_request,
    http_request_count, keys, leased_units, panics, reloads_watched, restart_pending,
    retire_limits, store_settings, store_up, tls_certificate_expiry, tls_reload,
    tls_reloads_watched,
};
pub use recorder::handle;
