//! Runs the service: opens the store, serves the HTTP API on a bound listener and, when
//! `server.grpc` is set, the Envoy rate limit service (with the gRPC health service) on a
//! second one, until the shutdown future resolves; and (when told the config file's path)
//! reloads limits and Envoy rules when the file changes or on SIGHUP.
//!
//! The shape is mini-redis's `run(listener, shutdown)`: the caller binds (`main` with
//! [`listen`], whose accept queue a flood does not fill; tests bind `127.0.0.1:0`;
//! [`Server::grpc_listener`] for the gRPC side, else `run` binds `server.grpc` itself, with
//! [`listen`]) and decides what "shutdown" means (`main`: SIGINT or SIGTERM).
//! Shutdown is graceful and reaches both servers at once: the listeners stop accepting,
//! requests and calls in flight are answered, within `server.shutdown_timeout` whatever the
//! clients do (then every connection is closed). If either server fails, the other is shut
//! down too. What each connection may hold (timeouts, the connection cap) is
//! `crate::connection`'s.

mod reload;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tollgate::{Clock, StoreError, Timestamp};
use tollgate_envoy::RateLimitService;
use tollgate_envoy::tonic::transport::Error as GrpcError;

use crate::config::{Backend, Config, Overrides};
use crate::connection::{self, CappedListener, Lifecycle, Settings};
use crate::http::status_body::sample_history;
use crate::http::{self, AppState};
use crate::limits::{Limits, LimitsError};
use crate::metrics;
use crate::store::AnyStore;
use reload::Reloader;

/// How often the config file is looked at, by default.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// The accept queue asked of the kernel for each listener ([`listen`]), which caps it at
/// `net.core.somaxconn` (4096 by default since Linux 5.4).
///
/// Deep enough that a flood of sockets over `max_connections` does not fill it: once it is
/// full, the kernel drops new clients' SYNs, and a client whose SYN is dropped tries again only
/// after 1 s (then 3 s). With 128 (the standard library's, which tokio's `bind` uses too), a
/// 6 000-socket flood against the default cap of 4096 filled it in bursts: a new client now
/// and then waited a second or more. Queued connections cost the process nothing until they
/// are accepted.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` with an accept queue of [`LISTEN_BACKLOG`] (what `main` binds,
/// and `run` for `server.grpc`).
///
/// # Errors
/// When the address cannot be bound (taken, not local, not permitted).
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As the standard library's `bind` does: a restarted service rebinds at once, even with
    // its previous connections still in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configured store could not be opened.
    #[error("cannot open the {backend} store at {target}")]
    Store {
        /// `redis`, `redis_cluster`.
        backend: &'static str,
        /// Where, with passwords redacted.
        target: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The limits or the Envoy rules could not be built.
    #[error("invalid limits")]
    Limits(#[from] LimitsError),
    /// The gRPC listen address could not be bound.
    #[error("cannot listen on {addr} (server.grpc)")]
    GrpcBind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving HTTP failed.
    #[error("serving failed")]
    Io(#[from] std::io::Error),
    /// Serving gRPC failed.
    #[error("serving gRPC failed")]
    Grpc(#[from] GrpcError),
}

/// A clock shared as a trait object (the limiter and memory store take one by value).
#[derive(Clone, Debug)]
pub struct SharedClock(Arc<dyn Clock>);

impl SharedClock {
    /// Shares `clock`.
    pub fn new(clock: impl Clock) -> SharedClock {
        SharedClock(Arc::new(clock))
    }
}

impl Clock for SharedClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }
}

/// A configured server, not yet running.
pub struct Server {
    config: Config,
    clock: Option<SharedClock>,
    watch: Option<(PathBuf, Overrides, Duration)>,
    grpc: Option<TcpListener>,
}

impl Server {
    /// A server for `config`, deciding at the store's time.
    pub fn new(config: Config) -> Server {
        Server {
            config,
            clock: None,
            watch: None,
            grpc: None,
        }
    }

    /// Serve the Envoy rate limit service on `listener` (already bound, e.g. to
    /// `127.0.0.1:0` in tests) instead of binding `server.grpc`; given one, it is served
    /// even when `server.grpc` is not set.
    pub fn grpc_listener(mut self, listener: TcpListener) -> Server {
        self.grpc = Some(listener);
        self
    }

    /// Decide at `clock`'s time (tests: a `FakeClock`).
    pub fn clock(mut self, clock: impl Clock) -> Server {
        self.clock = Some(SharedClock::new(clock));
        self
    }

    /// Reload limits from `path` (with `overrides`) when its content changes, looked at every
    /// `interval`, and on SIGHUP.
    pub fn watch(
        mut self,
        path: impl Into<PathBuf>,
        overrides: Overrides,
        interval: Duration,
    ) -> Server {
        self.watch = Some((path.into(), overrides, interval));
        self
    }

    /// Serves on `listener` until `shutdown` resolves.
    ///
    /// # Errors
    /// [`ServeError`] when the store cannot be opened or serving fails.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let Server {
            config,
            clock,
            watch,
            grpc,
        } = self;
        let grpc = bind_grpc(grpc, config.server.grpc).await?;
        let state = build_state(&config, clock.clone()).await?;
        if grpc.is_none() && !config.envoy.rules.is_empty() {
            tracing::warn!("[envoy] rules are configured but server.grpc is not set: not served");
        }
        let stop = Stop::new();
        let reloader = spawn_reload(watch, &config, clock, &state, &stop);
        let addr = listener.local_addr()?;
        let grpc_addr = match &grpc {
            Some(l) => l.local_addr()?.to_string(),
            None => "off".to_owned(),
        };
        tracing::info!(%addr, grpc = %grpc_addr, store = state.store.kind(), limits = config.limits.len(), "listening");

        let settings = Settings::new(&config.server);
        let grpc_task = grpc.map(|listener| {
            // The store timeout measures Redis's silence, not the call (tollgate-redis,
            // patience.rs): a store call ends within `longest_wait`.
            let call_timeout = settings.body_timeout
                + tollgate_redis::longest_wait(config.store.timeout)
                + std::time::Duration::from_millis(10);
            spawn_grpc(listener, &state, settings, call_timeout, &stop)
        });
        let leases = spawn_lease_sweep(&state, &stop);
        let history = spawn_history(&state, &stop);
        let served = serve_http(listener, Arc::clone(&state), settings, shutdown, &stop).await;
        let grpc_served = wind_down(&stop, grpc_task, reloader).await;
        let _ = leases.await;
        let _ = history.await;
        // Every request has been answered: what the leases hold goes back to the store.
        state.limits.load().return_leases("shutdown").await;
        served?;
        grpc_served?;
        Ok(())
    }
}

