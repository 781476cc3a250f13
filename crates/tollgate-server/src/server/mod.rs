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
//!
//! - this file: [`Server`], the builder, and [`Server::run`], the order of things;
//! - `start`: the store opened and the shared state built; `clock`: [`SharedClock`];
//! - `listen`: [`listen`] and the gRPC listener; `signal`: [`shutdown_signal`], [`hangup_survived`];
//! - `serve`: the HTTP and gRPC servers and their drain; `stop`: the one stop signal;
//! - `tasks`: the lease sweep, the history sampler, the reloader's start;
//! - `reload`: hot reload of the limits and Envoy rules; `tls_reload`: the certificate files
//!   loaded at start and re-read when they change; `error`: [`ServeError`];
//! - `panics`: [`report_panics`], the hook that counts and logs every panic.

mod clock;
mod error;
mod listen;
mod panics;
mod reload;
mod serve;
mod signal;
mod start;
mod stop;
mod tasks;
mod tls_reload;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate::Clock;

pub use crate::connection::{Listener, UnixSocket};
pub use clock::SharedClock;
pub use error::ServeError;
pub use listen::{LISTEN_BACKLOG, bind, listen};
pub use panics::report_panics;
pub use signal::{hangup_survived, shutdown_signal};

use crate::config::{Config, Overrides};
use crate::connection::Settings;
use listen::bind_grpc;
use serve::{serve_http, spawn_grpc, wind_down};
pub(crate) use start::build_state;
use stop::Stop;
use tasks::{spawn_history, spawn_lease_sweep, spawn_metrics_upkeep, spawn_reload};

/// How often the config file is looked at, by default.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// A configured server, not yet running.
pub struct Server {
    config: Config,
    clock: Option<SharedClock>,
    watch: Option<(PathBuf, Overrides, Duration)>,
    grpc: Option<Listener>,
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
    pub fn grpc_listener(mut self, listener: impl Into<Listener>) -> Server {
        self.grpc = Some(listener.into());
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
        listener: impl Into<Listener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let Server {
            config,
            clock,
            watch,
            grpc,
        } = self;
        let listener = listener.into();
        let stop = Stop::new();
        let interval = watch.as_ref().map_or(DEFAULT_WATCH_INTERVAL, |w| w.2);
        let (tls, tls_reloader) =
            tls_reload::start(config.server.tls.as_ref(), interval, stop.receiver())?.unzip();
        let grpc = bind_grpc(grpc, config.server.grpc.as_ref(), config.server.unix_mode)?;
        let state = build_state(&config, clock.clone()).await?;
        if grpc.is_none() && !config.envoy.rules.is_empty() {
            tracing::warn!("[envoy] rules are configured but server.grpc is not set: not served");
        }
        let reloader = spawn_reload(watch, &config, clock, &state, &stop);
        let addr = listener.local_addr()?;
        let grpc_addr = match &grpc {
            Some(l) => l.local_addr()?,
            None => "off".to_owned(),
        };
        // TLS per listener: a `unix:` one is served in plaintext whatever the config says.
        let http_tls = tls.is_some() && listener.is_tcp();
        let grpc_tls = tls.is_some() && grpc.as_ref().is_some_and(Listener::is_tcp);
        tracing::info!(%addr, grpc = %grpc_addr, http_tls, grpc_tls, store = state.store.kind(), limits = config.limits.len(), "listening");

        let settings = Settings::new(&config.server);
        let grpc_task = grpc.map(|listener| {
            // The store timeout measures Redis's silence, not the call (tollgate-redis,
            // patience.rs): a store call ends within `longest_wait`.
            let call_timeout = settings.body_timeout
                + tollgate_redis::longest_wait(config.store.timeout)
                + std::time::Duration::from_millis(10);
            spawn_grpc(listener, &state, settings, tls.clone(), call_timeout, &stop)
        });
        let leases = spawn_lease_sweep(&state, &stop);
        let history = spawn_history(&state, &stop);
        let upkeep = spawn_metrics_upkeep(&state, &stop);
        let served = serve_http(listener, Arc::clone(&state), settings, tls, shutdown, &stop).await;
        let grpc_served = wind_down(&stop, grpc_task, reloader).await;
        if let Some(task) = tls_reloader {
            let _ = task.await;
        }
        let _ = leases.await;
        let _ = history.await;
        let _ = upkeep.await;
        // Every request has been answered: what the leases hold goes back to the store.
        state.limits.load().return_leases("shutdown").await;
        served?;
        grpc_served?;
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

/// Serves `config` on `listener` (and the Envoy service on `server.grpc`, when set) until
/// `shutdown` resolves (no reload, the store's time).
///
/// # Errors
/// As [`Server::run`].
pub async fn run(
    listener: impl Into<Listener>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    Server::new(config).run(listener, shutdown).await
}
