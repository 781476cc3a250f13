//! The service's configuration: one TOML file, environment overrides applied in one place
//! ([`Overrides`]), validated once into typed values.
//!
//! Every error names the file, the field as written (`limits[2].period`) and what is wrong.
//! Quotas and limits are built through the core constructors, so the core's own checks (and
//! its field names) decide what is valid; nothing is validated twice. The `[envoy]` section
//! is `tollgate_envoy`'s own type, checked against the limits by compiling it as the gRPC
//! service will (`envoy.rules[1].limit: unknown limit "nope"`), so `check-config` and a
//! reload refuse exactly what the service would. Secrets (the admin token,
//! Redis passwords) are redacted in `Debug` output.

mod raw;
mod secret;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tollgate::{
    Algorithm, DEFAULT_MAX_KEYS, Limit, LimitError, Limiter, MemoryStore, Namespace, Quota,
};
pub use tollgate_envoy::EnvoyRules;

use crate::duration;
use raw::{RawConfig, RawLimit};
pub use secret::{RedisUrl, Secret};

/// The default HTTP listen address.
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// The default store call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The longest store timeout accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from (a file name), for messages.
    pub origin: String,
    /// `[server]`.
    pub server: ServerConfig,
    /// `[store]`.
    pub store: StoreConfig,
    /// `[[limits]]`, in file order.
    pub limits: Vec<LimitConfig>,
    /// `[envoy]`: which Envoy descriptor goes to which limit (served on `server.grpc`).
    pub envoy: EnvoyRules,
}

/// `[server]`: where to listen and who may reset.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// HTTP API, metrics and health checks.
    pub http: SocketAddr,
    /// Envoy rate limit service (gRPC, with the gRPC health service); none: not served.
    pub grpc: Option<SocketAddr>,
    /// Bearer token for `POST /v1/reset`; without one, reset is refused.
    pub admin_token: Option<Secret>,
}

/// `[store]`: where counters live.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Memory, one Redis, or a Redis Cluster.
    pub backend: Backend,
    /// Store call timeout (default 50 ms).
    pub timeout: Duration,
    /// Key prefix (default `tollgate`).
    pub namespace: Namespace,
    /// Most keys the memory store holds.
    pub max_keys: usize,
}

/// Which store holds the counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// This process's memory (no `redis` or `cluster` given).
    Memory,
    /// One Redis server.
    Redis(RedisUrl),
    /// A Redis Cluster, by its seed nodes.
    Cluster(Vec<RedisUrl>),
}

impl Backend {
    /// `memory`, `redis` or `redis_cluster`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis(_) => "redis",
            Backend::Cluster(_) => "redis_cluster",
        }
    }
}

/// Where the counters are, with passwords redacted.
impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory => f.write_str("memory"),
            Backend::Redis(url) => write!(f, "{url}"),
            Backend::Cluster(urls) => {
                let urls: Vec<String> = urls.iter().map(ToString::to_string).collect();
                f.write_str(&urls.join(", "))
            }
        }
    }
}

/// One `[[limits]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    /// The limit, built by the core.
    pub limit: Limit,
    /// A shadow limit answers allowed and only counts would-be denials.
    pub shadow: bool,
}

/// Environment overrides, read in one place: `TOLLGATE_HTTP`, `TOLLGATE_GRPC`,
/// `TOLLGATE_REDIS_URL`, `TOLLGATE_ADMIN_TOKEN`.
#[derive(Clone, Default)]
pub struct Overrides {
    /// `TOLLGATE_HTTP`: replaces `server.http`.
    pub http: Option<String>,
    /// `TOLLGATE_GRPC`: replaces `server.grpc` (and serves the Envoy service).
    pub grpc: Option<String>,
    /// `TOLLGATE_REDIS_URL`: replaces `store.redis` (and any `store.cluster`).
    pub redis_url: Option<String>,
    /// `TOLLGATE_ADMIN_TOKEN`: replaces `server.admin_token`.
    pub admin_token: Option<String>,
}

impl Overrides {
    /// Reads the process environment.
    pub fn from_env() -> Overrides {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Overrides {
            http: var("TOLLGATE_HTTP"),
            grpc: var("TOLLGATE_GRPC"),
            redis_url: var("TOLLGATE_REDIS_URL"),
            admin_token: var("TOLLGATE_ADMIN_TOKEN"),
        }
    }
}

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overrides")
            .field("http", &self.http)
            .field("grpc", &self.grpc)
            .field("redis_url", &self.redis_url.as_deref().map(RedisUrl::parse))
            .field("admin_token", &self.admin_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{origin}: cannot read the file")]
    Read {
        /// The file.
        origin: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A field is missing, malformed or out of range.
    #[error(
        "{origin}: {}{reason}{}",
        if field.is_empty() { String::new() } else { format!("{field}: ") },
        line.map(|l| format!(" (line {l})")).unwrap_or_default()
    )]
    Invalid {
        /// The file.
        origin: String,
        /// The field as written, e.g. `limits[2].period` (empty for the file as a whole).
        field: String,
        /// What is wrong.
        reason: String,
        /// The line in the file, when the TOML parser knows it.
        line: Option<usize>,
    },
}