/// Every [`LEASE_SWEEP`], gives back the units of expired leases, until `stop` (a lease's
/// units otherwise go back with its key's next take, which an idle key never makes).
fn spawn_lease_sweep(state: &Arc<AppState>, stop: &Stop) -> JoinHandle<()> {
    let state = Arc::clone(state);
    let stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(LEASE_SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stopped = stop.stopped();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let limits = state.limits.load_full();
                    limits.return_expired_leases().await;
                    crate::metrics::leased_units(limits.leased_units());
                }
                () = &mut stopped => return,
            }
        }
    })
}

/// Every `server.history_interval`, samples the status page's hour of history (and probes
/// the store, so that an outage is seen with no one looking), until `stop`.
fn spawn_history(state: &Arc<AppState>, stop: &Stop) -> JoinHandle<()> {
    let state = Arc::clone(state);
    let stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(state.history.interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: the baseline of the first interval's increases.
        let stopped = stop.stopped();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = tick.tick() => sample_history(&state).await,
                () = &mut stopped => return,
            }
        }
    })
}

/// How often expired leases are given back.
const LEASE_SWEEP: Duration = Duration::from_secs(1);

/// After the HTTP server has stopped: stops everything else and waits for the gRPC server
/// (its result) and the reloader to finish.
async fn wind_down(
    stop: &Stop,
    grpc_task: Option<JoinHandle<Result<(), GrpcError>>>,
    reloader: Option<JoinHandle<()>>,
) -> Result<(), GrpcError> {
    stop.stop_all();
    let grpc_served = match grpc_task {
        Some(task) => task.await.unwrap_or_else(|e| {
            tracing::error!(cause = %e, "the gRPC server task failed");
            Ok(())
        }),
        None => Ok(()),
    };
    if let Some(task) = reloader {
        let _ = task.await;
    }
    grpc_served
}

/// The gRPC listener: the one `given`, else `addr` bound here, else none.
async fn bind_grpc(
    given: Option<TcpListener>,
    addr: Option<SocketAddr>,
) -> Result<Option<TcpListener>, ServeError> {
    match (given, addr) {
        (Some(listener), _) => Ok(Some(listener)),
        (None, Some(addr)) => listen(addr)
            .map(Some)
            .map_err(|source| ServeError::GrpcBind { addr, source }),
        (None, None) => Ok(None),
    }
}

/// Opens the store and builds the limits and the Envoy rules over it.
async fn build_state(
    config: &Config,
    clock: Option<SharedClock>,
) -> Result<Arc<AppState>, ServeError> {
    // The recorder first: what connecting counts (the scripts loaded) is counted.
    let _ = crate::metrics::handle();
    let store = AnyStore::open(&config.store, clock.clone())
        .await
        .map_err(|source| ServeError::Store {
            backend: config.store.backend.name(),
            target: config.store.backend.to_string(),
            source,
        })?;
    let limits = Limits::build(
        config.limits.clone(),
        &config.envoy,
        store.clone(),
        config.store.namespace.clone(),
        clock,
    )?;
    let mut state = AppState::new(
        limits,
        store,
        &config.store,
        config.server.admin_token.clone(),
    );
    state.history = crate::status::history::History::new(config.server.history_interval);
    if config.envoy.config_dir.is_some() {
        // The reference's config load counters: this load, and the error series at 0.
        tollgate_envoy::config_loads_watched();
        tollgate_envoy::config_load(true);
    }
    // After the state, which installs the recorder.
    metrics::store_settings(
        config.store.timeout,
        matches!(config.store.backend, Backend::Memory).then_some(config.store.max_keys),
    );
    Ok(Arc::new(state))
}

