//! `GET /v1/status`: everything the status page (`GET /`) shows, in one JSON document.
//!
//! Read-only, and safe to expose inside a cluster: limits as configured (names, algorithms,
//! quotas, key part *names*), counts, the store's health, and the most refused keys exactly
//! as `GET /v1/top` shows them. Never the admin token, never the Redis URL (it may hold a
//! password), never a key value beyond the top refused ones. Rates are computed here
//! ([`crate::status::rate_history`]) over real time, whatever the caller's clock.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tollgate::Span;

use super::api::{LimitBody, TopKeyBody};
use super::state::AppState;
use crate::limits::Limits;
use crate::status::history::{self, Outage};
use crate::status::latency_window::Percentiles;
use crate::status::observed::{DecisionCounts, Observed, observed};
use crate::status::panic_record;
use crate::status::rate_history::{Counts, Rate};
use crate::status::store_probe::Probed;

/// Keys listed per limit on the page.
const TOP_SHOWN: usize = 5;

/// The whole status.
#[derive(Debug, Serialize)]
pub struct StatusBody {
    /// The service's version.
    pub version: &'static str,
    /// Since the service started, ms (the page's clock for rates).
    pub uptime_ms: u64,
    /// The server's wall clock, ms since the Unix epoch.
    pub now_ms: u64,
    /// The store.
    pub store: StoreStatus,
    /// Each limit, in file order.
    pub limits: Vec<LimitStatus>,
    /// Config reloads.
    pub reload: ReloadBody,
    /// Panics since the start (each a bug); `null` when no panic hook counts them.
    pub panics: Option<PanicsBody>,
}

/// The store's health.
#[derive(Debug, Serialize)]
pub struct StoreStatus {
    /// `memory`, `redis` or `redis_cluster`.
    pub kind: &'static str,
    /// Connected (Redis started while down: not until the first connection).
    pub connected: bool,
    /// The health probe (a write on Redis, a peek on the memory store; at most a second old)
    /// answered, and the circuit breaker is not open.
    pub up: bool,
    /// The probe's error kind, when it failed.
    pub error: Option<&'static str>,
    /// How long the probe took, ms.
    pub probe_ms: f64,
    /// How long ago the probe ended, ms (results are reused for up to a second).
    pub probe_age_ms: f64,
    /// The current outage (`to_ms` null: down since `from_ms`) or the last one (when it
    /// ended); null: none since the start.
    pub outage: Option<Outage>,
    /// The Redis circuit breaker is open (`null`: memory store, or not connected).
    pub circuit_open: Option<bool>,
    /// While it is open, why: the kind and message of the last failure it counted.
    pub circuit_cause: Option<String>,
    /// `store.timeout`, ms.
    pub timeout_ms: f64,
    /// Store call latencies of the last minute (`null`: no call).
    pub latency: Option<LatencyBody>,
    /// The exact deny cache.
    pub deny_cache: DenyCacheBody,
    /// The memory store's key cap (`null` on Redis).
    pub max_keys: Option<usize>,
    /// Keys the memory store holds (`null` on Redis).
    pub keys: Option<u64>,
}

