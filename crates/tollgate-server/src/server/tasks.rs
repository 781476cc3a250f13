//! The background tasks of a running service, each until [`Stop`]: the lease sweep, the status
//! page's history sampler, and the reloader (or, without a config file, a SIGHUP that is only
//! logged).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::clock::SharedClock;
use super::reload::{self, Reloader};
use super::stop::Stop;
use crate::config::{Config, Overrides};
use crate::http::AppState;
use crate::http::status_body::sample_history;
use crate::metrics;

/// Every [`LEASE_SWEEP`], gives back the units of expired leases, until `stop` (a lease's
/// units otherwise go back with its key's next take, which an idle key never makes).
pub(super) fn spawn_lease_sweep(state: &Arc<AppState>, stop: &Stop) -> JoinHandle<()> {
    let state = Arc::clone(state);
    let stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(LEASE_SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stopped = stop.stopped();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let limits = state.limits.load_full();
                    limits.return_expired_leases().await;
                    crate::metrics::leased_units(limits.leased_units());
                }
                () = &mut stopped => return,
            }
        }
    })
}

/// Every `server.history_interval`, samples the status page's hour of history (and probes
/// the store, so that an outage is seen with no one looking), until `stop`.
pub(super) fn spawn_history(state: &Arc<AppState>, stop: &Stop) -> JoinHandle<()> {
    let state = Arc::clone(state);
    let stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(state.history.interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: the baseline of the first interval's increases.
        let stopped = stop.stopped();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = tick.tick() => sample_history(&state).await,
                () = &mut stopped => return,
            }
        }
    })
}

/// How often expired leases are given back.
const LEASE_SWEEP: Duration = Duration::from_secs(1);

/// Starts reloading from the watched file, if any; without one, SIGHUP is only logged.
pub(super) fn spawn_reload(
    watch: Option<(PathBuf, Overrides, Duration)>,
    config: &Config,
    clock: Option<SharedClock>,
    state: &Arc<AppState>,
    stop: &Stop,
) -> Option<JoinHandle<()>> {
    let Some((path, overrides, interval)) = watch else {
        reload::ignore_hangup(stop.receiver());
        return None;
    };
    state.reloads.watching();
    metrics::reloads_watched();
    let reloader = Reloader::new(path, overrides, config.clone(), clock, Arc::clone(state));
    Some(reload::spawn(reloader, interval, stop.receiver()))
}
