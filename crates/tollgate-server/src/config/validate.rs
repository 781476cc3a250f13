//! From the raw shape to typed values, one section at a time: `[server]`, `[[limits]]`,
//! `[envoy]` (`[store]`, the largest, is `store_section`'s).
//!
//! Quotas and limits are built through the core constructors, so the core's own checks decide
//! what is valid; nothing is validated twice. The `[envoy]` section is compiled against the
//! limits as the gRPC service will, so what it refuses is refused here.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Lease, Limit, Limiter, MemoryStore, OnStoreError, Quota};
use tollgate_envoy::EnvoyRules;

use super::raw::{RawConfig, RawLimit};
use super::{
    ConfigError, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_HISTORY_INTERVAL,
    DEFAULT_HTTP, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_SHUTDOWN_TIMEOUT,
    FieldError, HISTORY_INTERVAL_RANGE, LimitConfig, ListenAddress, SERVER_TIMEOUT_RANGE, Secret,
    ServerConfig, address,
};
use crate::duration;

/// Whether two listeners would take the same port or socket: one path, or one non-zero
/// port on the same IP or on the unspecified one (`0.0.0.0:8080` holds `127.0.0.1:8080`).
fn same_listener(a: &ListenAddress, b: &ListenAddress) -> bool {
    match (a, b) {
        (ListenAddress::Unix(a), ListenAddress::Unix(b)) => a == b,
        (ListenAddress::Tcp(a), ListenAddress::Tcp(b)) => {
            a.port() != 0
                && a.port() == b.port()
                && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
        }
        _ => false,
    }
}

/// `[server]` (with `TOLLGATE_HTTP`, `TOLLGATE_GRPC`, `TOLLGATE_ADMIN_TOKEN` applied), but for
/// its TLS and Unix socket fields (`server_tls`).
pub(super) fn server(raw: &RawConfig, origin: &str) -> Result<ServerConfig, ConfigError> {
    let invalid = |field, e| ConfigError::invalid(origin, raw.name_of(field), e);
    let http = address::parse(raw.server.http.as_deref().unwrap_or(DEFAULT_HTTP))
        .map_err(|e| invalid("server.http", FieldError::from(e)))?;
    let grpc = raw
        .server
        .grpc
        .as_deref()
        .map(address::parse)
        .transpose()
        .map_err(|e| invalid("server.grpc", FieldError::from(e)))?;
    if let Some(grpc) = &grpc
        && same_listener(&http, grpc)
    {
        // `check-config` said "ok" and `serve` then failed to bind.
        return Err(invalid(
            "server.grpc",
            FieldError::SameListener(grpc.to_string()),
        ));
    }
    let admin_token = match &raw.server.admin_token {
        Some(t) if t.len() < 8 => {
            return Err(invalid("server.admin_token", FieldError::TokenTooShort));
        }
        // A newline (Kubernetes secrets made from files end in one), a space or a non-ASCII
        // character: accepted, every reset answered 401 for good.
        Some(t) if !t.bytes().all(|b| b.is_ascii_graphic()) => {
            return Err(invalid("server.admin_token", FieldError::TokenNotSendable));
        }
        Some(t) => Some(Secret::new(t.as_str())),
        None => None,
    };
    let timeout = |field: &'static str, given: &Option<String>, default: Duration| {
        let Some(text) = given else {
            return Ok(default);
        };
        let t = duration::parse(text).map_err(|e| invalid(field, e.into()))?;
        let (min, max) = SERVER_TIMEOUT_RANGE;
        if t < min || t > max {
            return Err(invalid(field, FieldError::DurationOutOfRange { min, max }));
        }
        Ok(t)
    };
    let s = &raw.server;
    let max_connections = match s.max_connections {
        Some(0) => return Err(invalid("server.max_connections", FieldError::Zero)),
        Some(n) => n,
        None => DEFAULT_MAX_CONNECTIONS,
    };
    Ok(ServerConfig {
        http,
        grpc,
        tls: None,
        unix_mode: super::DEFAULT_UNIX_MODE,
        admin_token,
        header_timeout: timeout(
            "server.header_timeout",
            &s.header_timeout,
            DEFAULT_HEADER_TIMEOUT,
        )?,
        body_timeout: timeout("server.body_timeout", &s.body_timeout, DEFAULT_BODY_TIMEOUT)?,
        idle_timeout: timeout("server.idle_timeout", &s.idle_timeout, DEFAULT_IDLE_TIMEOUT)?,
        max_connections,
        shutdown_timeout: timeout(
            "server.shutdown_timeout",
            &s.shutdown_timeout,
            DEFAULT_SHUTDOWN_TIMEOUT,
        )?,
        max_acquire_wait: timeout(
            "server.max_acquire_wait",
            &s.max_acquire_wait,
            super::DEFAULT_MAX_ACQUIRE_WAIT,
        )?,
        history_interval: match &s.history_interval {
            None => DEFAULT_HISTORY_INTERVAL,
            Some(text) => {
                let field = "server.history_interval";
                let t = duration::parse(text).map_err(|e| invalid(field, e.into()))?;
                let (min, max) = HISTORY_INTERVAL_RANGE;
                if t < min || t > max {
                    return Err(invalid(field, FieldError::DurationOutOfRange { min, max }));
                }
                t
            }
        },
    })
}

