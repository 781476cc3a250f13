//! # tollgate-envoy
//!
//! The Envoy rate limit service (RLS v3, `envoy.service.ratelimit.v3.RateLimitService`) over
//! gRPC, deciding with tollgate limits. Envoy's `envoy.filters.http.ratelimit` filter sends a
//! domain and a list of descriptors (ordered key/value entries); [`EnvoyRules`] (the
//! `[envoy]` config section, `[[envoy.rules]]`) says which descriptor goes to which tollgate
//! limit and which entries become the key parts; [`RateLimitService`] answers with the
//! overall code and one status per descriptor.
//!
//! It also reads the reference service's (envoyproxy/ratelimit) YAML descriptor files
//! unchanged ([`load_dir`] → [`Imported`], `[envoy] config_dir`): each `rate_limit` becomes a
//! generated tollgate limit ([`Imported::limits`]) and descriptors are matched against the
//! trees the reference's way (most specific first, key-only defaults, wildcards, whitelists,
//! `replaces`), still through the core's `prepare_with` + `decide`.
//!
//! The crate is a library to be mounted by `tollgate serve`: the service reads the current
//! [`Snapshot`] (compiled rules + a shared [`tollgate::Limiter`]) on every call from a source
//! the server swaps on config reload, and [`serve`] runs it next to the standard gRPC health
//! service. It holds no config file, no runtime and no metrics exporter of its own.
//!
//! What Envoy relies on, and how it is met (see `docs/envoy.md`):
//! - `OVER_LIMIT` when any descriptor is over its limit; the request's descriptors are checked
//!   all or nothing, in one atomic store call prepared and decided by the core
//!   ([`tollgate::Limiter::prepare_with`], one entry per descriptor), each at its own
//!   `hits_addend`, or the request's (`decide/`; check-only descriptors, below, are peeked
//!   in a call of their own before it, which writes nothing);
//! - a store failure follows each limit's failure policy; when a `deny` policy refuses, the
//!   answer is gRPC `UNAVAILABLE`, which Envoy's `failure_mode_deny` turns into a refusal
//!   (Envoy treats an `UNKNOWN` *code* in the response as allowed, whatever that flag says);
//! - descriptors that match no rule are `OK` and charge nothing;
//! - a request's `hits_addend` 0 means 1; a descriptor's own `hits_addend` overrides it, and
//!   0 there means check only (peeked, charged nothing), as in the reference;
//! - a descriptor's `limit` override decides it (`matching/overrides.rs`); by default
//!   (`[envoy] override_counters = "shared"`, the reference's) it counts on the descriptor's
//!   counter whatever its rate: the imported limit's the descriptor matches, when that one is
//!   of the override's unit and keyed by the descriptor's own values, else one of
//!   `envoy.override.<unit>` keyed by the domain and entries; on a counter per rate with
//!   `"per_rate"`, or with an algorithm other than fixed windows ([`OverrideCounters`]);
//! - one call's work is bounded: at most `[envoy] max_descriptors` descriptors of at most
//!   `max_entries` entries each, else `INVALID_ARGUMENT` before anything is decided
//!   (`config/caps.rs`), and every step over the descriptors is linear in their number.
//!
//! For a migration from the reference it also counts the reference's per-rule and
//! service-level statistics under its Prometheus names (`metrics/`, counted by
//! `service/record.rs`), can add its limit headers (`reply/limit_headers.rs`) and its response
//! dynamic metadata (`reply/dynamic_metadata.rs`), and maps a request and its response to and
//! from JSON for the server's `POST /json` (`json.rs`, [`should_rate_limit`]).
//!
//! Mounting it:
//!
//! ```
//! use std::sync::Arc;
//!
//! use arc_swap::ArcSwap;
//! use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};
//! use tollgate_envoy::{EnvoyRules, RateLimitService, Snapshot};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! #[derive(serde::Deserialize)]
//! struct Config {
//!     envoy: EnvoyRules,
//! }
//! let config: Config = toml::from_str(
//!     r#"
//!     [[envoy.rules]]
//!     domain = "edge"
//!     limit = "per_ip"
//!     descriptor = [{ key = "remote_address", part = "ip" }]
//!     "#,
//! )?;
//! let per_ip = Limit::new("per_ip", Algorithm::Gcra, Quota::per_second(10)?)?.keyed_by(["ip"])?;
//! let limiter = Arc::new(Limiter::builder(MemoryStore::new()).limit(per_ip).build()?);
//! let snapshots = Arc::new(ArcSwap::from_pointee(Snapshot::new(&config.envoy, limiter.clone())?));
//! let service = RateLimitService::new(snapshots.clone());
//! // On reload, after validating the new file: the next call uses the new rules and limits.
//! snapshots.store(Arc::new(Snapshot::new(&config.envoy, limiter)?));
//! // In the server: tokio::spawn(tollgate_envoy::serve(listener, service, shutdown));
//! # drop(service);
//! # Ok(())
//! # }
//! ```

mod config;
mod decide;
mod json;
mod matching;
mod metrics;
mod reply;
mod serve;
mod service;
mod unit;
mod yaml;

pub use config::caps::{
    CEILING_DESCRIPTORS, CEILING_ENTRIES, DEFAULT_MAX_DESCRIPTORS, DEFAULT_MAX_ENTRIES,
};
pub use config::override_counters::OverrideCounters;
pub use config::rules_error::RulesError;
pub use config::{CurrentLimitName, EntryConfig, EnvoyRules, Refusals, RuleConfig};
pub use envoy_types;
pub use json::{JsonRateLimitRequest, response_json};
pub use matching::{
    KeyParts, MAX_CACHED as MAX_CACHED_OVERRIDES, OVERRIDE_PREFIX, Snapshot,
    limit_name as override_limit_name,
};
pub use metrics::{
    CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, GLOBAL_SHADOW_MODE,
    MAX_DYNAMIC as MAX_DYNAMIC_METRIC_KEYS, MAX_DYNAMIC_BYTES as MAX_DYNAMIC_METRIC_BYTES,
    NEAR_LIMIT, NEAR_LIMIT_RATIO, OVER_LIMIT, RESPONSE_TIME, SHADOW_MODE, SHOULD_RATE_LIMIT_ERROR,
    TOTAL_HITS, TOTAL_REQUESTS, WITHIN_LIMIT, config_load, config_loads_watched,
};
pub use serve::deferred_write::DeferredWrite;
pub use serve::deferred_write_io::DeferredWriteIo;
pub use serve::message_budget::{CONNECTION_SHARE_BYTES, MESSAGE_BUDGET_BYTES};
pub use serve::{
    DEFAULT_MAX_CONCURRENT_STREAMS, GrpcOptions, HEALTH_INTERVAL, MAX_MESSAGE_BYTES, serve,
    serve_with,
};
pub use service::{RateLimitService, should_rate_limit};
pub use tonic;
pub use unit::{RateUnit, rate_unit};
pub use yaml::import_error::ImportError;
pub use yaml::imported::{Descriptor, Domain, Imported, RateLimit as ImportedRateLimit, Unit};
pub use yaml::{
    MAX_DEPTH, MAX_DIR_BYTES, MAX_DIR_FILES, MAX_FILE_BYTES, MAX_NODES, contents_digest,
    dir_contents, load_dir, load_dir_with, parse_file,
};
