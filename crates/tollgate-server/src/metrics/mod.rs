//! Prometheus exposition for `GET /metrics`.
//!
//! The core [`tollgate::Limiter`] records decisions, store errors and store latency through
//! the process-wide `metrics` facade, so the exporter must be the process's global recorder:
//! a per-server local recorder would not see calls made across `.await` points. It is
//! therefore installed **once per process** ([`handle`]), and every server in the process
//! (several, in tests) renders the same registry. Tests use distinct limit names to tell
//! their series apart.
//!
//! This module adds only what the core does not count: the service's own series
//! (`tollgate_reloads_total`, `tollgate_keys`, the store's health and settings, which
//! alerts compare against). It never counts a decision a second time; shadow limits'
//! would-be denials (`tollgate_shadow_denied_total`) are the limiter's. The recorder is
//! Prometheus's, teed ([`tee_recorder`]) so the status page sees decisions and store
//! latencies too.

pub(crate) mod process;
pub(crate) mod tee_recorder;

use std::sync::OnceLock;

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::status::observed::observed;
use tee_recorder::TeeRecorder;

/// Decisions by limit and outcome, counted by the core limiter.
pub const DECISIONS: &str = "tollgate_decisions_total";

/// Would-be denials of shadow limits, by limit (counted by the core limiter).
pub const SHADOW_DENIED: &str = "tollgate_shadow_denied_total";
/// Config reloads, by result (`ok`, `error`).
pub const CONFIG_RELOAD: &str = "tollgate_reloads_total";
/// Keys held by the memory store per limit (sampled at each scrape).
pub const KEYS: &str = "tollgate_keys";
/// Store call latency, recorded by the core limiter.
pub const STORE_LATENCY: &str = "tollgate_store_latency_seconds";