/// `[[limits]]`, in file order, names unique and none under the Envoy override limits' prefix
/// (it would share their counters).
pub(super) fn limits(raw: &[RawLimit], origin: &str) -> Result<Vec<LimitConfig>, ConfigError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    raw.iter()
        .enumerate()
        .map(|(i, l)| {
            if let Some(first) = seen.insert(&l.name, i) {
                let name = l.name.clone();
                let e = FieldError::DuplicateName { name, first };
                return Err(ConfigError::invalid(origin, format!("limits[{i}].name"), e));
            }
            if l.name.starts_with(tollgate_envoy::OVERRIDE_PREFIX) {
                let e = FieldError::ReservedName(l.name.clone());
                return Err(ConfigError::invalid(origin, format!("limits[{i}].name"), e));
            }
            limit(l).map_err(|(field, e)| {
                ConfigError::invalid(origin, format!("limits[{i}].{field}"), e)
            })
        })
        .collect()
}

/// One limit, built through the core constructors; on error, the field (within the entry)
/// and why.
fn limit(l: &RawLimit) -> Result<LimitConfig, (&'static str, FieldError)> {
    let core = |e: tollgate::LimitError| (e.field(), FieldError::Limit(e));
    let mut algorithm: Algorithm = l
        .algorithm
        .parse()
        .map_err(|e| ("algorithm", FieldError::from(e)))?;
    match (&mut algorithm, l.buckets) {
        (Algorithm::SlidingWindow { buckets }, Some(b)) => *buckets = b,
        (_, Some(_)) => return Err(("buckets", FieldError::NotForAlgorithm("sliding_window"))),
        _ => {}
    }
    if l.burst.is_some() && !algorithm.uses_burst() {
        return Err((
            "burst",
            FieldError::NotForAlgorithm("token_bucket and gcra"),
        ));
    }
    let period = duration::parse(&l.period).map_err(|e| ("period", FieldError::from(e)))?;
    let mut quota = Quota::new(l.limit, period).map_err(core)?;
    if let Some(burst) = l.burst {
        quota = quota.with_burst(burst).map_err(core)?;
    }
    let mut limit = Limit::new(l.name.as_str(), algorithm, quota)
        .and_then(|limit| limit.keyed_by(l.key.iter().map(String::as_str)))
        .map_err(core)?
        .on_store_error(l.on_store_error);
    if let Some(lease) = lease(l)? {
        limit = limit.lease(lease).map_err(core)?;
    }
    Ok(LimitConfig {
        limit,
        shadow: l.shadow,
    })
}

