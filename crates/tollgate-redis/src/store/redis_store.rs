//! [`RedisStore`]: the handle every call goes through, its counters, and [`RedisStore::eval`],
//! the guarded `EVALSHA` each call ends in (script reloads and slot moves handled there).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use tollgate::StoreError;

use super::coalescer::Coalescer;
use super::connection::Connection;
use super::node_replies::NodeReplies;
use super::scripts::Scripts;
use super::slot_watch::{SlotWatch, slot_of_script};
use crate::breaker::{Breaker, Permit};
use crate::deadline::ServerClock;
use crate::error::classify;
use crate::patience::{GaveUp, Patience};
use crate::subscriber::Subscriber;

/// Rate-limit state in Redis or Redis Cluster. Cheap to clone: clones share the connection
/// and the circuit breaker.
///
/// ```no_run
/// use tollgate::{Algorithm, Limit, Limiter, OnStoreError, Outcome, Quota};
/// use tollgate_redis::RedisStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379/")
///     .timeout(std::time::Duration::from_millis(50))
///     .build()
///     .await?;
/// let limiter = Limiter::builder(store)
///     .limit(Limit::new("api", Algorithm::Gcra, Quota::per_second(10)?)?.on_store_error(OnStoreError::Local))
///     .build()?;
/// assert_eq!(limiter.check("api", &[("user", "42")]).await?.outcome(), Outcome::Allowed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) connection: Connection,
    /// Where reset notifications are heard.
    pub(super) subscriber: Subscriber,
    /// Queues of requests waiting for a call in flight (`None`: coalescing off).
    pub(super) coalescer: Option<Coalescer>,
    pub(super) scripts: Scripts,
    pub(super) timeout: Duration,
    pub(super) patience: Patience,
    /// The server's clock, for deadlines (`deadline.rs`).
    pub(super) clock: ServerClock,
    /// Scripts that answered late, and give-backs of unanswered charges (tests).
    pub(super) late: std::sync::atomic::AtomicU64,
    pub(super) unanswered: std::sync::atomic::AtomicU64,
    pub(super) breaker: Arc<Breaker>,
    pub(super) target: String,
    /// On a cluster, what looks for a new master of a slot whose calls time out.
    pub(super) slot_watch: Option<SlotWatch>,
    /// On a cluster, replies counted per master (`node_replies.rs`).
    pub(super) nodes: Option<Arc<NodeReplies>>,
    /// [`crate::RedisStoreBuilder::old_gcra_script`]'s SHA (a benchmark's, never set otherwise).
    #[cfg(feature = "bench")]
    pub(super) old_gcra_sha: Option<String>,
}

impl RedisStore {
    pub(crate) fn from_parts(
        connection: Connection,
        subscriber: Subscriber,
        timeout: Duration,
        breaker: Arc<Breaker>,
        target: String,
        max_batch: Option<usize>,
    ) -> RedisStore {
        let queues = match connection {
            Connection::Single(_) | Connection::Sentinel(_) => 1,
            Connection::Cluster(_) => SLOTS,
        };
        let slot_watch = match &connection {
            Connection::Cluster(c) => Some(SlotWatch::new(c.routed(), timeout)),
            Connection::Single(_) | Connection::Sentinel(_) => None,
        };
        let nodes = match &connection {
            Connection::Cluster(c) => {
                let nodes = Arc::new(NodeReplies::new());
                NodeReplies::follow(&nodes, c.routed(), SlotWatch::probe_wait(timeout));
                Some(nodes)
            }
            Connection::Single(_) | Connection::Sentinel(_) => None,
        };
        RedisStore {
            inner: Arc::new(Inner {
                coalescer: max_batch.map(|max| Coalescer::new(queues, max)),
                slot_watch,
                nodes,
                connection,
                subscriber,
                scripts: Scripts::default(),
                timeout,
                patience: Patience::default(),
                clock: ServerClock::default(),
                late: std::sync::atomic::AtomicU64::new(0),
                unanswered: std::sync::atomic::AtomicU64::new(0),
                breaker,
                target,
                #[cfg(feature = "bench")]
                old_gcra_sha: None,
            }),
        }
    }

