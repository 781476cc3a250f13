//! The HELP text of every series the workspace records, sent with each scrape so that
//! `/metrics` says what each series means.
//!
//! Tables rather than calls, one per kind and unit: adding a series is adding a row. A test
//! scans the workspace for series recorded under a literal name and fails if one has no row
//! here (names held in constants are described by constant).

use tollgate_envoy as envoy;

use super::names::{
    BUILD_INFO, CIRCUIT_OPEN, CONFIG_RELOAD, DECISIONS, DENY_CACHE_ENTRIES, DENY_RATIO,
    HELD_ACQUIRES, HTTP_DURATION, HTTP_REQUESTS, KEYS, LAST_RELOAD_SUCCESSFUL, LEASED_UNITS,
    PANICS, RESTART_PENDING, SHADOW_DENIED, STORE_LATENCY, STORE_MAX_KEYS, STORE_TIMEOUT, STORE_UP,
    TLS_CERT_EXPIRY, TLS_LAST_RELOAD_SUCCESSFUL, TLS_RELOAD,
};

/// Describes every series to the installed recorder.
pub(super) fn describe() {
    for (name, help) in COUNTERS.iter().chain(ENVOY_COUNTERS) {
        metrics::describe_counter!(*name, *help);
    }
    for (name, help) in GAUGES {
        metrics::describe_gauge!(*name, *help);
    }
    for (name, help) in SECONDS_GAUGES {
        metrics::describe_gauge!(*name, metrics::Unit::Seconds, *help);
    }
    for (name, help) in SECONDS_HISTOGRAMS {
        metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help);
    }
}

/// Counters: the service's, the core's and the stores'.
const COUNTERS: &[(&str, &str)] = &[
    (
        DECISIONS,
        "Decisions by limit and outcome (allowed, denied, store_error_allowed, store_error_denied)",
    ),
    ("tollgate_store_errors_total", "Store failures by kind"),
    (SHADOW_DENIED, "Requests a shadow limit would have denied"),
    (
        "tollgate_tower_panics_total",
        "Panics in the rate-limit layer (a bug): while deciding, answered 500 (passed by a \
         layer of shadow limits only), or in the responder, answered with the default body \
         (the tower layer's, for a service that embeds it)",
    ),
    (
        "tollgate_tower_misconfigured_total",
        "Requests the rate-limit layer could not check because its limits and keys do not \
         fit together: answered 500 (the tower layer's, for a service that embeds it)",
    ),
    (
        "tollgate_reservations_total",
        "Reservations of slots by limit and result (reserved, refused, given_back, lost)",
    ),
    (
        "tollgate_adjusted_units_total",
        "Units settled after the fact by limit and direction (charge, refund)",
    ),
    (CONFIG_RELOAD, "Config reloads by result (ok, error)"),
    (
        PANICS,
        "Panics in the service, caught or not (each one a bug; the log has where and why)",
    ),
    (
        TLS_RELOAD,
        "Reloads of the listeners' certificate files (server.tls_*) by result (ok, error)",
    ),
    (
        "tollgate_tls_handshakes_total",
        "TLS handshakes by listener (http, grpc) and result (ok, error: refused, stalled, \
         garbled)",
    ),
    (HTTP_REQUESTS, "HTTP API requests by route and status"),
    (
        "tollgate_held_acquires_refused_total",
        "POST /v1/acquire asking to hold, refused (503) while half of server.max_connections \
         already hold theirs",
    ),
    (
        "tollgate_lease_takes_total",
        "Lease mode: store calls taking units, by limit and result (granted, refused, failed)",
    ),
    (
        "tollgate_lease_returned_units_total",
        "Lease mode: unspent units given back (expiry, reload, shutdown), by limit",
    ),
    (
        "tollgate_deny_cache_hits_total",
        "Refusals answered by the deny cache without a store call, by limit",
    ),
    (
        "tollgate_store_full_total",
        "Memory store at its key cap: new keys that took another's place or were refused, \
         by limit and result (replenished, evicted, refused)",
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
    (
        "tollgate_grpc_budget_refusals_total",
        "gRPC calls refused because unfinished messages of all calls filled their budget \
         (64 MiB)",
    ),
    (
        "tollgate_connections_timed_out_total",
        "Connections closed by a deadline, by listener and by what the client had not done in \
         time (head: its first bytes or a whole head; idle: a next request; answer: take an \
         answer's bytes; answer_window, gRPC: open its HTTP/2 window to an answer)",
    ),
    (
        "tollgate_redis_batches_total",
        "Coalesced Redis calls (one EVALSHA of the batch script for requests that queued)",
    ),
    (
        "tollgate_redis_batched_requests_total",
        "Requests carried by coalesced Redis calls (÷ batches = mean batch size)",
    ),
];

/// The Envoy service's counters under envoyproxy/ratelimit's names (docs/envoy.md).
const ENVOY_COUNTERS: &[(&str, &str)] = &[
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
];

/// Gauges without a unit.
const GAUGES: &[(&str, &str)] = &[
    (KEYS, "Keys held by the memory store, by limit"),
    (BUILD_INFO, "1, labelled with the running version"),
    (
        DENY_RATIO,
        "Share of checks refused by the quota over the last minute, by limit; NaN when the \
         limit had no check in that minute",
    ),
    (DENY_CACHE_ENTRIES, "Refusals held by the exact deny cache"),
    (
        HELD_ACQUIRES,
        "POST /v1/acquire calls holding their connection until their slot, now",
    ),
    (
        "tollgate_lease_overshoot_units",
        "Lease mode: units this instance holds that the store already counts as spent, by \
         limit: the most it can admit beyond the limit (summed over instances, the live \
         overshoot bound)",
    ),
    (
        LEASED_UNITS,
        "Lease mode: units held, over every limit and key",
    ),
    (
        STORE_UP,
        "1 when the store answered the health probe at the last scrape, else 0",
    ),
    (
        CIRCUIT_OPEN,
        "1 while the Redis store's circuit breaker is open (Redis only)",
    ),
    (
        STORE_MAX_KEYS,
        "The memory store's key cap (store.max_keys; memory store only)",
    ),
    (
        LAST_RELOAD_SUCCESSFUL,
        "0 when the last config reload was refused, else 1",
    ),
    (
        RESTART_PENDING,
        "[server] and [store] settings the config file changes that take effect only on \
         restart (0: the file is what runs)",
    ),
    (
        TLS_LAST_RELOAD_SUCCESSFUL,
        "0 when the last reload of the certificate files was refused (the previous \
         certificate is still served), else 1",
    ),
];

/// Gauges in seconds.
const SECONDS_GAUGES: &[(&str, &str)] = &[
    (STORE_TIMEOUT, "The store call timeout (store.timeout)"),
    (
        TLS_CERT_EXPIRY,
        "When the served certificate (server.tls_cert) expires, as a Unix time",
    ),
];

/// Histograms in seconds.
const SECONDS_HISTOGRAMS: &[(&str, &str)] = &[
    (STORE_LATENCY, "Store call latency"),
    (
        HTTP_DURATION,
        "HTTP API request latency by route (request head to response head)",
    ),
    (
        envoy::RESPONSE_TIME,
        "Envoy gRPC call latency, by grpc_method (ShouldRateLimit)",
    ),
];

#[cfg(test)]
mod tests {
    /// Every metric the workspace records under a literal name has HELP text here: a scrape
    /// shows what each series means. (Names held in constants, in `names.rs`, are described by
    /// constant above.)
    #[test]
    fn every_metric_is_described() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let described = [include_str!("describe.rs"), include_str!("names.rs")].concat();
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
