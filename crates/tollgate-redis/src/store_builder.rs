//! How a [`RedisStore`] is configured: where Redis is (one node, a cluster, or the master a
//! Sentinel group names), how to reach it (TLS, credentials), how long a call may take, and
//! when the circuit breaker opens.

use std::fmt;
use std::time::Duration;

use redis::IntoConnectionInfo as _;
use redis::cluster::ClusterClientBuilder;
use redis::io::tcp::TcpSettings;
use tollgate::StoreError;

use crate::breaker::Breaker;
use crate::error::classify;
use crate::node_options::NodeOptions;
use crate::sentinel::{Sentinel, is_tls};
use crate::store::{Cluster, Connection, DEFAULT_MAX_BATCH, RedisStore, SingleNode};
use crate::subscriber::Subscriber;
use crate::tls::{TlsOptions, install_crypto_provider};

/// Default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Default number of consecutive transient failures that open the circuit breaker.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 5;
/// Default time the breaker stays open before letting a probe through.
pub const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(1);
/// How long bytes sent on a store connection may stay unacknowledged by the peer's kernel
/// before the connection is abandoned (`TCP_USER_TIMEOUT`) and a new one made.
pub const DEAD_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a store connection may stay silent before TCP keep-alive probes it.
const KEEPALIVE_AFTER: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub(crate) enum Target {
    Single(String),
    Cluster(Vec<String>),
    /// The master that these sentinels name `master`.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// Configures a [`RedisStore`]; made by [`RedisStore::builder`],
/// [`RedisStore::cluster_builder`] or [`RedisStore::sentinel_builder`]. Cloned, it configures
/// another store the same way (the service keeps one to connect again later).
#[derive(Clone)]
pub struct RedisStoreBuilder {
    target: Target,
    timeout: Duration,
    connect_timeout: Duration,
    failure_threshold: u32,
    cool_down: Duration,
    max_batch: Option<usize>,
    nagle: bool,
    #[cfg(feature = "bench")]
    old_gcra_sha: Option<String>,
    tls: TlsOptions,
    username: Option<String>,
    password: Option<String>,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
    permissions_for: Option<String>,
}

impl RedisStore {
    /// A builder for a store on the single Redis at `url` (`redis://[:password@]host:port/[db]`).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Single(url.into()))
    }

    /// A builder for a store on the master that the sentinels at `sentinel_urls`
    /// (`redis://host:26379`, any number) know as `master_name`, followed through failovers
    /// without a restart (see `src/sentinel.rs`). TLS and credentials set on the builder
    /// apply to the data nodes (which are reached over TLS when a TLS option is set or the
    /// sentinels' URLs are `rediss://`); the sentinels' own credentials are
    /// [`RedisStoreBuilder::sentinel_credentials`].
    pub fn sentinel_builder<I, S>(
        sentinel_urls: I,
        master_name: impl Into<String>,
    ) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder::new(Target::Sentinel {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
        })
    }

    /// A builder for a store on the Redis Cluster reachable through `urls` (any subset of its
    /// nodes; the others are discovered).
    pub fn cluster_builder<I, S>(urls: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder::new(Target::Cluster(urls.into_iter().map(Into::into).collect()))
    }

    /// Connects to the single Redis at `url` with default settings.
    ///
    /// # Errors
    /// As [`RedisStoreBuilder::build`].
    pub async fn connect(url: impl Into<String>) -> Result<RedisStore, StoreError> {
        RedisStore::builder(url).build().await
    }
}

impl RedisStoreBuilder {
    pub(crate) fn new(target: Target) -> RedisStoreBuilder {
        RedisStoreBuilder {
            target,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(1),
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            cool_down: DEFAULT_COOL_DOWN,
            max_batch: Some(DEFAULT_MAX_BATCH),
            nagle: false,
            #[cfg(feature = "bench")]
            old_gcra_sha: None,
            tls: TlsOptions::default(),
            username: None,
            password: None,
            sentinel_username: None,
            sentinel_password: None,
            permissions_for: None,
        }
    }