/// Starts reloading from the watched file, if any; without one, SIGHUP is only logged.
fn spawn_reload(
    watch: Option<(PathBuf, Overrides, Duration)>,
    config: &Config,
    clock: Option<SharedClock>,
    state: &Arc<AppState>,
    stop: &Stop,
) -> Option<JoinHandle<()>> {
    let Some((path, overrides, interval)) = watch else {
        reload::ignore_hangup(stop.receiver());
        return None;
    };
    state.reloads.watching();
    metrics::reloads_watched();
    let reloader = Reloader::new(path, overrides, config.clone(), clock, Arc::clone(state));
    Some(reload::spawn(reloader, interval, stop.receiver()))
}

/// Serves the Envoy rate limit service over the current limits until `stop`, then drains
/// within `shutdown_timeout` (after which the remaining connections are closed); stops
/// everything when it ends. HTTP/2 pings start after half of `idle_timeout` of silence and
/// must be answered within `header_timeout`; a connection silent for `idle_timeout` is
/// closed by its [`connection::GuardedIo`].
fn spawn_grpc(
    listener: TcpListener,
    state: &Arc<AppState>,
    settings: Settings,
    call_timeout: Duration,
    stop: &Stop,
) -> JoinHandle<Result<(), GrpcError>> {
    let current = Arc::clone(state);
    let service = RateLimitService::from_fn(move || Arc::clone(current.limits.load().envoy()));
    let options = tollgate_envoy::GrpcOptions {
        keepalive_interval: settings.idle_timeout / 2,
        keepalive_timeout: settings.header_timeout,
        max_concurrent_streams: MAX_CONCURRENT_STREAMS,
        call_timeout,
    };
    let (lifecycle, watcher) = watch::channel(Lifecycle::Serving);
    let incoming = connection::grpc_incoming(
        CappedListener::new(listener, settings.max_connections),
        settings,
        watcher,
    );
    let stop = stop.clone();
    tokio::spawn(async move {
        let served = tollgate_envoy::serve_with(incoming, service, options, stop.stopped());
        let mut served = std::pin::pin!(served);
        let deadline = async {
            stop.stopped().await;
            tokio::time::sleep(settings.shutdown_timeout).await;
        };
        let result = tokio::select! {
            result = &mut served => result,
            () = deadline => {
                tracing::warn!("gRPC connections still open at the shutdown deadline; closing them");
                lifecycle.send_replace(Lifecycle::Closing);
                served.await
            }
        };
        stop.stop_all();
        result
    })
}

/// Most concurrent gRPC calls on one connection (Envoy opens more connections past it).
const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// Serves the HTTP API until `shutdown` resolves or the gRPC server stops (then stops
/// everything), and drains.
async fn serve_http(
    listener: TcpListener,
    state: Arc<AppState>,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop: &Stop,
) -> std::io::Result<()> {
    let stop = stop.clone();
    let listener = CappedListener::new(listener, settings.max_connections);
    connection::http1::serve(listener, http::router(state), settings, async move {
        tokio::select! {
            () = shutdown => tracing::info!("shutting down"),
            () = stop.stopped() => tracing::error!("the gRPC server stopped; shutting down"),
        }
        stop.stop_all();
    })
    .await
}

/// One stop signal for everything: the caller's shutdown, or either server ending.
#[derive(Clone)]
struct Stop {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Stop {
    fn new() -> Stop {
        let (tx, rx) = watch::channel(false);
        Stop {
            tx: Arc::new(tx),
            rx,
        }
    }

    /// Tells everything to stop.
    fn stop_all(&self) {
        self.tx.send_replace(true);
    }

    /// A receiver that turns true on stop.
    fn receiver(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Resolves once told to stop.
    async fn stopped(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .field("clock", &self.clock)
            .field("watch", &self.watch.as_ref().map(|(p, _, i)| (p, i)))
            .field("grpc", &self.grpc)
            .finish()
    }
}

/// Serves `config` on `listener` (and the Envoy service on `server.grpc`, when set) until
/// `shutdown` resolves (no reload, the store's time).
///
/// # Errors
/// As [`Server::run`].
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    Server::new(config).run(listener, shutdown).await
}

/// Resolves on SIGINT (ctrl-c) or SIGTERM. The handlers are installed when this is called,
/// not when the future is first polled: a process told to stop right after it logs
/// "listening" (a supervisor, a test) stops gracefully instead of dying of the signal's
/// default action. Call it inside the runtime, before serving.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(cause = %e, "cannot listen for {name}");
            None
        }
    };
    let interrupt = listen(SignalKind::interrupt(), "SIGINT");
    let terminate = listen(SignalKind::terminate(), "SIGTERM");
    async move {
        let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(interrupt) => {}
            () = wait(terminate) => {}
        }
    }
}
