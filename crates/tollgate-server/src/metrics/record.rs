//! The service's own series, set by the code that knows their value: the HTTP layer (each
//! request), the scrape (the store's health, key counts, deny ratios), the reloader and the
//! lease sweep. Each function sets one idea, by the names in [`super::names`]; none counts a
//! decision (the core limiter does).

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use metrics::{Counter, Histogram};

use super::names::{
    BUILD_INFO, CIRCUIT_OPEN, CONFIG_RELOAD, DENY_CACHE_ENTRIES, DENY_RATIO, HTTP_DURATION,
    HTTP_REQUESTS, KEYS, LAST_RELOAD_SUCCESSFUL, LEASED_UNITS, PANICS, RESTART_PENDING,
    STORE_MAX_KEYS, STORE_TIMEOUT, STORE_UP, TLS_CERT_EXPIRY, TLS_LAST_RELOAD_SUCCESSFUL,
    TLS_RELOAD,
};

/// The route labels: the API's own routes by name, anything else `other` (a label per path
/// would let a client grow the metrics without bound).
const ROUTES: [&str; 17] = [
    "/v1/check",
    "/v1/peek",
    "/v1/reset",
    "/v1/acquire",
    "/v1/adjust",
    "/v1/limits",
    "/v1/top",
    "/v1/status",
    "/v1/history",
    "/metrics",
    "/healthz",
    "/healthcheck",
    "/readyz",
    "/json",
    "/",
    "page asset",
    "other",
];

/// The status labels: the codes this service answers by number, any other by class.
const STATUSES: [&str; 19] = [
    "200", "400", "401", "403", "404", "405", "408", "413", "414", "415", "429", "431", "500",
    "503", "1xx", "2xx", "3xx", "4xx", "5xx",
];

/// A request's route, as labelled in `tollgate_http_requests_total`: an index into the
/// route labels, so that a request's series are found without hashing their labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route(usize);

impl Route {
    /// The route of a request path.
    pub fn of(path: &str) -> Route {
        const PAGE_ASSET: usize = 15;
        const OTHER: usize = 16;
        Route(match path {
            "/status.js" | "/status.css" | "/favicon.svg" | "/favicon.ico" => PAGE_ASSET,
            _ => ROUTES[..PAGE_ASSET]
                .iter()
                .position(|r| *r == path)
                .unwrap_or(OTHER),
        })
    }

    /// Its label.
    pub fn label(self) -> &'static str {
        ROUTES[self.0]
    }
}

/// The index of a status's label.
fn status_index(status: axum::http::StatusCode) -> usize {
    match status.as_u16() {
        200 => 0,
        400 => 1,
        401 => 2,
        403 => 3,
        404 => 4,
        405 => 5,
        408 => 6,
        413 => 7,
        414 => 8,
        415 => 9,
        429 => 10,
        431 => 11,
        500 => 12,
        503 => 13,
        other => 13 + usize::from((other / 100).clamp(1, 5)),
    }
}

/// Each route's and status's request counter, and each route's latency histogram, made on
/// first use. A handle is the series itself (the registry's lookup, hashing the name and
/// labels, cost every request 0.15 µs in-process: `benches/router.rs`), so it must be made
/// from the process's recorder: the router's state installs it ([`super::handle`]) before any
/// request is served.
static REQUESTS: [[OnceLock<Counter>; STATUSES.len()]; ROUTES.len()] =
    [const { [const { OnceLock::new() }; STATUSES.len()] }; ROUTES.len()];
static DURATIONS: [OnceLock<Histogram>; ROUTES.len()] = [const { OnceLock::new() }; ROUTES.len()];

/// Counts a request and records its latency.
pub fn http_request(route: Route, status: axum::http::StatusCode, took: Duration) {
    http_request_count(route, status);
    DURATIONS[route.0]
        .get_or_init(|| metrics::histogram!(HTTP_DURATION, "route" => route.label()))
        .record(took);
}

/// Counts a request, without a latency: one answered before it was read whole (refused
/// below the router), whose time would say nothing of the API's.
pub fn http_request_count(route: Route, status: axum::http::StatusCode) {
    let status = status_index(status);
    REQUESTS[route.0][status]
        .get_or_init(|| {
            metrics::counter!(HTTP_REQUESTS, "route" => route.label(), "status" => STATUSES[status])
        })
        .increment(1);
}