    /// The user to authenticate as (Redis 6 ACLs), replacing the URL's. See
    /// `docs/redis.md` for the least-privilege ACL tollgate needs.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The password to authenticate with, replacing the URL's. Never printed: `Debug`
    /// shows `***`, and errors never quote it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Trust the CAs of this PEM bundle, instead of the system's roots, for `rediss://`
    /// nodes (and sentinels).
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca = Some(pem.into());
        self
    }

    /// Present this client certificate (PEM chain) and key (PEM) to `rediss://` nodes, for
    /// servers that run `tls-auth-clients yes`.
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Accept any server certificate, unverified (default off). Anyone on the path can then
    /// read and change every decision; for a test bench only. Logged as a warning by every
    /// [`RedisStoreBuilder::build`].
    pub fn tls_insecure(mut self, insecure: bool) -> Self {
        self.tls.insecure = insecure;
        self
    }

    /// Sentinel only: the user and password the sentinels themselves require (their own
    /// `requirepass` or ACL), apart from the data nodes' ([`RedisStoreBuilder::username`],
    /// [`RedisStoreBuilder::password`]).
    pub fn sentinel_credentials(
        mut self,
        username: Option<String>,
        password: Option<String>,
    ) -> Self {
        self.sentinel_username = username;
        self.sentinel_password = password;
        self
    }

    /// At build, check that the Redis user may run every command tollgate sends on keys
    /// under `prefix` (the limiter's [`tollgate::Namespace`] prefix) and its reset channel,
    /// and fail naming each one it may not ([`RedisStore::check_permissions`]). Off by
    /// default; `tollgate serve` always checks.
    pub fn check_permissions(mut self, prefix: impl Into<String>) -> Self {
        self.permissions_for = Some(prefix.into());
        self
    }

    /// How to reach a data node.
    fn node_options(&self) -> NodeOptions {
        NodeOptions {
            tls: self.tls.clone(),
            username: self.username.clone(),
            password: self.password.clone(),
            tcp: tcp_settings(self.nagle),
            connect_timeout: self.connect_timeout,
        }
    }

    /// How long Redis may stay silent before a store call fails, not how long a call may take
    /// (default [`DEFAULT_TIMEOUT`]). A call that has waited `timeout` while Redis answered
    /// nothing on this store fails with [`StoreError::Timeout`] (with
    /// [`StoreError::Connection`] when the last thing heard was a lost connection, on one
    /// Redis or behind Sentinel). While Redis keeps answering other calls, or this process
    /// runs late, the call waits another `timeout`, up to [`longest_wait`](crate::longest_wait)
    /// in all (`timeout` + 1 s, and a millisecond); a call ended there fails with
    /// [`StoreError::Overloaded`] (with [`StoreError::Timeout`] on a cluster). On a cluster,
    /// a call whose keys are on one master counts that master's replies only. See the crate
    /// docs, "Failures".
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long connecting (and each reconnection attempt) may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Open the breaker after `failures` consecutive transient failures (0: never) and keep it
    /// open for `cool_down` before probing (defaults [`DEFAULT_FAILURE_THRESHOLD`],
    /// [`DEFAULT_COOL_DOWN`]).
    pub fn circuit_breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.failure_threshold = failures;
        self.cool_down = cool_down;
        self
    }

    /// Whether concurrent requests bound for the same Redis (the same slot on a cluster) are
    /// coalesced (default on): a request that finds sixteen calls in flight, or two batch
    /// calls, waits for one to end and then goes with every other request that queued
    /// meanwhile, as one `EVALSHA` of the batch script, which decides each request on its own
    /// (all or nothing within it). Otherwise it goes out at once, as without coalescing. See
    /// [`RedisStoreBuilder::max_batch`].
    pub fn coalesce(mut self, on: bool) -> Self {
        self.max_batch = on.then_some(self.max_batch.unwrap_or(DEFAULT_MAX_BATCH));
        self
    }

    /// Leaves Nagle's algorithm on for the store's connections, as the `redis` crate does by
    /// default and tollgate did before it set `TCP_NODELAY` (see [`tcp_settings`]): only so
    /// that a benchmark can measure the old path beside the new one in the same run.
    #[cfg(feature = "bench")]
    pub fn nagle(mut self, on: bool) -> Self {
        self.nagle = on;
        self
    }

    /// With coalescing off, sends each one-key GCRA check on the server's clock as
    /// `EVALSHA <sha> 1 <key> <inc> <tau>`: the single-entry script as it was before the local
    /// tier, loaded by the caller (the store never loads it). Only so that a benchmark can
    /// run the old path's script through this store's client code, beside the new path.
    #[cfg(feature = "bench")]
    pub fn old_gcra_script(mut self, sha: impl Into<String>) -> Self {
        self.old_gcra_sha = Some(sha.into());
        self
    }

    /// The most requests one coalesced call carries (default [`DEFAULT_MAX_BATCH`]; at least
    /// 1, which sends every queued request as its own call). More queued requests wait for
    /// the next call that ends, oldest first. Turns coalescing on.
    pub fn max_batch(mut self, requests: usize) -> Self {
        self.max_batch = Some(requests.max(1));
        self
    }

    /// Connects, loads the scripts, and builds the store.
    ///
    /// # Errors
    /// [`StoreError::Connection`] (or another kind) when Redis cannot be reached or a URL is
    /// invalid.
    pub async fn build(self) -> Result<RedisStore, StoreError> {
        install_crypto_provider();
        if self.tls.insecure {
            tracing::warn!(
                target_redis = %describe(&self.target),
                "tls_insecure is set: the Redis server's certificate is not verified, so anyone on the path can read and change every decision"
            );
        }
        let node = self.node_options();
        let breaker = std::sync::Arc::new(Breaker::new(self.failure_threshold, self.cool_down));
        let (connection, subscriber) = match &self.target {
            Target::Single(url) => {
                let info = node.apply(url.as_str().into_connection_info().map_err(classify)?)?;
                let client = node.client(info)?;
                let manager = node.manager(client.clone()).await?;
                (
                    Connection::Single(SingleNode::new(manager, client.clone(), node.clone())),
                    Subscriber::Fixed(Box::new(client)),
                )
            }
            Target::Cluster(urls) => self.connect_cluster(urls, &node).await?,
            Target::Sentinel { sentinels, master } => {
                self.connect_sentinel(sentinels, master, node, &breaker)
                    .await?
            }
        };
        let store = RedisStore::from_parts(
            connection,
            subscriber,
            self.timeout,
            breaker,
            describe(&self.target),
            self.max_batch,
        );
        #[cfg(feature = "bench")]
        let store = store.with_old_gcra_script(self.old_gcra_sha);
        // Once per connection, so that the first burst of calls finds every script. This is
        // also where a user without a permission tollgate needs is found (`permissions.rs`).
        store.load_scripts().await?;
        if let Some(prefix) = &self.permissions_for {
            store.check_permissions(prefix).await?;
        }
        // The server's clock, for every check's deadline (`deadline.rs`).
        store.keep_clock().await;
        Ok(store)
    }

    /// The connection to the cluster reachable through `urls`, and where its resets are heard
    /// (any node: pub/sub is broadcast).
    async fn connect_cluster(
        &self,
        urls: &[String],
        node: &NodeOptions,
    ) -> Result<(Connection, Subscriber), StoreError> {
        let infos = urls
            .iter()
            .map(|u| node.apply(u.as_str().into_connection_info().map_err(classify)?))
            .collect::<Result<Vec<_>, _>>()?;
        // A node outside the slot map (which an `ASK` may name) is reached as these are.
        let tls = infos.iter().any(|info| is_tls(info.addr()));
        let subscriber = match infos.first() {
            Some(first) => Subscriber::Fixed(Box::new(node.client(first.clone())?)),
            None => {
                return Err(StoreError::Protocol(
                    "a cluster needs at least one node".to_owned(),
                ));
            }
        };
        let mut builder = ClusterClientBuilder::new(infos)
            .tcp_settings(tcp_settings(self.nagle))
            .connection_timeout(self.connect_timeout)
            // Never shorter than the store's own timeout, which bounds every call
            // (retries and slot-map refreshes included) and says why it failed.
            .response_timeout(self.connect_timeout.max(self.timeout))
            // No retries inside the `redis` crate: it would send a check again after
            // a lost connection (its script may have run: charged twice), and under
            // concurrency its ASK redirections fail and trigger slot-map refreshes
            // that stall the connection (tests/it/resharding.rs). The store follows
            // redirections itself (`RedisStore::eval`); the crate still refreshes
            // its slot map on MOVED and reconnects after a failover. A timeout makes
            // it do neither (a frozen master is never left): the store then looks
            // for the slot's new master itself (`store/slot_watch.rs`).
            .retries(0);
        if let Some(user) = &self.username {
            builder = builder.username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password);
        }
        if let Some(certs) = self.tls.certificates() {
            builder = builder.certs(certs);
        }
        if self.tls.insecure {
            builder = builder.tls(redis::TlsMode::Insecure);
        }
        let client = builder.build().map_err(classify)?;
        let conn = client.get_async_connection().await.map_err(classify)?;
        let cluster = Cluster::new(conn, node.clone(), tls);
        Ok((Connection::Cluster(cluster), subscriber))
    }

    /// The connection to the master the `sentinels` know as `master`, followed through
    /// failovers, and its resets heard on that master.
    async fn connect_sentinel(
        &self,
        sentinels: &[String],
        master: &str,
        node: NodeOptions,
        breaker: &std::sync::Arc<Breaker>,
    ) -> Result<(Connection, Subscriber), StoreError> {
        let sentinel_tls = sentinels
            .iter()
            .filter_map(|u| u.as_str().into_connection_info().ok())
            .any(|info| is_tls(info.addr()));
        // Plaintext sentinels in front of TLS data nodes are common: the TLS options
        // reach the sentinels only when their URLs ask for TLS.
        let sentinel_options = NodeOptions {
            username: self.sentinel_username.clone(),
            password: self.sentinel_password.clone(),
            tls: if sentinel_tls {
                node.tls.clone()
            } else {
                TlsOptions::default()
            },
            ..node.clone()
        };
        let sentinel = Sentinel::connect(
            sentinels,
            sentinel_options,
            master.to_owned(),
            node,
            self.tls.is_set() || sentinel_tls,
            std::sync::Arc::clone(breaker),
        )
        .await?;
        Ok((
            Connection::Sentinel(std::sync::Arc::clone(&sentinel)),
            Subscriber::Sentinel(sentinel),
        ))
    }
}

