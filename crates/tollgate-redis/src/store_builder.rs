//! How a [`RedisStore`] is configured: where Redis is, how long a call may take, and when the
//! circuit breaker opens.

use std::fmt;
use std::time::Duration;

use redis::IntoConnectionInfo as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::io::tcp::TcpSettings;
use tollgate::StoreError;

use crate::breaker::Breaker;
use crate::coalesce::DEFAULT_MAX_BATCH;
use crate::error::classify;
use crate::store::{Connection, RedisStore};

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
}

/// Configures a [`RedisStore`]; made by [`RedisStore::builder`] or
/// [`RedisStore::cluster_builder`].
pub struct RedisStoreBuilder {
    target: Target,
    timeout: Duration,
    connect_timeout: Duration,
    failure_threshold: u32,
    cool_down: Duration,
    max_batch: Option<usize>,
    nagle: bool,
    old_gcra_sha: Option<String>,
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
            old_gcra_sha: None,
        }
    }

    /// The most one store call may take, all round trips included (default
    /// [`DEFAULT_TIMEOUT`]); past it the call fails with [`StoreError::Timeout`].
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
    #[doc(hidden)]
    pub fn nagle(mut self, on: bool) -> Self {
        self.nagle = on;
        self
    }

    /// With coalescing off, sends each one-key GCRA check on the server's clock as
    /// `EVALSHA <sha> 1 <key> <inc> <tau>`: the single-entry script as it was before the local
    /// tier, loaded by the caller (the store never loads it). Only so that a benchmark can
    /// run the old path's script through this store's client code, beside the new path.
    #[doc(hidden)]
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
        let connection = match &self.target {
            Target::Single(url) => {
                let info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(classify)?
                    .set_tcp_settings(tcp_settings(self.nagle));
                let client = redis::Client::open(info).map_err(classify)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(200));
                let manager = ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(classify)?;
                Connection::Single(manager)
            }
            Target::Cluster(urls) => {
                let client = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .tcp_settings(tcp_settings(self.nagle))
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(self.connect_timeout)
                    .retries(2)
                    .build()
                    .map_err(classify)?;
                let conn = client.get_async_connection().await.map_err(classify)?;
                Connection::Cluster(conn)
            }
        };
        let store = RedisStore::from_parts(
            connection,
            self.timeout,
            Breaker::new(self.failure_threshold, self.cool_down),
            describe(&self.target),
            self.max_batch,
            self.old_gcra_sha,
        );
        // Once per connection, so that the first burst of calls finds every script.
        store.load_scripts().await?;
        Ok(store)
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
            .field("old_gcra_sha", &self.old_gcra_sha)
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
        assert!(!tcp_settings(builder.nagle(true).nagle).nodelay());
    }
}
