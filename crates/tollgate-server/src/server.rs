//! Runs the service: opens the store, serves the HTTP API on a bound listener and, when
//! `server.grpc` is set, the Envoy rate limit service (with the gRPC health service) on a
//! second one, until the shutdown future resolves; and (when told the config file's path)
//! reloads limits and Envoy rules when the file changes or on SIGHUP.
//!
//! The shape is mini-redis's `run(listener, shutdown)`: the caller binds (tests bind
//! `127.0.0.1:0`; [`Server::grpc_listener`] for the gRPC side, else `run` binds
//! `server.grpc` itself) and decides what "shutdown" means (`main`: SIGINT or SIGTERM).
//! Shutdown is graceful and reaches both servers at once: the listeners stop accepting,
//! calls in flight finish. If either server fails, the other is shut down too.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::{Clock, StoreError, Timestamp};
use tollgate_envoy::RateLimitService;

use crate::config::{Config, Overrides};
use crate::http::{self, AppState};
use crate::limits::{Limits, LimitsError};
use crate::reload::{self, Reloader};
use crate::store::AnyStore;

/// How often the config file is looked at, by default.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);

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
    Grpc(#[from] tollgate_envoy::tonic::transport::Error),
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
        let grpc = match (grpc, config.server.grpc) {
            (Some(listener), _) => Some(listener),
            (None, Some(addr)) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::GrpcBind { addr, source })?,
            ),
            (None, None) => None,
        };
        let store = AnyStore::open(&config.store, clock.clone())
            .await
            .map_err(|source| ServeError::Store {
                backend: config.store.backend.name(),
                target: config.store.backend.to_string(),
                source,
            })?;
        let namespace = config.store.namespace.clone();
        let limits = Limits::build(
            config.limits.clone(),
            &config.envoy,
            store.clone(),
            namespace.clone(),
            clock.clone(),
        )?;
        let state = Arc::new(AppState::new(
            limits,
            store.clone(),
            &namespace,
            config.server.admin_token.clone(),
        ));

        if grpc.is_none() && !config.envoy.rules.is_empty() {
            tracing::warn!("[envoy] rules are configured but server.grpc is not set: not served");
        }
        // One stop signal for everything: the caller's shutdown, or either server ending.
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let reloader = watch.map(|(path, overrides, interval)| {
            let reloader =
                Reloader::new(path, overrides, config.clone(), clock, Arc::clone(&state));
            reload::spawn(reloader, interval, stop_rx.clone())
        });
        if reloader.is_none() {
            reload::ignore_hangup(stop_rx.clone());
        }
        let addr = listener.local_addr()?;
        let grpc_addr = match &grpc {
            Some(l) => l.local_addr()?.to_string(),
            None => "off".to_owned(),
        };
        tracing::info!(%addr, grpc = %grpc_addr, store = store.kind(), limits = config.limits.len(), "listening");

        let grpc_task = grpc.map(|listener| {
            let current = Arc::clone(&state);
            let service =
                RateLimitService::from_fn(move || Arc::clone(current.limits.load().envoy()));
            let stopped = stopped(stop_rx.clone());
            let stop_all = Arc::clone(&stop_tx);
            tokio::spawn(async move {
                let result = tollgate_envoy::serve(listener, service, stopped).await;
                let _ = stop_all.send(true);
                result
            })
        });
        let app = http::router(state);
        let http_stopped = stopped(stop_rx);
        let http_stop_all = Arc::clone(&stop_tx);
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                tokio::select! {
                    () = shutdown => tracing::info!("shutting down"),
                    () = http_stopped => tracing::error!("the gRPC server stopped; shutting down"),
                }
                let _ = http_stop_all.send(true);
            })
            .await;
        let _ = stop_tx.send(true);
        let grpc_result = match grpc_task {
            Some(task) => match task.await {
                Ok(result) => result,
                Err(e) => {
                    tracing::error!(cause = %e, "the gRPC server task failed");
                    Ok(())
                }
            },
            None => Ok(()),
        };
        if let Some(task) = reloader {
            let _ = task.await;
        }
        result?;
        grpc_result?;
        Ok(())
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

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
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

/// Resolves on SIGINT (ctrl-c) or SIGTERM.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(cause = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