/// The store's TCP settings.
///
/// - **`TCP_NODELAY`** (unless `nagle`), as hiredis and most Redis clients do; the `redis`
///   crate leaves Nagle's algorithm on. With it on, a write made while earlier bytes are
///   unacknowledged waits for their ACK, and a command longer than one segment (a coalesced
///   batch is a few KiB: several segments on an Ethernet MTU) ends in such a write, which the
///   receiver's delayed ACK can hold back up to 40 ms on Linux. Measured (docs/benchmarks.md,
///   "Coalesced Redis calls"): with it off, coalesced calls cost Redis the same or less, on
///   loopback and on a 1500-byte MTU.
/// - **`TCP_USER_TIMEOUT`** of [`DEAD_CONNECTION_TIMEOUT`] (Linux): a connection whose peer
///   vanished without a reset (a partition, a host gone, a failover that moved the address)
///   is abandoned once what was sent to it stays unacknowledged that long, and the connection
///   manager makes a new one. Without it the kernel retransmits for about 15 minutes
///   (`tcp_retries2`), and every call times out until then although a new connection would
///   work (measured with `examples/blackhole.rs`). A busy Redis does not trigger it: its
///   kernel acknowledges bytes whether or not Redis has read them.
/// - **TCP keep-alive** after [`KEEPALIVE_AFTER`] of silence, every 5 s: a connection that
///   sends nothing (the reset listener's subscription; the store's, between calls) learns the
///   same way that its peer is gone, the unanswered probe ending it after
///   [`DEAD_CONNECTION_TIMEOUT`] (Linux; elsewhere after the system's probe count). Without
///   it a subscription to a vanished host never ends, and resets published on the new one
///   are never heard.
pub(crate) fn tcp_settings(nagle: bool) -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_AFTER)
        .with_interval(Duration::from_secs(5));
    let settings = TcpSettings::default()
        .set_nodelay(!nagle)
        .set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(DEAD_CONNECTION_TIMEOUT);
    settings
}

