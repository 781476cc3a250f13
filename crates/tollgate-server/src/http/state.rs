//! [`AppState`]: what every handler shares, and what the reloader and the background tasks
//! reach the running service through.
//!
//! Built once at start-up (`server`), held in an `Arc`. The limit set is swapped whole by a
//! reload ([`arc_swap`]); everything else is fixed, or keeps its own figures behind its own
//! lock ([`crate::status`]). Its own module, apart from the handlers, so that the status
//! page's JSON (`status_body`) and the handlers both read it without reaching into each other.

use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::{Backend, Secret, StoreConfig};
use crate::limits::Limits;
use crate::metrics;
use crate::status::history::History;
use crate::status::rate_history::RateHistory;
use crate::status::reload_status::ReloadStatus;
use crate::status::store_probe::StoreProbe;
use crate::store::AnyStore;

use super::held_acquires::HeldAcquires;
use super::watch_lane::WatchLane;

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The current limit set, swapped by reloads.
    pub limits: ArcSwap<Limits>,
    /// The store, shared by every limit set.
    pub store: AnyStore,
    /// Bearer token for `/v1/reset`.
    pub admin_token: Option<Secret>,
    /// Prometheus exposition.
    pub metrics: PrometheusHandle,
    /// Config reloads, for the status page.
    pub reloads: ReloadStatus,
    /// When the service started.
    pub(crate) started: Instant,
    /// `store.timeout`.
    pub(crate) store_timeout: Duration,
    /// `store.max_keys`, for the memory store.
    pub(crate) max_keys: Option<usize>,
    /// The store's health probe.
    pub(crate) probe: StoreProbe,
    /// Decision counts over time, for rates.
    pub(crate) rates: RateHistory,
    /// The last hour, and the store's outages, for the status page.
    pub(crate) history: History,
    /// `server.max_acquire_wait`.
    pub(crate) max_acquire_wait: Duration,
    /// The held acquires, at most half of `server.max_connections`.
    pub(crate) held_acquires: HeldAcquires,
    /// Where the status reads are rendered, off the request workers.
    pub(crate) watch: WatchLane,
}

impl AppState {
    /// State for a server over `store` (configured by `config`) with `limits`.
    pub fn new(
        limits: Limits,
        store: AnyStore,
        config: &StoreConfig,
        admin_token: Option<Secret>,
    ) -> AppState {
        AppState {
            limits: ArcSwap::from_pointee(limits),
            store,
            admin_token,
            metrics: metrics::handle(),
            reloads: ReloadStatus::default(),
            started: Instant::now(),
            store_timeout: config.timeout,
            max_keys: matches!(config.backend, Backend::Memory).then_some(config.max_keys),
            probe: StoreProbe::new(&config.namespace),
            rates: RateHistory::default(),
            history: History::new(crate::config::DEFAULT_HISTORY_INTERVAL),
            max_acquire_wait: crate::config::DEFAULT_MAX_ACQUIRE_WAIT,
            held_acquires: HeldAcquires::new(crate::config::DEFAULT_MAX_CONNECTIONS),
            watch: WatchLane::start(),
        }
    }
}