/// Buckets for latency histograms: 50 µs to 1 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus handle, installing the recorder on first use.
///
/// If another recorder was installed first (the service embedded in a program that has its
/// own), the handle renders an empty registry and a warning says so.
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(TeeRecorder::new(recorder, observed())).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            describe();
            build_info();
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(
        DECISIONS,
        "Decisions by limit and outcome (allowed, denied, store_error_allowed, store_error_denied)"
    );
    metrics::describe_counter!("tollgate_store_errors_total", "Store failures by kind");
    metrics::describe_histogram!(STORE_LATENCY, metrics::Unit::Seconds, "Store call latency");
    metrics::describe_counter!(SHADOW_DENIED, "Requests a shadow limit would have denied");
    metrics::describe_counter!(CONFIG_RELOAD, "Config reloads by result (ok, error)");
    metrics::describe_gauge!(KEYS, "Keys held by the memory store, by limit");
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP API requests by route and status");
    metrics::describe_histogram!(
        HTTP_DURATION,
        metrics::Unit::Seconds,
        "HTTP API request latency by route (request head to response head)"
    );
    metrics::describe_gauge!(BUILD_INFO, "1, labelled with the running version");
    metrics::describe_gauge!(
        DENY_RATIO,
        "Share of checks refused by the quota over the last minute, by limit; NaN when the \
         limit had no check in that minute"
    );
    metrics::describe_gauge!(DENY_CACHE_ENTRIES, "Refusals held by the exact deny cache");
    metrics::describe_gauge!(
        "tollgate_lease_overshoot_units",
        "Lease mode: units this instance holds that the store already counts as spent, by \
         limit: the most it can admit beyond the limit (summed over instances, the live \
         overshoot bound)"
    );
    metrics::describe_counter!(
        "tollgate_lease_takes_total",
        "Lease mode: store calls taking units, by limit and result (granted, refused, failed)"
    );
    metrics::describe_counter!(
        "tollgate_lease_returned_units_total",
        "Lease mode: unspent units given back (expiry, reload, shutdown), by limit"
    );
    metrics::describe_gauge!(
        LEASED_UNITS,
        "Lease mode: units held, over every limit and key"
    );
    metrics::describe_counter!(
        "tollgate_deny_cache_hits_total",
        "Refusals answered by the deny cache without a store call, by limit"
    );
    metrics::describe_gauge!(
        STORE_UP,
        "1 when the store answered the health probe at the last scrape, else 0"
    );
    metrics::describe_gauge!(
        CIRCUIT_OPEN,
        "1 while the Redis store's circuit breaker is open (Redis only)"
    );
    metrics::describe_gauge!(
        STORE_TIMEOUT,
        metrics::Unit::Seconds,
        "The store call timeout (store.timeout)"
    );
    metrics::describe_gauge!(
        STORE_MAX_KEYS,
        "The memory store's key cap (store.max_keys; memory store only)"
    );
    metrics::describe_gauge!(
        LAST_RELOAD_SUCCESSFUL,
        "0 when the last config reload was refused, else 1"
    );
    // The Envoy service's counters under envoyproxy/ratelimit's names (docs/envoy.md).
    use tollgate_envoy as envoy;
    for (name, help) in [
        (
            envoy::TOTAL_HITS,
            "Envoy descriptor hits, by rule key (as envoyproxy/ratelimit)",
        ),
        (
            envoy::WITHIN_LIMIT,
            "Envoy descriptor hits admitted, by rule key",
        ),
        (
            envoy::NEAR_LIMIT,
            "Admitted Envoy hits past envoy.near_limit_ratio (default 80 %) of the limit, by \
             rule key",
        ),
        (
            envoy::OVER_LIMIT,
            "Envoy descriptor hits refused, by rule key",
        ),
        (
            envoy::SHADOW_MODE,
            "Envoy hits refused by a shadow rule and answered OK, by rule key",
        ),
        (
            envoy::GLOBAL_SHADOW_MODE,
            "Envoy answers turned OK by global shadow mode",
        ),
        (
            envoy::CONFIG_LOAD_SUCCESS,
            "Loads of a config with envoy.config_dir that succeeded (start and reloads, as \
             envoyproxy/ratelimit)",
        ),
        (
            envoy::CONFIG_LOAD_ERROR,
            "Reloads of a config with envoy.config_dir that were refused (the old rules stay)",
        ),
        (
            envoy::SHOULD_RATE_LIMIT_ERROR,
            "Envoy ShouldRateLimit calls (gRPC and POST /json) that met an error, by err_type: \
             redis_error (the store failed), service_error (an invalid request)",
        ),
        (
            envoy::TOTAL_REQUESTS,
            "Envoy gRPC calls, by grpc_method (ShouldRateLimit)",
        ),
    ] {
        metrics::describe_counter!(name, help);
    }
    for (name, help) in [
        (
            "tollgate_store_full_total",
            "Memory store at its key cap: new keys that evicted another or were refused, by \
             limit and result (evicted, refused)",
        ),
        (
            "tollgate_store_circuit_opened_total",
            "Times the Redis store's circuit breaker opened",
        ),
        (
            "tollgate_redis_script_loads_total",
            "Times the Redis store loaded its scripts (at connect, and after Redis lost them)",
        ),
        (
            "tollgate_redis_cross_slot_give_backs_total",
            "Redis Cluster: cross-slot checks whose charged slots were given back after a later \
             slot refused",
        ),
        (
            "tollgate_redis_sentinel_switches_total",
            "Redis behind Sentinel: times the store followed the master to another node",
        ),
        (
            "tollgate_redis_late_scripts_total",
            "Redis store: checks and lease takes Redis ran after their deadline, which charged \
             nothing",
        ),
        (
            "tollgate_redis_unanswered_give_backs_total",
            "Redis store: charges given back because their caller had stopped waiting",
        ),
        (
            "tollgate_connections_shed_total",
            "Connections closed to make room for a new client on a full listener, by listener",
        ),
    ] {
        metrics::describe_counter!(name, help);
    }
    metrics::describe_histogram!(
        envoy::RESPONSE_TIME,
        metrics::Unit::Seconds,
        "Envoy gRPC call latency, by grpc_method (ShouldRateLimit)"
    );
    metrics::describe_counter!(
        "tollgate_redis_batches_total",
        "Coalesced Redis calls (one EVALSHA of the batch script for requests that queued)"
    );
    metrics::describe_counter!(
        "tollgate_redis_batched_requests_total",
        "Requests carried by coalesced Redis calls (÷ batches = mean batch size)"
    );
}

/// HTTP requests by route and status.
pub const HTTP_REQUESTS: &str = "tollgate_http_requests_total";
/// HTTP request latency by route, from the request's head to the response's head.
pub const HTTP_DURATION: &str = "tollgate_http_request_duration_seconds";
/// The version, as a label of a gauge at 1.
pub const BUILD_INFO: &str = "tollgate_build_info";

/// The route label of a request path: the API's own routes by name, anything else `other`
/// (a label per path would let a client grow the metrics without bound).
pub fn route_label(path: &str) -> &'static str {
    match path {
        "/v1/check" => "/v1/check",
        "/v1/peek" => "/v1/peek",
        "/v1/reset" => "/v1/reset",
        "/v1/limits" => "/v1/limits",
        "/v1/top" => "/v1/top",
        "/v1/status" => "/v1/status",
        "/v1/history" => "/v1/history",
        "/metrics" => "/metrics",
        "/healthz" => "/healthz",
        "/healthcheck" => "/healthcheck",
        "/readyz" => "/readyz",
        "/json" => "/json",
        "/" => "/",
        "/status.js" | "/status.css" | "/favicon.svg" | "/favicon.ico" => "page asset",
        _ => "other",
    }
}

/// Counts a request and records its latency.
pub fn http_request(route: &'static str, status: axum::http::StatusCode, took: Duration) {
    let status: &'static str = match status.as_u16() {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        408 => "408",
        413 => "413",
        415 => "415",
        429 => "429",
        500 => "500",
        503 => "503",
        other => match other / 100 {
            1 => "1xx",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            _ => "5xx",
        },
    };
    metrics::counter!(HTTP_REQUESTS, "route" => route, "status" => status).increment(1);
    metrics::histogram!(HTTP_DURATION, "route" => route).record(took);
}

