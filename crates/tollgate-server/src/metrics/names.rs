//! The names of the series this crate records or describes by constant: one place to look a
//! name up, and the one both the recorder ([`super::tee_recorder`], which copies two of them)
//! and the functions that set them ([`super::record`]) read.
//!
//! Series recorded under a literal name elsewhere in the workspace are not listed here; their
//! HELP text is in [`super::describe`], which a test holds complete.

/// Decisions by limit and outcome, counted by the core limiter.
pub const DECISIONS: &str = "tollgate_decisions_total";
/// Would-be denials of shadow limits, by limit (counted by the core limiter).
pub const SHADOW_DENIED: &str = "tollgate_shadow_denied_total";
/// Store call latency, recorded by the core limiter.
pub const STORE_LATENCY: &str = "tollgate_store_latency_seconds";

/// Config reloads, by result (`ok`, `error`).
pub const CONFIG_RELOAD: &str = "tollgate_reloads_total";
/// Whether the last reload was applied.
pub const LAST_RELOAD_SUCCESSFUL: &str = "tollgate_config_last_reload_successful";
/// `[server]` / `[store]` settings the config file changes that wait for a restart.
pub const RESTART_PENDING: &str = "tollgate_config_restart_pending_settings";

/// Reloads of the listeners' certificate files, by result (`ok`, `error`).
pub const TLS_RELOAD: &str = "tollgate_tls_reloads_total";
/// Whether the last reload of the certificate files was applied.
pub const TLS_LAST_RELOAD_SUCCESSFUL: &str = "tollgate_tls_last_reload_successful";
/// When the served certificate expires (Unix time).
pub const TLS_CERT_EXPIRY: &str = "tollgate_tls_certificate_expiry_timestamp_seconds";

/// Keys held by the memory store per limit (sampled at each scrape).
pub const KEYS: &str = "tollgate_keys";
/// Whether the store answered the health probe (set at each scrape).
pub const STORE_UP: &str = "tollgate_store_up";
/// The Redis circuit breaker's state (set at each scrape, and by the breaker on transitions).
pub const CIRCUIT_OPEN: &str = "tollgate_store_circuit_open";
/// `store.timeout`, for the latency alert.
pub const STORE_TIMEOUT: &str = "tollgate_store_timeout_seconds";
/// `store.max_keys` of the memory store, for the key cap alert.
pub const STORE_MAX_KEYS: &str = "tollgate_store_max_keys";

/// HTTP requests by route and status.
pub const HTTP_REQUESTS: &str = "tollgate_http_requests_total";
/// HTTP request latency by route, from the request's head to the response's head.
pub const HTTP_DURATION: &str = "tollgate_http_request_duration_seconds";
/// The version, as a label of a gauge at 1.
pub const BUILD_INFO: &str = "tollgate_build_info";

/// Panics anywhere in the process, caught or not (counted by the panic hook,
/// `server::report_panics`).
pub const PANICS: &str = "tollgate_panics_total";

/// Each limit's refusal ratio over the last minute (set at each scrape).
pub const DENY_RATIO: &str = "tollgate_deny_ratio";
/// Refusals held by the deny cache (set at each scrape).
pub const DENY_CACHE_ENTRIES: &str = "tollgate_deny_cache_entries";
/// Units held in leases (`tollgate_leased_units`), set by the lease sweep.
pub const LEASED_UNITS: &str = "tollgate_leased_units";
/// `POST /v1/acquire` calls holding their connection now (`http/held_acquires.rs`).
pub const HELD_ACQUIRES: &str = "tollgate_held_acquires";
