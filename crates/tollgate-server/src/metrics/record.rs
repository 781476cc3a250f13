//! The service's own series, set by the code that knows their value: the HTTP layer (each
//! request), the scrape (the store's health, key counts, deny ratios), the reloader and the
//! lease sweep. Each function sets one idea, by the names in [`super::names`]; none counts a
//! decision (the core limiter does).

use std::time::{Duration, SystemTime};

use super::names::{
    BUILD_INFO, CIRCUIT_OPEN, CONFIG_RELOAD, DENY_CACHE_ENTRIES, DENY_RATIO, HTTP_DURATION,
    HTTP_REQUESTS, KEYS, LAST_RELOAD_SUCCESSFUL, LEASED_UNITS, STORE_MAX_KEYS, STORE_TIMEOUT,
    STORE_UP, TLS_CERT_EXPIRY, TLS_LAST_RELOAD_SUCCESSFUL, TLS_RELOAD,
};

/// The route label of a request path: the API's own routes by name, anything else `other`
/// (a label per path would let a client grow the metrics without bound).
pub fn route_label(path: &str) -> &'static str {
    match path {
        "/v1/check" => "/v1/check",
        "/v1/peek" => "/v1/peek",
        "/v1/reset" => "/v1/reset",
        "/v1/acquire" => "/v1/acquire",
        "/v1/adjust" => "/v1/adjust",
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

/// Makes the certificate reload series exist from start-up (at 0 and "successful"), as
/// [`reloads_watched`] does for the config file's.
pub fn tls_reloads_watched() {
    for result in ["ok", "error"] {
        metrics::counter!(TLS_RELOAD, "result" => result).increment(0);
    }
    metrics::gauge!(TLS_LAST_RELOAD_SUCCESSFUL).set(1.0);
}

/// Counts a reload of the certificate files, as [`config_reload`] counts the config file's.
pub fn tls_reload(ok: bool) {
    metrics::counter!(TLS_RELOAD, "result" => if ok { "ok" } else { "error" }).increment(1);
    metrics::gauge!(TLS_LAST_RELOAD_SUCCESSFUL).set(if ok { 1.0 } else { 0.0 });
}

/// Records when the served certificate expires.
pub fn tls_certificate_expiry(not_after: SystemTime) {
    let at = not_after
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(TLS_CERT_EXPIRY).set(at);
}

/// Records the memory store's key count for `limit`.
pub fn keys(limit: &str, count: u64) {
    // A gauge is an f64; key counts are far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(KEYS, "limit" => limit.to_owned()).set(count as f64);
}