/// Latency percentiles, ms (each its histogram bucket's upper bound: at most 19 % high).
#[derive(Debug, Serialize)]
pub struct LatencyBody {
    /// The span covered, s.
    pub window_s: u64,
    /// Calls counted.
    pub samples: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

/// The deny cache's figures.
#[derive(Debug, Serialize)]
pub struct DenyCacheBody {
    /// Whether it is on.
    pub enabled: bool,
    /// Refusals held.
    pub entries: usize,
    /// The most it holds.
    pub capacity: usize,
}

/// One limit.
#[derive(Debug, Serialize)]
pub struct LimitStatus {
    /// As `GET /v1/limits` lists it.
    #[serde(flatten)]
    pub limit: LimitBody,
    /// Decisions since the service started, by outcome.
    pub decisions: DecisionCounts,
    /// Decisions and refusals per second, over the time since a previous call at least a
    /// second ago (`null`: no such call within the last minute).
    pub rate: Option<Rate>,
    /// Refusals ÷ checks over the last minute (`null` without a check).
    pub deny_ratio: Option<f64>,
    /// The most refused keys of the last five minutes (as `GET /v1/top` shows them).
    pub top_denied: Vec<TopKeyBody>,
    /// Keys the memory store holds for it (`null` on Redis).
    pub keys: Option<u64>,
}

/// Reloads.
#[derive(Debug, Serialize)]
pub struct ReloadBody {
    /// Whether the config file is watched (`serve --config`).
    pub watching: bool,
    /// The last attempt (`null`: none since start).
    pub last: Option<LastReloadBody>,
    /// `[server]` and `[store]` settings the file changes, which wait for a restart
    /// (`["store.timeout"]`; empty when none).
    pub pending_restart: Vec<String>,
}

/// One reload attempt.
#[derive(Debug, Serialize)]
pub struct LastReloadBody {
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Applied.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
}

/// Panics since the start, as the process's panic hook saw them (`tollgate serve` installs
/// it; without it, the status has `null`).
#[derive(Debug, Serialize)]
pub struct PanicsBody {
    /// How many.
    pub count: u64,
    /// The last one (`null`: none). Its message is in the log, not here: it may quote data.
    pub last: Option<LastPanicBody>,
}

/// One panic.
#[derive(Debug, Serialize)]
pub struct LastPanicBody {
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// The thread's name.
    pub thread: String,
    /// The source place, `file:line:column`.
    pub location: String,
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn epoch_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl LatencyBody {
    fn new(p: Percentiles) -> LatencyBody {
        LatencyBody {
            window_s: 60,
            samples: p.samples,
            p50_ms: millis(p.p50),
            p90_ms: millis(p.p90),
            p99_ms: millis(p.p99),
            max_ms: millis(p.max),
        }
    }
}

/// The store's health as of now: the newest probe's result, at most a second old
/// (`store_probe.rs`). A new probe's result is recorded in the outage history; a reused one,
/// or one older than a probe already recorded (`/readyz`'s), is not again.
pub(crate) async fn probed(state: &AppState) -> Probed {
    state.probe.recent(&state.store, &state.history).await
}

/// One sample of the hour of history: every limit's counts, the store's health and p99.
pub(crate) async fn sample_history(state: &AppState) {
    let probed = probed(state).await;
    let observed = observed();
    let limits = state.limits.load();
    let counts: Vec<(&str, history::Totals)> = limits
        .configs()
        .iter()
        .map(|c| {
            let d = observed.decisions(c.limit.name());
            (
                c.limit.name(),
                [
                    d.allowed + d.denied + d.store_error_allowed + d.store_error_denied,
                    d.denied + d.store_error_denied,
                    d.store_error_allowed + d.store_error_denied,
                ],
            )
        })
        .collect();
    let up = probed.error.is_none() && state.store.circuit_open() != Some(true);
    let p99 = observed.store_latency_percentiles().map(|p| millis(p.p99));
    state.history.sample(SystemTime::now(), &counts, up, p99);
}

/// `GET /v1/history`: the last hour and the store's current or last outage.
#[derive(Debug, Serialize)]
pub struct HistoryReply {
    /// The samples.
    #[serde(flatten)]
    pub history: history::HistoryBody,
    /// The store's current outage (`to_ms` null) or its last one; null: none since start.
    pub outage: Option<Outage>,
    /// Now, ms since the epoch (the page's clock for "… ago").
    pub now_ms: u64,
}

/// The history as of now.
pub(crate) fn history(state: &AppState) -> HistoryReply {
    HistoryReply {
        history: state.history.body(),
        outage: state.history.outage(),
        now_ms: epoch_ms(SystemTime::now()),
    }
}

/// The status as of now, with the store's health as `probed` (by [`probed`]).
pub(crate) fn status(state: &AppState, probed: Probed) -> StatusBody {
    let limits = state.limits.load();
    let memory_keys = state.store.memory_keys();
    let observed = observed();
    let limit_status = limit_statuses(state, &limits, memory_keys.as_deref(), &observed);
    StatusBody {
        version: env!("CARGO_PKG_VERSION"),
        uptime_ms: u64::try_from(state.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        now_ms: epoch_ms(SystemTime::now()),
        store: store_status(state, &probed, &limits, memory_keys.as_deref(), &observed),
        limits: limit_status,
        reload: reload_body(state),
        panics: panics_body(),
    }
}

/// Each limit, in file order: its counts, rates, deny ratio, most refused keys and (memory
/// store) keys held.
fn limit_statuses(
    state: &AppState,
    limits: &Limits,
    memory_keys: Option<&[(String, u64)]>,
    observed: &Observed,
) -> Vec<LimitStatus> {
    let keys_of = |name: &str| {
        memory_keys.map(|per_limit| {
            per_limit
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, k)| *k)
        })
    };
    let counts: Vec<(&str, DecisionCounts)> = limits
        .configs()
        .iter()
        .map(|c| (c.limit.name(), observed.decisions(c.limit.name())))
        .collect();
    let current: Counts = counts
        .iter()
        .map(|(name, d)| {
            let total = d.allowed + d.denied + d.store_error_allowed + d.store_error_denied;
            ((*name).to_owned(), [total, d.denied + d.store_error_denied])
        })
        .collect();
    let rates = state.rates.rates(Instant::now(), &current);
    limits
        .configs()
        .iter()
        .zip(counts)
        .map(|(config, (name, decisions))| LimitStatus {
            limit: LimitBody::new(config),
            decisions,
            rate: rates.get(name).copied(),
            deny_ratio: limits.deny_ratio(name),
            top_denied: limits
                .top_denied(name, TOP_SHOWN, Span::Recent)
                .unwrap_or_default()
                .iter()
                .map(TopKeyBody::new)
                .collect(),
            keys: keys_of(name),
        })
        .collect()
}

/// The store's health, latencies, deny cache and (memory store) keys.
fn store_status(
    state: &AppState,
    probed: &Probed,
    limits: &Limits,
    memory_keys: Option<&[(String, u64)]>,
    observed: &Observed,
) -> StoreStatus {
    StoreStatus {
        kind: state.store.kind(),
        connected: state.store.connected(),
        // Never "up" beside an open breaker: checks are then refused without a call.
        up: probed.error.is_none() && state.store.circuit_open() != Some(true),
        error: probed
            .error
            .or_else(|| (state.store.circuit_open() == Some(true)).then_some("circuit_open")),
        probe_ms: millis(probed.took),
        probe_age_ms: millis(probed.at.elapsed()),
        outage: state.history.outage(),
        circuit_open: state.store.circuit_open(),
        circuit_cause: state.store.circuit_cause(),
        timeout_ms: millis(state.store_timeout),
        latency: observed.store_latency_percentiles().map(LatencyBody::new),
        deny_cache: DenyCacheBody {
            enabled: state.store.deny_cache_entries() > 0,
            entries: limits.deny_cache_len(),
            capacity: state.store.deny_cache_entries(),
        },
        max_keys: state.max_keys,
        keys: memory_keys.map(|per_limit| per_limit.iter().map(|(_, k)| k).sum()),
    }
}

/// Whether the file is watched, and the last reload.
fn reload_body(state: &AppState) -> ReloadBody {
    ReloadBody {
        watching: state.reloads.is_watching(),
        last: state.reloads.last().map(|last| LastReloadBody {
            at_ms: epoch_ms(last.at),
            ok: last.ok,
            error: last.error,
        }),
        pending_restart: state.reloads.pending_restart(),
    }
}

fn panics_body() -> Option<PanicsBody> {
    let seen = panic_record::seen()?;
    Some(PanicsBody {
        count: seen.count,
        last: seen.last.map(|last| LastPanicBody {
            at_ms: epoch_ms(last.at),
            thread: last.thread,
            location: last.location,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a panic the body has its count and the last one's time, thread and place, in
    /// the fields the page reads; never its message.
    #[test]
    fn panics_are_shown_without_their_message() {
        crate::server::report_panics();
        let caught = std::panic::catch_unwind(|| panic!("secret-key-42 on purpose"));
        assert!(caught.is_err());
        let body = serde_json::to_value(panics_body()).expect("serializes");
        assert!(body["count"].as_u64().expect("a count") >= 1, "{body}");
        let last = &body["last"];
        assert!(last["at_ms"].as_u64().expect("at_ms") > 0, "{body}");
        assert!(last["thread"].is_string(), "{body}");
        assert!(
            last["location"]
                .as_str()
                .expect("location")
                .contains(".rs:"),
            "{body}"
        );
        assert!(!body.to_string().contains("secret-key-42"), "{body}");
    }
}