/// `mode`, `lease`, `lease_ttl`: the lease settings when `mode = "lease"` (checked
/// against the algorithm and the limit by the core's [`Limit::lease`]).
fn lease(l: &RawLimit) -> Result<Option<Lease>, (&'static str, FieldError)> {
    match l.mode.as_deref() {
        None | Some("exact") => {
            if l.lease.is_some() {
                return Err(("lease", FieldError::NotForMode));
            }
            if l.lease_ttl.is_some() {
                return Err(("lease_ttl", FieldError::NotForMode));
            }
            Ok(None)
        }
        Some("lease") => {
            let mut lease = Lease::new();
            if let Some(k) = l.lease {
                lease = lease.units(k);
            }
            if let Some(ttl) = &l.lease_ttl {
                lease = lease.ttl(duration::parse(ttl).map_err(|e| ("lease_ttl", e.into()))?);
            }
            Ok(Some(lease))
        }
        Some(other) => Err(("mode", FieldError::UnknownMode(other.to_owned()))),
    }
}

/// Reads `envoy.config_dir` (relative to `base`) into `envoy.imported`.
pub(super) fn import_envoy(
    envoy: &mut EnvoyRules,
    base: &Path,
    origin: &str,
) -> Result<(), ConfigError> {
    if let Some(dir) = &envoy.config_dir {
        let merge = envoy.merge_domain_config;
        envoy.imported = tollgate_envoy::load_dir_with(&base.join(dir), merge).map_err(|e| {
            ConfigError::invalid(origin, "envoy.config_dir", FieldError::Import(Box::new(e)))
        })?;
    }
    Ok(())
}

/// Appends the limits generated for `envoy.imported` to `limits`: fixed windows (or
/// `envoy.algorithm`), failing open (or `envoy.on_store_error`); a generated name may not be
/// the name of a `[[limits]]` entry.
pub(super) fn imported_limits(
    envoy: &EnvoyRules,
    limits: &mut Vec<LimitConfig>,
    origin: &str,
) -> Result<(), ConfigError> {
    let generated = envoy
        .imported
        .limits(
            envoy.algorithm.unwrap_or(Algorithm::FixedWindow),
            envoy.on_store_error.unwrap_or(OnStoreError::Allow),
        )
        .map_err(|e| {
            ConfigError::invalid(origin, "envoy.config_dir", FieldError::Import(Box::new(e)))
        })?;
    // Names → index, so that tens of thousands of imported limits are checked in linear time.
    let mut names: HashMap<String, usize> = limits
        .iter()
        .enumerate()
        .map(|(i, l)| (l.limit.name().to_owned(), i))
        .collect();
    for limit in generated {
        if let Some(&first) = names.get(limit.name()) {
            let name = limit.name().to_owned();
            let e = FieldError::DuplicateName { name, first };
            return Err(ConfigError::invalid(origin, "envoy.config_dir", e));
        }
        names.insert(limit.name().to_owned(), limits.len());
        limits.push(LimitConfig {
            limit,
            shadow: false,
        });
    }
    Ok(())
}

/// Compiles the `[envoy]` rules against `limits` as the gRPC service will (over a throwaway
/// memory store: compiling touches no counter), so that what it refuses is refused here.
pub(super) fn envoy(
    rules: &EnvoyRules,
    limits: &[LimitConfig],
    origin: &str,
) -> Result<(), ConfigError> {
    // Compiled even without rules: the `[envoy]` settings (`near_limit_ratio`,
    // `max_descriptors` …) are checked there.
    let store = MemoryStore::builder()
        .sweep_interval(None)
        .max_keys(1)
        .build();
    // Names are checked unique by `limits`; the limiter refuses nothing else.
    let limiter = Limiter::builder(store)
        .limits(limits.iter().map(|l| l.limit.clone()))
        .build()
        .map_err(|e| ConfigError::invalid(origin, "limits", FieldError::Limit(e)))?;
    tollgate_envoy::Snapshot::new(rules, Arc::new(limiter))
        .map(drop)
        .map_err(|e| ConfigError::invalid(origin, e.field.clone(), FieldError::Envoy(e)))
}