impl ConfigError {
    /// The field at fault (`limits[2].period`), if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { field, .. } => Some(field),
        }
    }
}

impl Config {
    /// Reads and validates the file at `path`, then applies `overrides`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the field.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            origin: origin.clone(),
            source,
        })?;
        Config::parse(&text, &origin, overrides)
    }

    /// Validates TOML `text`; `origin` names it in errors.
    ///
    /// ```
    /// use tollgate_server::config::{Config, Overrides};
    ///
    /// let text = r#"
    /// [[limits]]
    /// name = "sms"
    /// algorithm = "fixed_window"
    /// limit = 100
    /// period = "0s"
    /// on_store_error = "deny"
    /// "#;
    /// let err = Config::parse(text, "t.toml", &Overrides::default()).unwrap_err();
    /// assert_eq!(err.to_string(), "t.toml: limits[0].period: must be at least 1ms");
    /// ```
    ///
    /// # Errors
    /// [`ConfigError`] naming `origin` and the field; a file without `[[limits]]` is refused
    /// (`limits: no [[limits]] defined`), since it would answer every check `unknown limit`.
    pub fn parse(text: &str, origin: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
        let config = Config::validate(parse_toml(text, origin)?, origin, overrides)?;
        if config.limits.is_empty() {
            return Err(ConfigError::Invalid {
                origin: origin.to_owned(),
                field: "limits".into(),
                reason: "no [[limits]] defined; a config file needs at least one limit".into(),
                line: None,
            });
        }
        Ok(config)
    }

    /// The configuration of `tollgate serve` without `--config`: the defaults and the
    /// environment `overrides`, no limits.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable of a malformed override.
    pub fn without_file(overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::validate(RawConfig::default(), "(no config file)", overrides)
    }

    fn validate(
        raw: RawConfig,
        origin: &str,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            origin: origin.to_owned(),
            field: field.to_owned(),
            reason,
            line: None,
        };

        let http_field = if overrides.http.is_some() {
            "TOLLGATE_HTTP"
        } else {
            "server.http"
        };
        let http_text = overrides
            .http
            .as_deref()
            .or(raw.server.http.as_deref())
            .unwrap_or(DEFAULT_HTTP);
        let http = parse_addr(http_text).map_err(|r| invalid(http_field, r))?;
        let grpc_field = if overrides.grpc.is_some() {
            "TOLLGATE_GRPC"
        } else {
            "server.grpc"
        };
        let grpc = overrides
            .grpc
            .as_deref()
            .or(raw.server.grpc.as_deref())
            .map(parse_addr)
            .transpose()
            .map_err(|r| invalid(grpc_field, r))?;
        let token_field = if overrides.admin_token.is_some() {
            "TOLLGATE_ADMIN_TOKEN"
        } else {
            "server.admin_token"
        };
        let admin_token = match overrides.admin_token.clone().or(raw.server.admin_token) {
            Some(t) if t.len() < 8 => {
                return Err(invalid(token_field, "must be at least 8 characters".into()));
            }
            Some(t) => Some(Secret::new(t)),
            None => None,
        };

        let backend = if let Some(url) = &overrides.redis_url {
            Backend::Redis(RedisUrl::parse(url).map_err(|r| invalid("TOLLGATE_REDIS_URL", r))?)
        } else {
            match (&raw.store.redis, &raw.store.cluster) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        "store",
                        "give either redis or cluster, not both".into(),
                    ));
                }
                (Some(url), None) => {
                    Backend::Redis(RedisUrl::parse(url).map_err(|r| invalid("store.redis", r))?)
                }
                (None, Some(urls)) if urls.is_empty() => {
                    return Err(invalid(
                        "store.cluster",
                        "must list at least one node".into(),
                    ));
                }
                (None, Some(urls)) => Backend::Cluster(
                    urls.iter()
                        .enumerate()
                        .map(|(i, u)| {
                            RedisUrl::parse(u)
                                .map_err(|r| invalid(&format!("store.cluster[{i}]"), r))
                        })
                        .collect::<Result<_, _>>()?,
                ),
                (None, None) => Backend::Memory,
            }
        };
        let timeout = match &raw.store.timeout {
            None => DEFAULT_TIMEOUT,
            Some(t) => {
                let t = duration::parse(t).map_err(|r| invalid("store.timeout", r))?;
                if t.is_zero() || t > MAX_TIMEOUT {
                    return Err(invalid(
                        "store.timeout",
                        "must be between 1ms and 30s".into(),
                    ));
                }
                t
            }
        };
        let namespace = match &raw.store.prefix {
            None => Namespace::default(),
            Some(p) => Namespace::new(p.as_str()).map_err(|e| limit_error(origin, "store", &e))?,
        };
        let max_keys = match raw.store.max_keys {
            Some(0) => return Err(invalid("store.max_keys", "must be at least 1".into())),
            Some(n) => n,
            None => DEFAULT_MAX_KEYS,
        };

        let mut limits = Vec::with_capacity(raw.limits.len());
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, l) in raw.limits.iter().enumerate() {
            if let Some(first) = seen.insert(&l.name, i) {
                return Err(invalid(
                    &format!("limits[{i}].name"),
                    format!("{:?} is already the name of limits[{first}]", l.name),
                ));
            }
            limits.push(build_limit(l, i, origin)?);
        }
        check_envoy(&raw.envoy, &limits).map_err(|e| invalid(&e.field, e.reason))?;
        Ok(Config {
            origin: origin.to_owned(),
            server: ServerConfig {
                http,
                grpc,
                admin_token,
            },
            store: StoreConfig {
                backend,
                timeout,
                namespace,
                max_keys,
            },
            limits,
            envoy: raw.envoy,
        })
    }
}

