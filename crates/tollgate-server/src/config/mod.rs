//! The service's configuration: one TOML file, validated once into typed values.
//!
//! Loading is three steps: parse the file into its raw shape (`raw`), apply the environment
//! overrides to that shape in one place ([`Overrides`]), then validate section by section
//! (`validate`: `[server]`, `[[limits]]`, `[envoy]`; `store_section`: `[store]`).
//!
//! Every error ([`ConfigError`]) names the file, the field as written (`limits[2].period`, or
//! the variable that replaced it) and what is wrong, keeping the typed cause
//! ([`FieldError`]). Quotas and limits are built through the core constructors, so the core's
//! own checks (and its field names) decide what is valid; nothing is validated twice. The
//! `[envoy]` section is `tollgate_envoy`'s own type, checked against the limits by compiling
//! it as the gRPC service will (`envoy.rules[1].limit: unknown limit "nope"`), so
//! `check-config` and a reload refuse exactly what the service would. `[envoy] config_dir`
//! (the reference service's YAML files) is read as part of the config, on load and on every
//! reload, and its generated limits join `[[limits]]`: a bad YAML file refuses the config
//! whole, so a reload keeps the old rules. A file without
//! `[[limits]]` is refused: an emptied file must not switch every limit off. Secrets (the
//! admin token, Redis passwords) are redacted in `Debug` output.

mod address;
mod error;
mod field_error;
mod listen_address;
mod overrides;
mod raw;
mod redis_connection;
mod redis_url;
mod restart_only;
mod secret;
mod server_tls;
mod store_section;
mod validate;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use tollgate::{Limit, Namespace};
pub use tollgate_envoy::EnvoyRules;

pub use address::AddressError;
pub use error::ConfigError;
pub use field_error::FieldError;
pub use listen_address::ListenAddress;
pub use overrides::Overrides;
use raw::RawConfig;
pub use redis_connection::RedisConnection;
pub use redis_url::{RedisUrl, RedisUrlError};
pub use secret::Secret;
pub use server_tls::{DEFAULT_UNIX_MODE, ServerTls};

/// The largest config file read (a limits file is a few KiB); a larger one is refused unread,
/// at start and on reload, as `envoy.config_dir`'s YAML files are
/// ([`tollgate_envoy::MAX_FILE_BYTES`]).
pub const MAX_FILE_BYTES: u64 = tollgate_envoy::MAX_FILE_BYTES;

/// The default HTTP listen address.
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// The default store call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The longest store timeout accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// The default `server.header_timeout`: a request's head (request line and headers) must
/// arrive within it, counted from its first byte (from the accept for a new connection).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `server.body_timeout`: a request's body must arrive within it, counted from the
/// end of its head.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `server.idle_timeout`: a keep-alive connection with no request for this long
/// is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default `server.shutdown_timeout`: on SIGTERM, requests in flight get this long to be
/// answered before every connection is closed (below Kubernetes' 30 s grace period).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// The default `server.max_acquire_wait`: the longest wait for a slot `POST /v1/acquire` may
/// ask (a minute: a queue of a minute's quota).
pub const DEFAULT_MAX_ACQUIRE_WAIT: Duration = Duration::from_secs(60);

/// The default `server.history_interval`: 360 points in the status page's hour.
pub const DEFAULT_HISTORY_INTERVAL: Duration = Duration::from_secs(10);

/// `server.history_interval`'s range: a second (tests, a close look) to ten minutes.
pub const HISTORY_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(600));
/// The default `server.max_connections`, per listener (HTTP, gRPC): well below common file
/// descriptor limits, so that the store, the config file and the other listener keep theirs.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The range of every `[server]` timeout.
pub const SERVER_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_secs(3600));

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

