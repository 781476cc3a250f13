//! The reference's series, under its default Prometheus mapping's names, and the counts of
//! the service itself (config loads, call errors, gRPC calls).

/// Most distinct label sets made from descriptor values, per process.
pub const MAX_DYNAMIC: usize = 1000;

/// The longest label set made from descriptor values, in bytes (domain and keys): a longer
/// one is counted as if past [`MAX_DYNAMIC`]. Values come from callers (a `POST /json` is
/// unauthenticated), and unbounded they made `/metrics` 71 MB with 1000 sets of 14 KB.
pub const MAX_DYNAMIC_BYTES: usize = 256;

/// The share of the limit past which admitted hits are "near" it when `[envoy]
/// near_limit_ratio` is not set (the reference's default `NEAR_LIMIT_RATIO`).
pub const NEAR_LIMIT_RATIO: f64 = 0.8;

/// Metric names.
pub const TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// Hits admitted.
pub const WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// Admitted hits past the near-limit ratio.
pub const NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// Hits refused.
pub const OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// Hits refused by a shadow rule (answered OK).
pub const SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// Answers global shadow mode turned to OK.
pub const GLOBAL_SHADOW_MODE: &str = "ratelimit_service_global_shadow_mode";

/// The reference's service-level series (its `ServiceStats`, its gRPC server's), under its
/// default Prometheus mapping's names: config loads that succeeded.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// Config loads refused.
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// `ShouldRateLimit` calls that met an error, by `err_type`: `redis_error` (the store failed,
/// whatever the limit's policy then answered), `service_error` (a request refused as invalid).
pub const SHOULD_RATE_LIMIT_ERROR: &str = "ratelimit_service_should_rate_limit_error";
/// gRPC calls, by `grpc_method` (`ShouldRateLimit`).
pub const TOTAL_REQUESTS: &str = "ratelimit_service_total_requests";
/// gRPC call latency, by `grpc_method` (a histogram, in seconds).
pub const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

/// Counts one load (at start, or a reload) of a config with an `[envoy] config_dir`, as the
/// reference counts each load of its runtime directory.
pub fn config_load(ok: bool) {
    metrics::counter!(if ok {
        CONFIG_LOAD_SUCCESS
    } else {
        CONFIG_LOAD_ERROR
    })
    .increment(1);
}

/// Makes both config load series exist (at 0), so that a first error is an increase.
pub fn config_loads_watched() {
    metrics::counter!(CONFIG_LOAD_SUCCESS).increment(0);
    metrics::counter!(CONFIG_LOAD_ERROR).increment(0);
}

/// Counts a `ShouldRateLimit` call that met an error of `err_type`.
pub(crate) fn call_error(err_type: &'static str) {
    metrics::counter!(SHOULD_RATE_LIMIT_ERROR, "err_type" => err_type).increment(1);
}

/// Counts a gRPC call of `method` that took `took`.
pub(crate) fn grpc_call(method: &'static str, took: std::time::Duration) {
    metrics::counter!(TOTAL_REQUESTS, "grpc_method" => method).increment(1);
    metrics::histogram!(RESPONSE_TIME, "grpc_method" => method).record(took);
}

/// The five series of a rule's statistics key, in the order of [`Hits::counts`].
pub(crate) const RULE_SERIES: [&str; 5] = [
    TOTAL_HITS,
    WITHIN_LIMIT,
    NEAR_LIMIT,
    OVER_LIMIT,
    SHADOW_MODE,
];
