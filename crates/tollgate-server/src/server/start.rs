//! Start-up: the store opened and the shared state built from the config, before anything is
//! served.

use std::sync::Arc;

use super::clock::SharedClock;
use super::error::ServeError;
use crate::config::{Backend, Config};
use crate::http::AppState;
use crate::limits::Limits;
use crate::metrics;
use crate::store::AnyStore;

/// Opens the store and builds the limits and the Envoy rules over it.
pub(crate) async fn build_state(
    config: &Config,
    clock: Option<SharedClock>,
) -> Result<Arc<AppState>, ServeError> {
    // The recorder first: what connecting counts (the scripts loaded) is counted.
    let _ = crate::metrics::handle();
    let store = AnyStore::open(&config.store, clock.clone())
        .await
        .map_err(|source| ServeError::Store {
            backend: config.store.backend.name(),
            target: config.store.backend.to_string(),
            source,
        })?;
    let limits = Limits::build(
        config.limits.clone(),
        &config.envoy,
        store.clone(),
        config.store.namespace.clone(),
        clock,
    )?;
    let mut state = AppState::new(
        limits,
        store,
        &config.store,
        config.server.admin_token.clone(),
    );
    state.history = crate::status::history::History::new(config.server.history_interval);
    state.max_acquire_wait = config.server.max_acquire_wait;
    state.held_acquires = crate::http::HeldAcquires::new(config.server.max_connections);
    if config.envoy.config_dir.is_some() {
        // The reference's config load counters: this load, and the error series at 0.
        tollgate_envoy::config_loads_watched();
        tollgate_envoy::config_load(true);
    }
    // After the state, which installs the recorder.
    metrics::store_settings(
        config.store.timeout,
        matches!(config.store.backend, Backend::Memory).then_some(config.store.max_keys),
    );
    Ok(Arc::new(state))
}
