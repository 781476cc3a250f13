//! [`RedisStore`]: runs the script on one Redis or a Redis Cluster, with a timeout and a
//! circuit breaker around every call.
//!
//! Design choices, and why:
//! - **One multiplexed connection, no pool**: the `redis` crate's `ConnectionManager`
//!   pipelines concurrent calls on one connection and reconnects after a failure; a pool
//!   would only add sockets (measured: one connection carries 100k+ EVALSHA/s). It has
//!   Nagle's algorithm off (`TCP_NODELAY`, see `store_builder.rs`), which the crate leaves on.
//! - **Coalesced calls** (`coalesce.rs`, on by default): requests that arrive while calls to
//!   the same Redis (slot) are in flight go next as one call of the batch script; a lone
//!   request goes out at once, as it would without coalescing.
//! - **Group by slot before calling**: a cluster refuses a script over keys of several slots,
//!   so entries are grouped by [`slot_of`] (always one group on a single Redis) — see the
//!   crate docs for the guarantee across groups.
//! - **The timeout covers the whole call**, all round trips of a cross-slot request included,
//!   and measures Redis's silence: a call waiting behind others fails only when Redis has
//!   answered nothing for a whole timeout, or a second after it ([`Patience`]). A call cut off by it has either run entirely on Redis or not at all, per group: a script
//!   is atomic. A cross-slot check cut off after some groups were charged keeps those units
//!   taken until they replenish (errs towards refusing).
//! - **A refusal due within a millisecond is decided again a millisecond later**, once, on
//!   the server's clock: GCRA there knows the instant only to the millisecond and errs
//!   towards refusing, and this gives back what that costs a burst taken within one
//!   millisecond (see `due_within_a_millisecond`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use smallvec::SmallVec;
use tokio::time::Instant;
use tollgate::{
    Decision, Decisions, Entry, Key, LeaseGrant, LeaseTake, NotUntil, Request, Store, StoreError,
    Timestamp,
};

use crate::breaker::Breaker;
use crate::coalesce::Coalescer;
use crate::deadline::{ServerClock, deadline, earliest_time, late, time_cmd};
use crate::error::classify;
use crate::patience::{GaveUp, Patience};
use crate::resets::reset_channel;
#[cfg(feature = "bench")]
use crate::script::old_gcra_invocation;
use crate::script::{Op, Part, TimeSource, all_scripts, decode, invocation};
use crate::sentinel::Sentinel;
use crate::slot::slot_of;
use crate::store_builder::{RedisStoreBuilder, Target};
use crate::unanswered::{Charges, Unanswered};

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
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    /// Where reset notifications are heard.
    subscriber: Subscriber,
    /// Queues of requests waiting for a call in flight (`None`: coalescing off).
    coalescer: Option<Coalescer>,
    scripts: Scripts,
    timeout: Duration,
    patience: Patience,
    /// The server's clock, for deadlines (`deadline.rs`).
    clock: ServerClock,
    /// Scripts that answered late, and give-backs of unanswered charges (tests).
    late: std::sync::atomic::AtomicU64,
    unanswered: std::sync::atomic::AtomicU64,
    breaker: Arc<Breaker>,
    target: String,
    /// [`RedisStoreBuilder::old_gcra_script`]'s SHA (a benchmark's, never set otherwise).
    #[cfg(feature = "bench")]
    old_gcra_sha: Option<String>,
}

#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    /// The master a Sentinel group names, followed through failovers.
    Sentinel(Arc<Sentinel>),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Runs `cmd` on the node (the slot's node on a cluster; the current master behind
    /// Sentinel).
    ///
    /// On a cluster, an `ASK` redirection (the slot is being moved and the key is already on
    /// the new node) that the `redis` crate could not follow is followed here, with `ASKING`
    /// and the command sent as one pipeline: the crate sends `ASKING` and the command as two
    /// requests on the node's multiplexed connection, so under concurrency another call's
    /// command can take the one-command `ASKING` flag, and the call meets `MOVED`/`ASK` again
    /// until its retries run out (seen with 16 tasks on one moving key).
    async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> redis::RedisResult<T> {
        match self {
            Connection::Single(c) => cmd.query_async(&mut c.clone()).await,
            Connection::Sentinel(s) => cmd.query_async(&mut s.manager()).await,
            Connection::Cluster(c) => match cmd.query_async(&mut c.clone()).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Ask) => {
                    // Boxed: rare, and inline it would make every call's state larger.
                    Box::pin(asking(c, cmd, &e)).await.unwrap_or(Err(e))
                }
                other => other,
            },
        }
    }

    /// Runs `pipe` as [`Connection::query`] does `cmd`.
    async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<T> {
        match self {
            Connection::Single(c) => pipe.query_async(&mut c.clone()).await,
            Connection::Sentinel(s) => pipe.query_async(&mut s.manager()).await,
            Connection::Cluster(c) => pipe.query_async(&mut c.clone()).await,
        }
    }
}