    /// [`crate::RedisStoreBuilder::old_gcra_script`], on a store just built (its only handle).
    #[cfg(feature = "bench")]
    pub(crate) fn with_old_gcra_script(mut self, sha: Option<String>) -> RedisStore {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.old_gcra_sha = sha;
        }
        self
    }

    /// Whether this store talks to a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.connection, Connection::Cluster(_))
    }

    /// Why the circuit breaker is open (the kind and message of the last failure it
    /// counted); `None` while closed. For status pages: the error shows no URL or password.
    pub fn circuit_cause(&self) -> Option<String> {
        self.inner.breaker.cause()
    }

    /// Scripts that ran after their deadline and charged nothing, and charges given back
    /// because their caller had stopped waiting (`tollgate_redis_late_scripts_total`,
    /// `tollgate_redis_unanswered_give_backs_total`, for this store): for the tests.
    #[doc(hidden)]
    pub fn late_and_unanswered(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.inner.late.load(Relaxed),
            self.inner.unanswered.load(Relaxed),
        )
    }

    /// Counts a script that ran after its deadline.
    pub(crate) fn count_late(&self) {
        metrics::counter!("tollgate_redis_late_scripts_total").increment(1);
        self.inner
            .late
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a give-back of an unanswered charge (`unanswered.rs`).
    pub(crate) fn gave_back_unanswered(&self) {
        metrics::counter!("tollgate_redis_unanswered_give_backs_total").increment(1);
        self.inner
            .unanswered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Connections made to cluster nodes outside the `redis` crate's map, which an `ASK`
    /// named (a new master owning no slot yet, during its first slot move; see
    /// `store/direct_nodes.rs`): for the tests. Always 0 but on a cluster.
    #[doc(hidden)]
    pub fn direct_connections(&self) -> u64 {
        match &self.inner.connection {
            Connection::Cluster(c) => c.direct_connections(),
            Connection::Single(_) | Connection::Sentinel(_) => 0,
        }
    }

    /// Whether the circuit breaker is open: enough consecutive failures were counted that
    /// calls are refused at once (or only the probe is let through) until one succeeds.
    /// For status pages and gauges; a call never needs to ask.
    pub fn circuit_open(&self) -> bool {
        self.inner.breaker.is_open()
    }

    /// The queues of coalesced calls, when coalescing is on.
    pub(crate) fn coalescer(&self) -> Option<&Coalescer> {
        self.inner.coalescer.as_ref()
    }

    /// Runs `call` under the breaker and the timeout.
    pub(super) async fn guarded<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let permit = self.inner.breaker.admit()?;
        let waited = self.inner.patience.wait(self.inner.timeout, call).await;
        self.guarded_end(permit, waited)
    }

    /// [`RedisStore::guarded`], for a call on the keys in `slots`: on a cluster, Redis
    /// answering is their master answering, when they have one (`node_replies.rs`).
    pub(super) async fn guarded_on<T, F>(
        &self,
        slots: impl IntoIterator<Item = u16>,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let permit = self.inner.breaker.admit()?;
        let patience = &self.inner.patience;
        let answers = self.answers(slots);
        let waited = patience.wait_on(self.inner.timeout, call, answers).await;
        self.guarded_end(permit, waited)
    }

    /// The replies whose coming means Redis answers a call on the keys in `slots`: on a
    /// cluster, their one master's (when the map names one for all of them), else the whole
    /// store's.
    pub(super) fn answers(
        &self,
        slots: impl IntoIterator<Item = u16>,
    ) -> &std::sync::atomic::AtomicU64 {
        let patience = &self.inner.patience;
        match &self.inner.nodes {
            Some(nodes) => nodes.of_slots(slots).unwrap_or(patience.replies()),
            None => patience.replies(),
        }
    }

    /// How a call under the breaker (`permit`) ends: given up on (see [`RedisStore::gave_up`])
    /// or answered; a failure logged and, behind Sentinel, a reason to look for the master
    /// again; the breaker told either way.
    pub(super) fn guarded_end<T>(
        &self,
        permit: Permit,
        waited: Result<Result<T, StoreError>, GaveUp>,
    ) -> Result<T, StoreError> {
        let result = match waited {
            Ok(r) => r,
            Err(gave_up) => Err(self.gave_up(gave_up)),
        };
        if let Err(e) = &result {
            tracing::debug!(target_redis = %self.inner.target, kind = e.kind().as_str(), cause = ?e, "redis call failed");
            self.failed(e);
        }
        self.inner.breaker.record(permit, &result);
        result
    }

    /// The error of a call given up on: `Overloaded` when Redis kept answering others (this
    /// process was too busy to read the reply), `Connection` when the last thing heard was a
    /// lost connection (the call waited for a reconnection), else `Timeout`. On a cluster it
    /// is always `Timeout`, which the breaker counts: a call across masters counted every
    /// node's replies, so answers from the others do not clear a silent one. A call given up
    /// on as silent there also has the map of slots to masters asked for again.
    pub(super) fn gave_up(&self, why: GaveUp) -> StoreError {
        if why == GaveUp::Silent
            && let Some(nodes) = &self.inner.nodes
        {
            // A master silent for a whole timeout may have been failed over: the map of
            // which master holds which slot is asked for again.
            nodes.refresh_soon();
        }
        match (why, &self.inner.connection) {
            (GaveUp::Busy, Connection::Single(_) | Connection::Sentinel(_)) => {
                StoreError::Overloaded(self.inner.timeout)
            }
            (GaveUp::Disconnected, Connection::Single(_) | Connection::Sentinel(_)) => {
                StoreError::Connection(
                    format!(
                        "no reply within {:?}: the connection was lost and is not back",
                        self.inner.timeout
                    )
                    .into(),
                )
            }
            _ => StoreError::Timeout(self.inner.timeout),
        }
    }

    /// Behind Sentinel, a failure that a failover explains (the master gone, silent, or now
    /// a replica) makes the store look for the master again.
    pub(super) fn failed(&self, error: &StoreError) {
        if let Connection::Sentinel(s) = &self.inner.connection
            && matches!(
                error,
                StoreError::Connection(_) | StoreError::Timeout(_) | StoreError::ReadOnly(_)
            )
        {
            s.suspect();
        }
    }

    /// Runs a script's `EVALSHA`. On `NOSCRIPT` (a restarted node, `SCRIPT FLUSH`) every
    /// script is loaded again, by one call while the others that met the same loss wait for
    /// it (`reload_scripts`), and the call is sent again; should the cache be flushed again
    /// meanwhile, this tries twice more before giving up.
    ///
    /// On a cluster, a script refused before it runs because its slot is being moved (`ASK`,
    /// `MOVED`, or `TRYAGAIN` while its keys are split between the two nodes) or has no master
    /// for a moment (`CLUSTERDOWN` in a failover) is sent again after a short wait (10 ms,
    /// doubling to 100 ms), for as long as the caller's timeout allows. Safe: a refused
    /// script charged nothing. The `redis` crate's own retries are off (see
    /// `store_builder.rs`): they also sent a call again after a lost connection, when its
    /// script may have run.
    ///
    /// Takes a clone of the store and the command, so that a call handed off (see
    /// `unanswered.rs`) is this future itself, boxed, with no wrapper of its own on every
    /// call's path (docs/architecture.md counts the path).
    pub(crate) async fn eval(self, cmd: Cmd) -> Result<Value, StoreError> {
        let mut attempts = 0;
        let mut moving = 0u32;
        loop {
            let loaded = self.inner.scripts.generation();
            let result: Result<Value, redis::RedisError> = self.inner.connection.query(&cmd).await;
            self.heard(&result, || slot_of_script(&cmd));
            match result {
                Err(e)
                    if attempts < 2 && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    attempts += 1;
                    // Boxed: rare, and inline it would make every call's state larger.
                    Box::pin(self.inner.scripts.reload(&self.inner.connection, loaded)).await?;
                }
                Err(e) if moving < MAX_SLOT_MOVE_RETRIES && slot_moving(&e) => {
                    let wait =
                        Duration::from_millis(10 << moving.min(4)).min(Duration::from_millis(100));
                    moving += 1;
                    tracing::debug!(cause = %e, "slot being moved; sending the script again");
                    Box::pin(tokio::time::sleep(wait)).await;
                }
                Err(e) if e.is_timeout() => {
                    // The `redis` crate's own timeout: on a cluster, the slot's master may
                    // have been failed over while silent (`slot_watch.rs`).
                    if let Some(watch) = &self.inner.slot_watch {
                        watch.timed_out(&cmd);
                    }
                    return Err(classify(e));
                }
                other => return other.map_err(classify),
            }
        }
    }

    /// Loads every script (at connect time, so that the first calls find them).
    pub(crate) async fn load_scripts(&self) -> Result<(), StoreError> {
        let loaded = self.inner.scripts.generation();
        self.inner
            .scripts
            .reload(&self.inner.connection, loaded)
            .await
    }

    /// Counts a reply (or a server error: Redis answered) for the calls waiting on theirs;
    /// on a cluster, also for the master of the call's `slot` (asked only there).
    pub(super) fn heard<T>(
        &self,
        result: &Result<T, redis::RedisError>,
        slot: impl FnOnce() -> Option<u16>,
    ) {
        match result {
            // The `redis` crate's own timeout (a cluster's; an I/O error too, so first): no
            // reply, the connection kept.
            Err(e) if e.is_timeout() => self.inner.patience.lost(false),
            Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                self.inner.patience.lost(true);
            }
            _ => {
                self.inner.patience.heard();
                self.inner.clock.heard();
                if let Some(nodes) = &self.inner.nodes
                    && let Some(slot) = slot()
                {
                    nodes.heard(slot);
                }
            }
        }
    }
}

/// How many times [`RedisStore::eval`] sends a script again while its slot is being moved
/// (about 5 s of waits; the store's timeout usually ends the call first).
const MAX_SLOT_MOVE_RETRIES: u32 = 50;

/// Whether a cluster refused a call before running it, for a while: its slot is being moved
/// (`TRYAGAIN`, `ASK`, `MOVED`) or is between two masters in a failover (`CLUSTERDOWN`,
/// `MASTERDOWN`).
fn slot_moving(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::Ask
                | ServerErrorKind::Moved
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        )
    )
}

/// Redis Cluster's hash slots: one coalescing queue each.
const SLOTS: usize = 16_384;

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.inner.target)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}