/// Host and port of each node, without credentials (URLs may hold a password).
fn describe(target: &Target) -> String {
    let redact = |url: &str| match redis::parse_redis_url(url) {
        Some(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or("?"),
            u.port()
                .map_or_else(|| "6379".to_owned(), |p| p.to_string())
        ),
        None => "(invalid url)".to_owned(),
    };
    match target {
        Target::Single(url) => redact(url),
        Target::Cluster(urls) => format!(
            "cluster[{}]",
            urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
        ),
        Target::Sentinel { sentinels, master } => format!(
            "sentinel[{}]/{master}",
            sentinels
                .iter()
                .map(|u| redact(u))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("target", &describe(&self.target))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("failure_threshold", &self.failure_threshold)
            .field("cool_down", &self.cool_down)
            .field("max_batch", &self.max_batch)
            .field("nagle", &self.nagle)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("sentinel_username", &self.sentinel_username)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's connections have Nagle's algorithm off unless a benchmark asks for it,
    /// and are abandoned when the peer stops acknowledging.
    #[test]
    fn connections_send_at_once_and_give_up_on_a_silent_peer() {
        let builder = RedisStore::builder("redis://127.0.0.1:1");
        assert!(tcp_settings(builder.nagle).nodelay());
        #[cfg(target_os = "linux")]
        assert_eq!(
            tcp_settings(builder.nagle).user_timeout(),
            Some(DEAD_CONNECTION_TIMEOUT)
        );
        assert!(tcp_settings(builder.nagle).keepalive().is_some());
        #[cfg(feature = "bench")]
        assert!(!tcp_settings(builder.nagle(true).nagle).nodelay());
    }
}