/// `[server]`: where to listen, who may reset, and how long a client may hold a connection.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// HTTP API, metrics and health checks.
    pub http: ListenAddress,
    /// Envoy rate limit service (gRPC, with the gRPC health service); none: not served.
    pub grpc: Option<ListenAddress>,
    /// TLS (and mTLS) on the TCP listeners; none: plaintext.
    pub tls: Option<ServerTls>,
    /// The file mode of the `unix:` sockets ([`DEFAULT_UNIX_MODE`] unless set).
    pub unix_mode: u32,
    /// Bearer token for `POST /v1/reset`; without one, reset is refused.
    pub admin_token: Option<Secret>,
    /// A request's head must arrive within this, from its first byte (or the accept).
    pub header_timeout: Duration,
    /// A request's body must arrive within this, from the end of its head.
    pub body_timeout: Duration,
    /// A keep-alive connection without a request for this long is closed.
    pub idle_timeout: Duration,
    /// Most open connections per listener; past it, an idle connection is closed to make
    /// room, or the new one waits while every connection is busy.
    pub max_connections: usize,
    /// On shutdown, how long requests in flight get before every connection is closed.
    pub shutdown_timeout: Duration,
    /// The longest `max_wait_ms` a `POST /v1/acquire` may ask (and so the longest a held
    /// acquire holds its connection).
    pub max_acquire_wait: Duration,
    /// How often the status page's hour of history is sampled (`crate::history`).
    pub history_interval: Duration,
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
    /// Refusals the exact deny cache remembers; 0 when it is off (`deny_cache = false`, and
    /// by default on the memory store, where a refusal costs no round trip anyway).
    pub deny_cache_entries: usize,
    /// Redis only: the most requests one coalesced call carries, `None` when coalescing is
    /// off (`coalesce = false`); default on, [`tollgate_redis::DEFAULT_MAX_BATCH`] requests.
    pub max_batch: Option<usize>,
    /// Redis only: TLS and credentials (`tls_*`, `username`, `password`, `sentinel_*`).
    pub connection: RedisConnection,
}

/// The largest `store.max_batch` accepted: a batch runs as one script, which blocks Redis
/// while it runs.
pub const MAX_MAX_BATCH: usize = 1024;

/// Which store holds the counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// This process's memory (no `redis` or `cluster` given).
    Memory,
    /// One Redis server.
    Redis(RedisUrl),
    /// A Redis Cluster, by its seed nodes.
    Cluster(Vec<RedisUrl>),
    /// The master a Redis Sentinel group names, followed through failovers.
    Sentinel {
        /// The sentinels.
        sentinels: Vec<RedisUrl>,
        /// The master's name they know (`sentinel_master`).
        master: String,
    },
}

impl Backend {
    /// `memory`, `redis`, `redis_cluster` or `redis_sentinel`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis(_) => "redis",
            Backend::Cluster(_) => "redis_cluster",
            Backend::Sentinel { .. } => "redis_sentinel",
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
            Backend::Sentinel { sentinels, master } => {
                let urls: Vec<String> = sentinels.iter().map(ToString::to_string).collect();
                write!(f, "{master} via sentinel {}", urls.join(", "))
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

impl Config {
    /// Reads the file at `path`, applies `overrides` and validates the result.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the field.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        // A regular file of at most `MAX_FILE_BYTES`: `/dev/zero` or a FIFO given as the config
        // would fill memory or hang (`crate::file`).
        let text = crate::file::read_text(path).map_err(|source| ConfigError::Read {
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
    /// ([`ConfigError::NoLimits`]), since it would answer every check `unknown limit`, unless
    /// it has an `[envoy] config_dir` (whose files may hold no counted limit at all).
    ///
    /// A relative `envoy.config_dir` is taken from the directory of `origin` (the file's path,
    /// as the reload passes it), and the YAML files are read on every call, so a reload sees
    /// their current content. Limits imported from `config_dir` count as limits.
    pub fn parse(text: &str, origin: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
        let base = Path::new(origin).parent().unwrap_or(Path::new(""));
        let mut raw = RawConfig::parse(text, origin)?;
        validate::import_envoy(&mut raw.envoy, base, origin)?;
        let config = Config::from_raw(raw, origin, overrides)?;
        // An Envoy directory is a config of its own, as the reference loads it: even with no
        // counted limit (only unlimited, whitelisted or 0-per-unit entries, a domain with no
        // descriptors) or no file yet; what its calls match decides them.
        if config.limits.is_empty() && config.envoy.config_dir.is_none() {
            return Err(ConfigError::NoLimits {
                origin: origin.to_owned(),
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
        Config::from_raw(RawConfig::default(), "(no config file)", overrides)
    }

    /// Applies `overrides` to `raw`, then validates it section by section.
    fn from_raw(
        mut raw: RawConfig,
        origin: &str,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        overrides.apply(&mut raw);
        let mut server = validate::server(&raw, origin)?;
        let base = Path::new(origin).parent().unwrap_or(Path::new(""));
        server.tls =
            server_tls::server_tls(&raw, origin, base, &server.http, server.grpc.as_ref())?;
        server.unix_mode = server_tls::unix_mode(&raw, origin)?;
        let store = store_section::store(&raw, origin)?;
        let mut limits = validate::limits(&raw.limits, origin)?;
        validate::imported_limits(&raw.envoy, &mut limits, origin)?;
        validate::envoy(&raw.envoy, &limits, origin)?;
        Ok(Config {
            origin: origin.to_owned(),
            server,
            store,
            limits,
            envoy: raw.envoy,
        })
    }
}
