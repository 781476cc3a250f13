//! Runs the service: opens the store, serves the HTTP API on a bound listener until the
//! shutdown future resolves, and (when told the config file's path) reloads limits when the
//! file changes or on SIGHUP.
//!
//! The shape is mini-redis's `run(listener, shutdown)`: the caller binds (tests bind
//! `127.0.0.1:0`) and decides what "shutdown" means (`main`: SIGINT or SIGTERM). Shutdown is
//! graceful: the listener stops accepting, requests in flight finish.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::{Clock, LimitError, StoreError, Timestamp};

use crate::config::{Config, Overrides};
use crate::http::{self, AppState};
use crate::limits::Limits;
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
    /// The limits could not be built.
    #[error("invalid limits")]
    Limits(#[from] LimitError),
    /// Serving failed.
    #[error("serving failed")]
    Io(#[from] std::io::Error),
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
}

impl Server {
    /// A server for `config`, deciding at the store's time.
    pub fn new(config: Config) -> Server {
        Server {
            config,
            clock: None,
            watch: None,
        }
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
        } = self;
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

        if let Some(grpc) = config.server.grpc {
            tracing::warn!(%grpc, "server.grpc is accepted but not served by this release (Envoy RLS comes later)");
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let reloader = watch.map(|(path, overrides, interval)| {
            let reloader =
                Reloader::new(path, overrides, config.clone(), clock, Arc::clone(&state));
            reload::spawn(reloader, interval, stop_rx)
        });
        let addr = listener.local_addr()?;
        tracing::info!(%addr, store = store.kind(), limits = config.limits.len(), "listening");

        let app = http::router(state);
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                tracing::info!("shutting down");
            })
            .await;
        let _ = stop_tx.send(true);
        if let Some(task) = reloader {
            let _ = task.await;
        }
        result?;
        Ok(())
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .field("clock", &self.clock)
            .field("watch", &self.watch.as_ref().map(|(p, _, i)| (p, i)))
            .finish()
    }
}

/// Serves `config` on `listener` until `shutdown` resolves (no reload, the store's time).
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