/// Compiles the `[envoy]` rules against `limits` as the gRPC service will (over a throwaway
/// memory store: compiling touches no counter), so that what it refuses is refused here.
fn check_envoy(
    rules: &EnvoyRules,
    limits: &[LimitConfig],
) -> Result<(), tollgate_envoy::RulesError> {
    if rules.rules.is_empty() {
        return Ok(());
    }
    let store = MemoryStore::builder()
        .sweep_interval(None)
        .max_keys(1)
        .build();
    let limiter = Limiter::builder(store)
        .limits(limits.iter().map(|l| l.limit.clone()))
        .build();
    match limiter {
        Ok(limiter) => tollgate_envoy::Snapshot::new(rules, std::sync::Arc::new(limiter)).map(drop),
        // Names are checked unique above; the limiter refuses nothing else.
        Err(e) => Err(tollgate_envoy::RulesError {
            field: "limits".into(),
            reason: e.to_string(),
        }),
    }
}

/// Builds one limit through the core constructors, naming `limits[i].<field>` on error.
fn build_limit(l: &RawLimit, i: usize, origin: &str) -> Result<LimitConfig, ConfigError> {
    let prefix = format!("limits[{i}]");
    let invalid = |field: &str, reason: String| ConfigError::Invalid {
        origin: origin.to_owned(),
        field: format!("{prefix}.{field}"),
        reason,
        line: None,
    };
    let core = |e: LimitError| limit_error(origin, &prefix, &e);
    let mut algorithm: Algorithm = l
        .algorithm
        .parse()
        .map_err(|e: tollgate::UnknownAlgorithm| invalid("algorithm", e.to_string()))?;
    match (&mut algorithm, l.buckets) {
        (Algorithm::SlidingWindow { buckets }, Some(b)) => *buckets = b,
        (_, Some(_)) => return Err(invalid("buckets", "only applies to sliding_window".into())),
        _ => {}
    }
    if l.burst.is_some() && !algorithm.uses_burst() {
        return Err(invalid(
            "burst",
            "only applies to token_bucket and gcra".into(),
        ));
    }
    let period = duration::parse(&l.period).map_err(|r| invalid("period", r))?;
    let mut quota = Quota::new(l.limit, period).map_err(core)?;
    if let Some(burst) = l.burst {
        quota = quota.with_burst(burst).map_err(core)?;
    }
    let limit = Limit::new(l.name.as_str(), algorithm, quota)
        .and_then(|limit| limit.keyed_by(l.key.iter().map(String::as_str)))
        .map_err(core)?
        .on_store_error(l.on_store_error);
    Ok(LimitConfig {
        limit,
        shadow: l.shadow,
    })
}

/// A core [`LimitError`] as a config error on `<prefix>.<field>`.
fn limit_error(origin: &str, prefix: &str, e: &LimitError) -> ConfigError {
    let field = e.field();
    let message = e.to_string();
    let reason = message
        .strip_prefix(field)
        .map_or(message.as_str(), str::trim_start);
    ConfigError::Invalid {
        origin: origin.to_owned(),
        field: format!("{prefix}.{field}"),
        reason: reason.to_owned(),
        line: None,
    }
}

/// Parses TOML, turning syntax and type errors into a field path and a line.
fn parse_toml(text: &str, origin: &str) -> Result<RawConfig, ConfigError> {
    let line_of = |e: &toml::de::Error| {
        e.span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1))
    };
    let deserializer = toml::Deserializer::parse(text).map_err(|e| ConfigError::Invalid {
        origin: origin.to_owned(),
        field: String::new(),
        reason: e.message().trim_end().to_owned(),
        line: line_of(&e),
    })?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ConfigError::Invalid {
            origin: origin.to_owned(),
            field: if path == "." { String::new() } else { path },
            reason: inner.message().trim_end().to_owned(),
            line: line_of(&inner),
        }
    })
}

fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("{text:?} is not a listen address: write host:port, e.g. \"127.0.0.1:8080\"")
    })
}