/// `cmd` sent to the node an `ASK` error names, right after `ASKING`, in one pipeline;
/// `None` when the error names no node.
async fn asking<T: redis::FromRedisValue>(
    cluster: &ClusterConnection,
    cmd: &Cmd,
    ask: &redis::RedisError,
) -> Option<redis::RedisResult<T>> {
    let (addr, _slot) = ask.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING");
    pipe.add_command(cmd.clone());
    let node = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port,
    };
    let replies = cluster.clone().route_pipeline(pipe, 1, 1, node).await;
    Some(replies.and_then(|values| {
        let value = values.into_iter().next().unwrap_or(Value::Nil);
        let value = match value {
            Value::ServerError(_) => value.extract_error()?,
            other => other,
        };
        T::from_redis_value(value).map_err(Into::into)
    }))
}

/// How the reset listener reaches Redis: a fixed node (the single Redis, or any node of a
/// cluster, where pub/sub is broadcast), or the current master behind Sentinel.
#[derive(Clone)]
pub(crate) enum Subscriber {
    /// Boxed: a client holds its whole connection info, and this is made once per store.
    Fixed(Box<redis::Client>),
    Sentinel(Arc<Sentinel>),
}

impl Subscriber {
    /// The client to subscribe with now.
    pub(crate) fn client(&self) -> redis::Client {
        match self {
            Subscriber::Fixed(c) => (**c).clone(),
            Subscriber::Sentinel(s) => s.current().client,
        }
    }
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
        RedisStore {
            inner: Arc::new(Inner {
                coalescer: max_batch.map(|max| Coalescer::new(queues, max)),
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

    /// [`RedisStoreBuilder::old_gcra_script`], on a store just built (its only handle).
    #[cfg(feature = "bench")]
    pub(crate) fn with_old_gcra_script(mut self, sha: Option<String>) -> RedisStore {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.old_gcra_sha = sha;
        }
        self
    }

    /// Sends `requests` as one call of the batch script, each decided on its own (all or
    /// nothing within it) in order, whatever else is in flight: what a coalesced call does,
    /// on demand. Not part of the API: for the differential test and the benchmark, which need
    /// a batch of a known composition. On a cluster every key must be in one slot.
    #[doc(hidden)]
    pub async fn decide_batch(
        &self,
        requests: &[(&Request<'_>, tollgate::Op)],
        now: Option<Timestamp>,
    ) -> Vec<Result<Decisions, StoreError>> {
        let at = match now {
            Some(t) => TimeSource::Caller(t.as_micros()),
            None => TimeSource::Server,
        };
        let at = vec![at; requests.len()];
        self.decide_batch_each(requests, &at).await
    }

    /// [`RedisStore::decide_batch`] of checks, each at its own instant on the caller's clock
    /// (`at`, µs), as concurrent requests of a fake clock are. Not part of the API: for the
    /// differential test of the lone-check batch script.
    #[doc(hidden)]
    pub async fn check_batch_at(
        &self,
        requests: &[Request<'_>],
        at: &[u64],
    ) -> Vec<Result<Decisions, StoreError>> {
        assert_eq!(requests.len(), at.len(), "one instant per request");
        let asked: Vec<(&Request<'_>, tollgate::Op)> =
            requests.iter().map(|r| (r, tollgate::Op::Check)).collect();
        let at: Vec<TimeSource> = at.iter().map(|&t| TimeSource::Caller(t)).collect();
        self.decide_batch_each(&asked, &at).await
    }

    async fn decide_batch_each(
        &self,
        requests: &[(&Request<'_>, tollgate::Op)],
        at: &[TimeSource],
    ) -> Vec<Result<Decisions, StoreError>> {
        let entries: Vec<SmallVec<[&Entry<'_>; 2]>> = requests
            .iter()
            .map(|(r, _)| r.entries().iter().collect())
            .collect();
        let parts: Vec<Part> = requests
            .iter()
            .zip(&entries)
            .zip(at)
            .map(|(((r, op), e), &at)| Part::new(Op::from(*op), e, at, r.counts_refusals()))
            .collect();
        let parts: Vec<&Part> = parts.iter().collect();
        crate::coalesce::batch(self, &parts)
            .await
            .into_iter()
            .zip(&entries)
            .map(|(reply, e)| {
                let (_, decisions) = decode(reply?, e)?;
                Ok(decisions.into_iter().collect())
            })
            .collect()
    }

    /// Batch calls this store has made (coalesced calls of two requests or more, and
    /// [`RedisStore::decide_batch`]); 0 when coalescing is off. Not part of the API: tests
    /// use it to see that coalescing happened (the metric is process-wide).
    #[doc(hidden)]
    pub fn batches(&self) -> u64 {
        self.coalescer()
            .map_or(0, |c| c.batches.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The requests those batch calls carried. Not part of the API (the benchmark).
    #[doc(hidden)]
    pub fn batched_requests(&self) -> u64 {
        self.coalescer()
            .map_or(0, |c| c.batched.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Coalesced calls in flight now, and how many of them are batch calls; `(0, 0)` when
    /// coalescing is off. Not part of the API: tests use it to see that every call's slot was
    /// given back (a leaked slot would hold later requests in the queue).
    #[doc(hidden)]
    pub fn coalesced_calls_in_flight(&self) -> (usize, usize) {
        self.coalescer().map_or((0, 0), Coalescer::in_flight)
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

    /// The deadline of a call that starts at local instant `start` (`deadline.rs`); `None`
    /// while Redis keeps answering (no reply for a millisecond before the call: it carries
    /// one), and until the server's clock was sampled once.
    fn deadline_from(&self, start: Instant) -> Option<u64> {
        if !self.inner.clock.quiet_at(start) {
            return None;
        }
        let server_start = self.inner.clock.server_at(start)?;
        Some(deadline(server_start, self.inner.timeout))
    }

    /// A script ran after its deadline, at `server_now` on its node's clock, and charged
    /// nothing: counted, and the deadline of the call's next try (a timeout after that
    /// instant, by which the caller still waits: it heard Redis answer).
    fn too_late(&self, server_now: u64) -> u64 {
        self.count_late();
        tracing::debug!(
            target_redis = %self.inner.target,
            "a script ran after its caller's deadline and charged nothing; sending it again"
        );
        deadline(server_now, self.inner.timeout)
    }

    /// Reads the server's clock once (`TIME`, every primary's on a cluster, bounded by a
    /// second); a failure keeps the last reading.
    pub(crate) async fn sample_clock(&self) {
        let cmd = time_cmd();
        let call = async {
            match &self.inner.connection {
                Connection::Cluster(c) => {
                    use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                    let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                    c.clone().route_command(cmd, all).await
                }
                other => other.query::<Value>(&cmd).await,
            }
        };
        let reply = tokio::time::timeout(Duration::from_secs(1), call).await;
        let received = Instant::now();
        match reply {
            Ok(Ok(reply)) => match earliest_time(&reply) {
                Some(server_now) => self.inner.clock.observe(server_now, received),
                None => tracing::warn!(?reply, "unexpected reply to TIME"),
            },
            Ok(Err(cause)) => tracing::debug!(%cause, "could not read the server's clock"),
            Err(_) => tracing::debug!("no answer to TIME within a second"),
        }
    }

    /// Reads the server's clock now and then every second while the store lives.
    pub(crate) async fn keep_clock(&self) {
        self.sample_clock().await;
        let weak = Arc::downgrade(&self.inner);
        crate::deadline::keep_sampling(weak, |inner| async move {
            RedisStore { inner }.sample_clock().await;
        });
    }

    /// Runs `call` under the breaker and the timeout.
    async fn guarded<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let permit = self.inner.breaker.admit()?;
        let result = match self.inner.patience.wait(self.inner.timeout, call).await {
            Ok(r) => r,
            Err(GaveUp) => Err(StoreError::Timeout(self.inner.timeout)),
        };
        if let Err(e) = &result {
            tracing::debug!(target_redis = %self.inner.target, kind = e.kind().as_str(), cause = ?e, "redis call failed");
            self.failed(e);
        }
        self.inner.breaker.record(permit, &result);
        result
    }

    /// Behind Sentinel, a failure that a failover explains (the master gone, silent, or now
    /// a replica) makes the store look for the master again.
    fn failed(&self, error: &StoreError) {
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
    pub(crate) async fn eval(&self, cmd: &Cmd) -> Result<Value, StoreError> {
        let mut attempts = 0;
        let mut moving = 0u32;
        loop {
            let loaded = self.inner.scripts.generation();
            let result: Result<Value, redis::RedisError> = self.inner.connection.query(cmd).await;
            self.heard(&result);
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
                other => return other.map_err(classify),
            }
        }
    }

    /// [`RedisStore::eval`] of `part`'s own call, given back if its caller stops waiting
    /// before the reply and the reply says it charged (`unanswered.rs`).
    pub(crate) async fn eval_settled(&self, part: &Part) -> Result<Value, StoreError> {
        Unanswered::new(self, invocation(part), Charges::One(part)).await
    }

    /// `part` called on its own, not coalesced: [`RedisStore::eval_settled`].
    #[cfg(not(feature = "bench"))]
    async fn eval_alone(&self, part: &Part) -> Result<Value, StoreError> {
        self.eval_settled(part).await
    }

    /// `part` called on its own, not coalesced: [`RedisStore::eval_settled`], or the old GCRA
    /// script when a benchmark set it ([`RedisStoreBuilder::old_gcra_script`]).
    #[cfg(feature = "bench")]
    async fn eval_alone(&self, part: &Part) -> Result<Value, StoreError> {
        match self.inner.old_gcra_sha.as_deref() {
            Some(sha) if let Some(cmd) = old_gcra_invocation(part, sha) => self.eval(&cmd).await,
            _ => self.eval_settled(part).await,
        }
    }

    /// [`RedisStore::eval`] within the store's timeout, measured as every call's is (Redis's
    /// silence, see [`Patience`]): a coalesced call, which no caller's own timeout bounds
    /// (`coalesce.rs`).
    /// A call given up on goes on in the background and is settled as `charges` says
    /// (`unanswered.rs`).
    pub(crate) async fn eval_timed(
        &self,
        cmd: Cmd,
        charges: Charges<'_>,
    ) -> Result<Value, StoreError> {
        let call = std::pin::pin!(Unanswered::new(self, cmd, charges));
        let result = match self.inner.patience.wait(self.inner.timeout, call).await {
            Ok(r) => r,
            Err(GaveUp) => Err(StoreError::Timeout(self.inner.timeout)),
        };
        if let Err(e) = &result {
            self.failed(e);
        }
        result
    }

    /// Loads every script (at connect time, so that the first calls find them).
    pub(crate) async fn load_scripts(&self) -> Result<(), StoreError> {
        let loaded = self.inner.scripts.generation();
        self.inner
            .scripts
            .reload(&self.inner.connection, loaded)
            .await
    }

    /// Checks that the Redis user may run every command tollgate sends, on keys under
    /// `prefix` and its reset channel (`permissions.rs`): a missing permission is found now,
    /// with the command named, rather than by the first request that needs it. Before Redis
    /// 7 (no `redis.acl_check_cmd`) nothing is checked.
    ///
    /// # Errors
    /// [`StoreError::Auth`] naming each command refused; the call's own failure.
    pub async fn check_permissions(&self, prefix: &str) -> Result<(), StoreError> {
        let script = &*crate::permissions::PERMISSIONS_SCRIPT;
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(1)
            .arg(format!("{prefix}:permission-check"))
            .arg(reset_channel(prefix));
        let sentinel = matches!(self.inner.connection, Connection::Sentinel(_));
        for line in crate::permissions::lines(self.is_cluster(), sentinel) {
            cmd.arg(line);
        }
        let reply = match self.guarded(self.eval(&cmd)).await {
            Err(StoreError::Auth(cause)) => {
                return Err(StoreError::Auth(
                    format!(
                        "the Redis user may not run EVALSHA on keys {prefix}:* ({cause}); see docs/redis.md for the ACL tollgate needs"
                    )
                    .into(),
                ));
            }
            other => other?,
        };
        match crate::permissions::decode(reply)? {
            Some(checked) if !checked.refused.is_empty() => {
                Err(crate::permissions::refused(&checked.refused, prefix))
            }
            Some(checked) => {
                if !checked.unchecked.is_empty() {
                    // Not a refusal: the first call that needs one of these says more.
                    tracing::warn!(
                        commands = ?checked.unchecked,
                        "redis could not check these permissions at start"
                    );
                }
                Ok(())
            }
            None => {
                tracing::info!("redis before 7: the user's permissions cannot be checked at start");
                Ok(())
            }
        }
    }

    /// Subscribes to the resets of keys under `prefix` (published by every instance's
    /// reset) and calls `on_reset` with each reset key, until the returned task is aborted;
    /// over this store's own TLS and credentials, and behind Sentinel on the current master.
    /// See [`crate::reset_channel`].
    pub fn listen_for_resets(
        &self,
        prefix: &str,
        on_reset: impl Fn(&str) + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        crate::resets::listen(self.inner.subscriber.clone(), prefix, on_reset)
    }

    /// Runs `op` on one group of entries (one slot) on clock `at`. Also returns the clock a
    /// give-back of this group must use: the instant its script decided at (GCRA's
    /// single-entry script on the server's clock reads no instant, and its give-back needs
    /// none).
    ///
    /// On the server's clock, a refusal due within a millisecond is decided again a
    /// millisecond later, once (see [`due_within_a_millisecond`]). A peek whose connection was
    /// lost is sent again, once; a check is not (its script may have run).
    async fn run_group(
        &self,
        op: Op,
        entries: &[&Entry<'_>],
        at: TimeSource,
        deadline: Option<u64>,
        counts_refusals: bool,
    ) -> Result<(TimeSource, SmallVec<[Decision; 2]>), StoreError> {
        let mut inv = Part::new(op, entries, at, counts_refusals);
        inv.set_deadline(deadline);
        let mut decided = match self.run_once(&mut inv, entries, at).await {
            // A lost connection (dropped, reset, a failover) leaves a call's fate unknown: a
            // check's script may have run and charged before its reply was lost, so only a
            // peek, which writes nothing, is sent again (once, on the reconnected connection).
            Err(StoreError::Connection(cause)) if op == Op::Peek => {
                tracing::debug!(%cause, "connection lost under a peek; sending it again");
                Box::pin(self.run_once(&mut inv, entries, at)).await?
            }
            other => other?,
        };
        // The second calls are boxed: rare, and inline they would make every call's state
        // larger (see `Store::decide` below).
        if at == TimeSource::Server && op != Op::GiveBack && due_within_a_millisecond(&decided.1) {
            decided = Box::pin(async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                self.run_once(&mut inv, entries, at).await
            })
            .await?;
        }
        Ok(decided)
    }

    /// One call of `inv`: its own, or through the coalescer (sent at once when no call of its
    /// queue is in flight, else as part of the next batch). A check that Redis ran after its
    /// deadline (nothing charged) is sent again with a deadline on that answer's clock: the
    /// caller is still waiting (`deadline.rs`).
    async fn run_once(
        &self,
        inv: &mut Part,
        entries: &[&Entry<'_>],
        at: TimeSource,
    ) -> Result<(TimeSource, SmallVec<[Decision; 2]>), StoreError> {
        let reply = loop {
            let reply = match self.coalescer() {
                None => self.eval_alone(inv).await?,
                Some(c) => {
                    let queue = match (&self.inner.connection, entries.first()) {
                        (Connection::Cluster(_), Some(e)) => usize::from(slot_of(e.key().as_str())),
                        _ => 0,
                    };
                    c.call(self, queue, inv).await?
                }
            };
            match late(&reply) {
                Some(server_now) => inv.set_deadline(Some(self.too_late(server_now))),
                None => break reply,
            }
        };
        let (now, decisions) = decode(reply, entries)?;
        let undo_at = match (at, now) {
            (TimeSource::Caller(t), _) => TimeSource::Caller(t),
            (_, Some(t)) => TimeSource::ServerInstant(t),
            (at, None) => at,
        };
        Ok((undo_at, decisions))
    }

    async fn decide(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
        op: Op,
        deadline: Option<u64>,
    ) -> Result<Decisions, StoreError> {
        let entries = request.entries();
        let at = match now {
            Some(t) => TimeSource::Caller(t.as_micros()),
            None => TimeSource::Server,
        };
        let counts = request.counts_refusals();
        // On a single Redis every entry is in one group: nothing to group.
        if self.is_cluster() {
            let groups = self.groups(entries);
            if groups.len() > 1 {
                // Boxed: only a cluster's cross-slot requests come here, and inline this
                // path's give-backs would make every call's state larger.
                if counts || op == Op::Peek {
                    // Each entry on its own: one call per slot, nothing to give back.
                    return Box::pin(
                        self.decide_per_slot(entries, &groups, op, at, deadline, counts),
                    )
                    .await;
                }
                if request.has_needs() {
                    return Box::pin(self.decide_needs_across_slots(request, at, deadline)).await;
                }
                return Box::pin(self.decide_across_slots(entries, &groups, op, at, deadline))
                    .await;
            }
        }
        let group: SmallVec<[&Entry<'_>; 2]> = entries.iter().collect();
        let (_, decisions) = self.run_group(op, &group, at, deadline, counts).await?;
        Ok(decisions.into_iter().collect())
    }

    /// [`RedisStore::decide`] of a request whose entries lie in several slots of a cluster and
    /// are decided each on its own (a peek, or a request that counts refusals): one call per
    /// slot.
    async fn decide_per_slot(
        &self,
        entries: &[Entry<'_>],
        groups: &[Group],
        op: Op,
        at: TimeSource,
        deadline: Option<u64>,
        counts_refusals: bool,
    ) -> Result<Decisions, StoreError> {
        let mut out: SmallVec<[Option<Decision>; 2]> = SmallVec::from_elem(None, entries.len());
        for group in groups {
            let members: SmallVec<[&Entry<'_>; 2]> = group.iter().map(|&i| &entries[i]).collect();
            let (_, decisions) = self
                .run_group(op, &members, at, deadline, counts_refusals)
                .await?;
            for (&i, d) in group.iter().zip(decisions) {
                out[i] = Some(d);
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| StoreError::Protocol("an entry got no decision".into())))
            .collect()
    }

    /// [`RedisStore::decide`] of a check whose entries lie in several slots of a cluster and
    /// need less than all or nothing (`tollgate::Need`): no script sees every slot, so the
    /// request is peeked slot by slot, and when it is admitted the entries that admitted are
    /// checked as one all-or-nothing request across slots ([`RedisStore::decide_across_slots`],
    /// giving back on a later slot's refusal). Should one of them refuse meanwhile (another
    /// caller took the units between the two steps), nothing stays charged and the whole is
    /// decided again, up to [`NEEDS_ATTEMPTS`] times; after that, the entries the check left
    /// uncharged answer refused (retry after a millisecond), so the answer never claims an
    /// admission it did not charge.
    async fn decide_needs_across_slots(
        &self,
        request: &Request<'_>,
        at: TimeSource,
        deadline: Option<u64>,
    ) -> Result<Decisions, StoreError> {
        let entries = request.entries();
        let groups = self.groups(entries);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = self
                .decide_per_slot(entries, &groups, Op::Peek, at, None, false)
                .await?;
            if !request.admitted(out.iter().map(|d| d.is_allowed())) {
                return Ok(out);
            }
            let chosen: SmallVec<[usize; 4]> = (0..entries.len())
                .filter(|&i| out[i].is_allowed())
                .collect();
            let Some(mut chosen_request) = request.select(&chosen) else {
                return Ok(out);
            };
            for i in 0..chosen.len() {
                chosen_request.set_need(i, tollgate::Need::Must);
            }
            let chosen_entries = chosen_request.entries();
            let chosen_groups = self.groups(chosen_entries);
            let checked: Decisions = if chosen_groups.len() > 1 {
                self.decide_across_slots(chosen_entries, &chosen_groups, Op::Check, at, deadline)
                    .await?
            } else {
                let group: SmallVec<[&Entry<'_>; 2]> = chosen_entries.iter().collect();
                let (_, d) = self
                    .run_group(Op::Check, &group, at, deadline, false)
                    .await?;
                d.into_iter().collect()
            };
            let charged = checked.iter().all(|d| d.is_allowed());
            let mut merged: SmallVec<[Decision; 2]> = out.iter().copied().collect();
            for (&i, d) in chosen.iter().zip(checked.iter()) {
                merged[i] = *d;
            }
            if charged || !request.admitted(merged.iter().map(|d| d.is_allowed())) {
                return Ok(merged.into_iter().collect());
            }
            if attempt >= NEEDS_ATTEMPTS {
                for &i in &chosen {
                    let d = &mut merged[i];
                    if d.is_allowed() {
                        d.admission =
                            tollgate::Admission::Refused(NotUntil::new(Duration::from_millis(1)));
                    }
                }
                return Ok(merged.into_iter().collect());
            }
        }
    }

    /// [`RedisStore::decide`] of a request whose entries lie in several slots of a cluster:
    /// one call per group, all or nothing across them (see the crate docs).
    async fn decide_across_slots(
        &self,
        entries: &[Entry<'_>],
        groups: &[Group],
        op: Op,
        at: TimeSource,
        deadline: Option<u64>,
    ) -> Result<Decisions, StoreError> {
        let mut out: SmallVec<[Option<Decision>; 2]> = SmallVec::from_elem(None, entries.len());
        let mut charged: SmallVec<[(&Group, TimeSource); 4]> = SmallVec::new();
        let mut denied_at = None;
        for (g, group) in groups.iter().enumerate() {
            let members: SmallVec<[&Entry<'_>; 2]> = group.iter().map(|&i| &entries[i]).collect();
            let (undo_at, decisions) = match self.run_group(op, &members, at, deadline, false).await
            {
                Ok(r) => r,
                Err(e) => {
                    self.give_back(entries, &charged).await;
                    return Err(e);
                }
            };
            let all = decisions.iter().all(|d| d.is_allowed());
            for (&i, d) in group.iter().zip(decisions) {
                out[i] = Some(d);
            }
            if op == Op::Check {
                if all {
                    charged.push((group, undo_at));
                } else {
                    denied_at = Some(g);
                    break;
                }
            }
        }
        if let Some(g) = denied_at {
            // Undo the groups already charged, and tell the rest how they stand.
            for (i, d) in self.give_back(entries, &charged).await {
                out[i] = Some(d);
            }
            for group in &groups[g + 1..] {
                let members: SmallVec<[&Entry<'_>; 2]> =
                    group.iter().map(|&i| &entries[i]).collect();
                let (_, decisions) = self.run_group(Op::Peek, &members, at, None, false).await?;
                for (&i, d) in group.iter().zip(decisions) {
                    out[i] = Some(d);
                }
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| StoreError::Protocol("an entry got no decision".into())))
            .collect()
    }

    /// Gives back each entry's cost on every charged group, each on the clock it was charged
    /// on (best effort: a failure leaves the units taken until they replenish, and is
    /// logged). Returns the decisions after the give-back.
    async fn give_back(
        &self,
        entries: &[Entry<'_>],
        charged: &[(&Group, TimeSource)],
    ) -> Vec<(usize, Decision)> {
        let mut out = Vec::new();
        if charged.is_empty() {
            return out;
        }
        for &(group, at) in charged {
            let members: SmallVec<[&Entry<'_>; 2]> = group.iter().map(|&i| &entries[i]).collect();
            match self
                .run_group(Op::GiveBack, &members, at, None, false)
                .await
            {
                Ok((_, decisions)) => out.extend(group.iter().copied().zip(decisions)),
                Err(e) => tracing::warn!(
                    cause = %e,
                    "could not give back units of a cross-slot check; they stay taken until they replenish"
                ),
            }
        }
        metrics::counter!("tollgate_redis_cross_slot_give_backs_total").increment(1);
        out
    }

    /// Entry indices grouped by hash slot, in order of first appearance; one group on a
    /// single Redis.
    fn groups(&self, entries: &[Entry<'_>]) -> SmallVec<[Group; 2]> {
        let mut groups: SmallVec<[(u16, Group); 2]> = SmallVec::new();
        if !self.is_cluster() {
            groups.push((0, (0..entries.len()).collect()));
        } else {
            for (i, e) in entries.iter().enumerate() {
                let slot = slot_of(e.key().as_str());
                match groups.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, g)) => g.push(i),
                    None => groups.push((slot, SmallVec::from_elem(i, 1))),
                }
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// Deletes `keys` and publishes each on its prefix's reset channel, so that other
    /// instances' deny caches forget it (`resets.rs`): in one round trip on a single Redis; on
    /// a cluster the channel is not in the keys' slot, so the publishes follow the delete.
    async fn delete(&self, keys: &[&Key]) -> Result<(), StoreError> {
        let mut del = redis::cmd("DEL");
        for k in keys {
            del.arg(k.as_str());
        }
        let mut publish = redis::pipe();
        for k in keys {
            publish
                .cmd("PUBLISH")
                .arg(reset_channel(k.prefix()))
                .arg(k.as_str())
                .ignore();
        }
        let result: Result<(), redis::RedisError> = match &self.inner.connection {
            Connection::Cluster(_) => {
                let deleted: Result<i64, _> = self.inner.connection.query(&del).await;
                match deleted {
                    Ok(_) => self.inner.connection.query_pipe(&publish).await,
                    Err(e) => Err(e),
                }
            }
            node => {
                let mut both = redis::pipe();
                both.add_command(del).ignore();
                for k in keys {
                    both.cmd("PUBLISH")
                        .arg(reset_channel(k.prefix()))
                        .arg(k.as_str())
                        .ignore();
                }
                node.query_pipe(&both).await
            }
        };
        self.heard(&result);
        result.map_err(classify)
    }

    /// Counts a reply (or a server error: Redis answered) for the calls waiting on theirs.
    fn heard<T>(&self, result: &Result<T, redis::RedisError>) {
        let answered = match result {
            Ok(_) => true,
            Err(e) => !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()),
        };
        if answered {
            self.inner.patience.heard();
            self.inner.clock.heard();
        }
    }
}

/// How many times a cross-slot check of entries that need less than all or nothing is decided
/// again after another caller took units between its peek and its check
/// ([`RedisStore::decide_needs_across_slots`]).
const NEEDS_ATTEMPTS: u32 = 4;

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

/// Whether `decisions` refuse, and only for less than a millisecond.
///
/// On Redis's clock GCRA knows the instant only to the millisecond, and it errs towards
/// refusing (`lua/gcra.lua`): a unit that the exact rule may admit within the current
/// millisecond (the last of a burst taken within one, say) is refused until the next. The
/// state cannot tell that case from one where admitting would be too early, so rather than
/// refuse it or guess, the store asks again once the millisecond is over: one more round trip
/// and a millisecond, only for a call that would otherwise be refused with a wait under a
/// millisecond. Any algorithm's refusal of that kind gets the same second look.
fn due_within_a_millisecond(decisions: &[Decision]) -> bool {
    decisions.iter().any(|d| !d.is_allowed())
        && decisions.iter().all(|d| {
            d.is_allowed()
                || d.retry_after()
                    .is_some_and(|r| r < Duration::from_millis(1))
        })
}

/// The scripts' load state on this store's connection: a generation counter, bumped by each
/// load, so that the calls that met one `NOSCRIPT` wait for one load instead of each sending
/// its own.
#[derive(Default)]
struct Scripts {
    generation: std::sync::atomic::AtomicU64,
    loading: tokio::sync::Mutex<()>,
}

impl Scripts {
    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Loads every script, unless another call already did since generation `seen`.
    async fn reload(&self, connection: &Connection, seen: u64) -> Result<(), StoreError> {
        let _one_at_a_time = self.loading.lock().await;
        if self.generation() != seen {
            return Ok(());
        }
        for script in all_scripts() {
            let loaded = match connection {
                Connection::Single(c) => script.load_async(&mut c.clone()).await,
                Connection::Sentinel(s) => script.load_async(&mut s.manager()).await,
                Connection::Cluster(c) => script.load_async(&mut c.clone()).await,
            };
            loaded.map_err(classify)?;
        }
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        metrics::counter!("tollgate_redis_script_loads_total").increment(1);
        Ok(())
    }
}

/// Redis Cluster's hash slots: one coalescing queue each.
const SLOTS: usize = 16_384;

/// Indices of a request's entries that share a slot.
type Group = SmallVec<[usize; 2]>;

impl Store for RedisStore {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: tollgate::Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        // Pinned here and handed on as a pointer: each `async fn` that takes a future by
        // value keeps its own copy of it (the argument, then the awaited local), and this one
        // is the whole decision's state, so passed by value it was copied three times per
        // decision (docs/benchmarks.md, "Smaller futures").
        let deadline = self.deadline_from(Instant::now());
        let call = std::pin::pin!(self.decide(request, now, Op::from(op), deadline));
        self.guarded(call).await
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.guarded(async {
            for group in self.groups(request.entries()) {
                let keys: Vec<&Key> = group.iter().map(|&i| request.entries()[i].key()).collect();
                self.delete(&keys).await?;
            }
            Ok(())
        })
        .await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        let mut deadline = self.deadline_from(Instant::now());
        let call = crate::lease::LeaseCall::new(take, now);
        self.guarded(async {
            loop {
                let cmd = call.invocation(deadline);
                let reply = Unanswered::new(self, cmd, Charges::Lease(&call)).await?;
                match late(&reply) {
                    // Nothing was taken nor given back: the same take again, still awaited.
                    Some(server_now) => deadline = Some(self.too_late(server_now)),
                    None => return crate::lease::decode(reply),
                }
            }
        })
        .await
    }

    fn in_process(&self) -> bool {
        false
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.inner.target)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}
