//! The background tasks of a running service, each until [`Stop`]: the lease sweep, the status
//! page's history sampler, and the reloader (or, without a config file, a SIGHUP that is only
//! logged). A turn of one that panics is lost, not the task ([`survive`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
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
        every(LEASE_SWEEP, &stop, "lease sweep", || async {
            let limits = state.limits.load_full();
            limits.return_expired_leases().await;
            crate::metrics::leased_units(limits.leased_units());
        })
        .await;
    })
}

/// Every `server.history_interval`, samples the status page's hour of history (and probes
/// the store, so that an outage is seen with no one looking), until `stop`.
pub(super) fn spawn_history(state: &Arc<AppState>, stop: &Stop) -> JoinHandle<()> {
    let state = Arc::clone(state);
    let stop = stop.clone();
    tokio::spawn(async move {
        // The first tick is at once: the baseline of the first interval's increases.
        let period = state.history.interval();
        every(period, &stop, "history sampler", || sample_history(&state)).await;
    })
}

/// Every [`METRICS_UPKEEP`], drains the Prometheus histograms' raw samples into their
/// buckets, until `stop`. The recorder is built with `build_recorder` (`metrics::recorder`),
/// which spawns no upkeep task of its own: without this, every sample of
/// `tollgate_http_request_duration_seconds`, `tollgate_store_latency_seconds` and the gRPC
/// face's latency was held until the next `GET /metrics`. A service nobody scraped grew by
/// about 21 B per request for ever (an audit's release runs: 0.96 MB a minute on the memory
/// store at 700 checks/s, 2.07 on Redis; flat with a scrape every 5 s).
pub(super) fn spawn_metrics_upkeep(state: &Arc<AppState>, stop: &Stop) -> JoinHandle<()> {
    let state = Arc::clone(state);
    let stop = stop.clone();
    tokio::spawn(async move {
        every(METRICS_UPKEEP, &stop, "metrics upkeep", || async {
            state.metrics.run_upkeep();
        })
        .await;
    })
}

/// How often the histograms' samples are drained (the exporter's own default upkeep period).
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Runs `work` every `period` (the first at once; a late tick delays the next) until `stop`.
/// One at a time: a tick's work ends before the next begins.
async fn every<F, Fut>(period: Duration, stop: &Stop, task: &'static str, mut work: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stopped = stop.stopped();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = tick.tick() => survive(task, work()).await,
            () = &mut stopped => return,
        }
    }
}

/// Runs `work`; if it panics (a bug, which the panic hook counts and logs with its cause),
/// says which task's turn was lost and returns, so that the task goes on with its next turn
/// instead of ending for good while the service runs as if it did not.
pub(super) async fn survive(task: &'static str, work: impl Future<Output = ()>) {
    if AssertUnwindSafe(work).catch_unwind().await.is_err() {
        tracing::error!(
            task,
            "a turn of a background task panicked; the next runs as usual"
        );
    }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A tick whose work panics is lost; the ticks after it run, and the task still ends on
    /// stop.
    #[tokio::test(start_paused = true)]
    async fn a_panicking_turn_does_not_end_the_task() {
        let turns = Arc::new(AtomicUsize::new(0));
        let stop = Stop::new();
        let task = tokio::spawn({
            let (turns, stop) = (Arc::clone(&turns), stop.clone());
            async move {
                every(Duration::from_secs(1), &stop, "test task", || {
                    let turn = turns.fetch_add(1, Ordering::SeqCst);
                    async move { assert_ne!(turn, 0, "the first turn panics, on purpose") }
                })
                .await;
            }
        });
        // The first turn at once (it panics), then one a second.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(
            turns.load(Ordering::SeqCst) >= 5,
            "turns after the panic: {}",
            turns.load(Ordering::SeqCst)
        );
        assert!(!task.is_finished(), "the task ended");
        stop.stop_all();
        task.await.expect("the task ends on stop, without a panic");
    }
}
