//! The two servers over one [`AppState`]: the HTTP API and, when configured, the Envoy rate
//! limit service over gRPC; each drains on [`Stop`] and stops the other when it ends. What
//! each connection may hold is the connection layer's (`crate::connection`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tollgate_envoy::RateLimitService;
use tollgate_envoy::tonic::transport::Error as GrpcError;

use super::stop::Stop;
use crate::connection::{self, CappedListener, Lifecycle, Listener, Settings};
use crate::http::{self, AppState};
use crate::tls::TlsAcceptors;

/// Serves the Envoy rate limit service over the current limits until `stop`, then drains
/// within `shutdown_timeout` (after which the remaining connections are closed); stops
/// everything when it ends. HTTP/2 pings start after half of `idle_timeout` of silence and
/// must be answered within `header_timeout`; a connection silent for `idle_timeout` is
/// closed by its [`connection::GuardedIo`]; one whose client's flow control has held an
/// answer for `body_timeout` is closed by tonic's side ([`tollgate_envoy::GrpcOptions`]'s
/// `answer_timeout`: the client takes its answer within the time it had to send its request).
pub(super) fn spawn_grpc(
    listener: Listener,
    state: &Arc<AppState>,
    settings: Settings,
    tls: Option<TlsAcceptors>,
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
        answer_timeout: settings.body_timeout,
    };
    let (lifecycle, watcher) = watch::channel(Lifecycle::Serving);
    let incoming = connection::grpc_incoming(
        CappedListener::new(listener, settings.max_connections),
        settings,
        tls,
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

/// Most concurrent gRPC calls on one connection, answers not yet taken by the client
/// included (Envoy opens more connections past it). 100, not 1024: a stream whose answer its
/// client's window holds costs about 10 KB, and 100 connections holding 1000 each took the
/// server from 23 MB to 1.06 GB in 3 s; now one connection holds about a megabyte at most, for
/// `body_timeout` at most.
const MAX_CONCURRENT_STREAMS: u32 = tollgate_envoy::DEFAULT_MAX_CONCURRENT_STREAMS;

/// Serves the HTTP API until `shutdown` resolves or the gRPC server stops (then stops
/// everything), and drains.
pub(super) async fn serve_http(
    listener: Listener,
    state: Arc<AppState>,
    settings: Settings,
    tls: Option<TlsAcceptors>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop: &Stop,
) -> std::io::Result<()> {
    let stop = stop.clone();
    let listener = CappedListener::new(listener, settings.max_connections);
    connection::http1::serve(listener, http::router(state), settings, tls, async move {
        tokio::select! {
            () = shutdown => tracing::info!("shutting down"),
            () = stop.stopped() => tracing::error!("the gRPC server stopped; shutting down"),
        }
        stop.stop_all();
    })
    .await
}

/// After the HTTP server has stopped: stops everything else and waits for the gRPC server
/// (its result) and the reloader to finish.
pub(super) async fn wind_down(
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