/// Sets `tollgate_build_info{version}` to 1 (at start).
pub fn build_info() {
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// Whether the store answered the health probe (set at each scrape).
pub const STORE_UP: &str = "tollgate_store_up";
/// The Redis circuit breaker's state (set at each scrape, and by the breaker on transitions).
pub const CIRCUIT_OPEN: &str = "tollgate_store_circuit_open";
/// `store.timeout`, for the latency alert.
pub const STORE_TIMEOUT: &str = "tollgate_store_timeout_seconds";
/// `store.max_keys` of the memory store, for the key cap alert.
pub const STORE_MAX_KEYS: &str = "tollgate_store_max_keys";
/// Whether the last reload was applied.
pub const LAST_RELOAD_SUCCESSFUL: &str = "tollgate_config_last_reload_successful";

/// Records the store's health probe result.
pub fn store_up(up: bool) {
    metrics::gauge!(STORE_UP).set(if up { 1.0 } else { 0.0 });
}

/// Records the circuit breaker's state.
pub fn circuit_open(open: bool) {
    metrics::gauge!(CIRCUIT_OPEN).set(if open { 1.0 } else { 0.0 });
}

/// Records the store's settings: its call timeout and, for the memory store, its key cap.
pub fn store_settings(timeout: Duration, max_keys: Option<usize>) {
    metrics::gauge!(STORE_TIMEOUT).set(timeout.as_secs_f64());
    if let Some(max) = max_keys {
        // Far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        metrics::gauge!(STORE_MAX_KEYS).set(max as f64);
    }
}

/// Makes the reload series exist from start-up (at 0 and "successful"), so that a first
/// failure is an increase Prometheus can see, not a series appearing at 1.
pub fn reloads_watched() {
    for result in ["ok", "error"] {
        metrics::counter!(CONFIG_RELOAD, "result" => result).increment(0);
    }
    metrics::gauge!(LAST_RELOAD_SUCCESSFUL).set(1.0);
}

/// Each limit's refusal ratio over the last minute (set at each scrape).
pub const DENY_RATIO: &str = "tollgate_deny_ratio";
/// Refusals held by the deny cache (set at each scrape).
pub const DENY_CACHE_ENTRIES: &str = "tollgate_deny_cache_entries";
/// Units held in leases (`tollgate_leased_units`), set by the lease sweep.
pub const LEASED_UNITS: &str = "tollgate_leased_units";

/// Sets the units held in leases.
pub fn leased_units(units: u64) {
    metrics::gauge!(LEASED_UNITS).set(units as f64);
}

/// Records `limit`'s refusal ratio; `None` (no check in the last minute) is NaN, so that an
/// idle limit does not keep exporting the ratio of its last busy minute.
pub fn deny_ratio(limit: &str, ratio: Option<f64>) {
    metrics::gauge!(DENY_RATIO, "limit" => limit.to_owned()).set(ratio.unwrap_or(f64::NAN));
}

/// Records the deny cache's size.
pub fn deny_cache_entries(entries: usize) {
    // Far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(DENY_CACHE_ENTRIES).set(entries as f64);
}

/// Counts a config reload attempt.
pub fn config_reload(ok: bool) {
    metrics::counter!(CONFIG_RELOAD, "result" => if ok { "ok" } else { "error" }).increment(1);
    metrics::gauge!(LAST_RELOAD_SUCCESSFUL).set(if ok { 1.0 } else { 0.0 });
}

/// Records the memory store's key count for `limit`.
pub fn keys(limit: &str, count: u64) {
    // A gauge is an f64; key counts are far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(KEYS, "limit" => limit.to_owned()).set(count as f64);
}

#[cfg(test)]
mod tests {
    /// Every metric the workspace records under a literal name has HELP text here: a scrape
    /// shows what each series means. (Names held in constants are described by name above.)
    #[test]
    fn every_metric_is_described() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let described = include_str!("mod.rs");
        let mut missing = Vec::new();
        let mut seen = 0;
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    if !matches!(name, "target" | "tests" | "benches" | "examples" | "bench") {
                        dirs.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("read source");
                    for macro_name in ["counter!(", "gauge!(", "histogram!("] {
                        for (at, _) in text.match_indices(macro_name) {
                            let rest = text[at + macro_name.len()..].trim_start();
                            let Some(rest) = rest.strip_prefix('"') else {
                                continue;
                            };
                            let name: String = rest.chars().take_while(|c| *c != '"').collect();
                            seen += 1;
                            if !described.contains(&format!("\"{name}\"")) {
                                missing.push(format!("{name} ({})", path.display()));
                            }
                        }
                    }
                }
            }
        }
        assert!(seen > 10, "found only {seen} metrics: the scan is broken");
        assert!(missing.is_empty(), "metrics without HELP text: {missing:?}");
    }
}