/// Sets `tollgate_build_info{version}` to 1 (at start).
pub fn build_info() {
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// `tollgate_panics_total`, made (at 0, so that `increase()` sees the first panic) and
/// handed to the panic hook, which must not look a series up in the registry mid-panic.
pub fn panics() -> Counter {
    let counter = metrics::counter!(PANICS);
    counter.increment(0);
    counter
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
    metrics::gauge!(RESTART_PENDING).set(0.0);
}

/// Sets how many settings the config file changes that wait for a restart.
pub fn restart_pending(settings: usize) {
    metrics::gauge!(RESTART_PENDING).set(settings as f64);
}

/// Sets the units held in leases.
pub fn leased_units(units: u64) {
    metrics::gauge!(LEASED_UNITS).set(units as f64);
}

/// Records `limit`'s refusal ratio; `None` (no check in the last minute) is NaN, so that an
/// idle limit does not keep exporting the ratio of its last busy minute.
pub fn deny_ratio(limit: &str, ratio: Option<f64>) {
    remember(&RATIO_LIMITS, limit);
    metrics::gauge!(DENY_RATIO, "limit" => limit.to_owned()).set(ratio.unwrap_or(f64::NAN));
}

/// The limits whose `tollgate_deny_ratio` and `tollgate_keys` series were set.
static RATIO_LIMITS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static KEY_LIMITS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn remember(set: &Mutex<BTreeSet<String>>, limit: &str) {
    let mut set = set
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !set.contains(limit) {
        set.insert(limit.to_owned());
    }
}

/// The per-limit gauges of limits a reload removed: no ratio (NaN) for a limit not in
/// `limits`, and 0 keys for one not in `holding` either (the limits, and those whose keys the
/// memory store still holds). The exporter keeps a series until told otherwise, and a removed
/// limit's last values stayed for good (its 950 keys held `TollgateKeyCapNearFull` firing
/// until a restart).
pub fn retire_limits(limits: &[&str], holding: &[&str]) {
    let gone = |set: &Mutex<BTreeSet<String>>, present: &[&str]| -> Vec<String> {
        let set = set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.iter()
            .filter(|name| !present.contains(&name.as_str()))
            .cloned()
            .collect()
    };
    for name in gone(&RATIO_LIMITS, limits) {
        metrics::gauge!(DENY_RATIO, "limit" => name).set(f64::NAN);
    }
    for name in gone(&KEY_LIMITS, holding) {
        metrics::gauge!(KEYS, "limit" => name).set(0.0);
    }
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
    remember(&KEY_LIMITS, limit);
    // A gauge is an f64; key counts are far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(KEYS, "limit" => limit.to_owned()).set(count as f64);
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::{ROUTES, Route, STATUSES, status_index};

    #[test]
    fn every_route_has_its_own_label_and_anything_else_is_other() {
        for route in &ROUTES[..15] {
            assert_eq!(Route::of(route).label(), *route);
        }
        for asset in ["/status.js", "/status.css", "/favicon.svg", "/favicon.ico"] {
            assert_eq!(Route::of(asset).label(), "page asset");
        }
        for other in ["/v1/check/", "/V1/CHECK", "", "page asset", "other", "/x"] {
            assert_eq!(Route::of(other).label(), "other", "{other:?}");
        }
    }

    #[test]
    fn statuses_are_labelled_by_code_or_else_by_class() {
        let label =
            |code: u16| STATUSES[status_index(StatusCode::from_u16(code).expect("a valid code"))];
        for code in [
            200, 400, 401, 403, 404, 405, 408, 413, 414, 415, 429, 431, 500, 503,
        ] {
            assert_eq!(label(code), code.to_string());
        }
        for (code, class) in [(101, "1xx"), (204, "2xx"), (304, "3xx"), (418, "4xx")] {
            assert_eq!(label(code), class);
        }
        for code in [502, 504, 599, 999] {
            assert_eq!(label(code), "5xx", "{code}");
        }
    }
}
