//! Why a store could not answer, classified so that callers decide by kind, not by message.
//!
//! The cause is kept as a boxed source because the core does not know the store's client
//! library; `tollgate-redis` fills in the kind where it converts `redis::RedisError`.

use std::error::Error as StdError;
use std::time::Duration;

/// A boxed error cause.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// A store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within the timeout.
    #[error("store call timed out after {0:?}")]
    Timeout(Duration),
    /// The store kept answering other calls, but this one's reply was not read within the
    /// timeout and the longest wait after it: this process was too busy (starved of CPU, or
    /// more requests in flight than it can serve), not the store. Counted apart from
    /// [`StoreError::Timeout`] so that an operator looks at the instance, not at Redis.
    #[error(
        "store answered, but this process did not read the reply in time (overloaded; timeout {0:?})"
    )]
    Overloaded(Duration),
    /// The connection could not be made or was lost.
    #[error("store connection failed")]
    Connection(#[source] BoxError),
    /// A cluster-level failure (moved slots, cluster down).
    #[error("store cluster error")]
    Cluster(#[source] BoxError),
    /// The store ran our script and it failed.
    #[error("store script failed")]
    Script(#[source] BoxError),
    /// The store answered something we cannot read.
    #[error("unexpected store reply: {0}")]
    Protocol(String),
    /// The store keeps no more keys: the memory store is at its key cap and the new key's
    /// shard holds no key to give up (it otherwise evicts; see `MemoryStoreBuilder::max_keys`).
    #[error("store is full: {max_keys} keys held and none could make room")]
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// A circuit breaker skipped the store after repeated failures.
    #[error("store skipped after repeated failures (circuit open)")]
    CircuitOpen,
    /// The store is out of memory and refuses writes (Redis `OOM`: `maxmemory` reached with
    /// a `noeviction` policy). Lasts until someone frees memory or raises the limit.
    #[error("store is out of memory and refuses writes")]
    OutOfMemory(#[source] BoxError),
    /// The store refuses writes because it is a replica (Redis `READONLY`), or a primary cut
    /// off from the replicas `min-replicas-to-write` asks for (`NOREPLICAS`), usually during a
    /// failover, until the client reaches the new primary.
    #[error("store is read-only (a replica)")]
    ReadOnly(#[source] BoxError),
    /// The store does not have our script even after it was loaded again (Redis `NOSCRIPT`,
    /// repeatedly: the script cache is being flushed, or scripting is disabled).
    #[error("store lost the script")]
    NoScript(#[source] BoxError),
    /// The store is busy running another script (Redis `BUSY`).
    #[error("store is busy running a script")]
    Busy(#[source] BoxError),
    /// The store refuses our credentials or permissions (Redis `NOAUTH`, `WRONGPASS`,
    /// `NOPERM`).
    #[error("store refused our credentials or permissions")]
    Auth(#[source] BoxError),
    /// The TLS connection to the store could not be made: its certificate is not trusted
    /// (unknown CA, expired, another host's), or the store refused ours. Lasts until someone
    /// changes a certificate or the configuration.
    #[error("TLS with the store failed")]
    Tls(#[source] BoxError),
}

/// The kind of a [`StoreError`], for metrics labels and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// [`StoreError::Timeout`].
    Timeout,
    /// [`StoreError::Overloaded`].
    Overloaded,
    /// [`StoreError::Connection`].
    Connection,
    /// [`StoreError::Cluster`].
    Cluster,
    /// [`StoreError::Script`].
    Script,
    /// [`StoreError::Protocol`].
    Protocol,
    /// [`StoreError::Full`].
    Full,
    /// [`StoreError::CircuitOpen`].
    CircuitOpen,
    /// [`StoreError::OutOfMemory`].
    OutOfMemory,
    /// [`StoreError::ReadOnly`].
    ReadOnly,
    /// [`StoreError::NoScript`].
    NoScript,
    /// [`StoreError::Busy`].
    Busy,
    /// [`StoreError::Auth`].
    Auth,
    /// [`StoreError::Tls`].
    Tls,
}

impl StoreErrorKind {
    /// The label used in metrics: `timeout`, `overloaded`, `connection`, `cluster`, `script`, `protocol`,
    /// `full`, `circuit_open`, `oom`, `readonly`, `noscript`, `busy`, `auth`, `tls`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            StoreErrorKind::Timeout => "timeout",
            StoreErrorKind::Overloaded => "overloaded",
            StoreErrorKind::Connection => "connection",
            StoreErrorKind::Cluster => "cluster",
            StoreErrorKind::Script => "script",
            StoreErrorKind::Protocol => "protocol",
            StoreErrorKind::Full => "full",
            StoreErrorKind::CircuitOpen => "circuit_open",
            StoreErrorKind::OutOfMemory => "oom",
            StoreErrorKind::ReadOnly => "readonly",
            StoreErrorKind::NoScript => "noscript",
            StoreErrorKind::Busy => "busy",
            StoreErrorKind::Auth => "auth",
            StoreErrorKind::Tls => "tls",
        }
    }
}

impl StoreError {
    /// The kind of failure.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::Timeout(_) => StoreErrorKind::Timeout,
            StoreError::Overloaded(_) => StoreErrorKind::Overloaded,
            StoreError::Connection(_) => StoreErrorKind::Connection,
            StoreError::Cluster(_) => StoreErrorKind::Cluster,
            StoreError::Script(_) => StoreErrorKind::Script,
            StoreError::Protocol(_) => StoreErrorKind::Protocol,
            StoreError::Full { .. } => StoreErrorKind::Full,
            StoreError::CircuitOpen => StoreErrorKind::CircuitOpen,
            StoreError::OutOfMemory(_) => StoreErrorKind::OutOfMemory,
            StoreError::ReadOnly(_) => StoreErrorKind::ReadOnly,
            StoreError::NoScript(_) => StoreErrorKind::NoScript,
            StoreError::Busy(_) => StoreErrorKind::Busy,
            StoreError::Auth(_) => StoreErrorKind::Auth,
            StoreError::Tls(_) => StoreErrorKind::Tls,
        }
    }

    /// Whether the same call may succeed later (the store is unreachable or busy), as opposed
    /// to a failure that repeats until someone changes something (a broken script, a reply we
    /// cannot read, a full store).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Timeout(_)
                | StoreError::Overloaded(_)
                | StoreError::Connection(_)
                | StoreError::Cluster(_)
                | StoreError::CircuitOpen
                | StoreError::ReadOnly(_)
                | StoreError::Busy(_)
        )
    }
}
