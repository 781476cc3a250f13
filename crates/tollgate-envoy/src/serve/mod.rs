//! Serving the rate limit service, with the standard gRPC health service beside it.
//!
//! The shape of mini-redis's `run(listener, shutdown)`: the caller binds (so tests can bind
//! `127.0.0.1:0` and read the port) and says when to stop. `grpc.health.v1.Health` reports
//! `SERVING` for the whole server (`""`), for `envoy.service.ratelimit.v3.RateLimitService` and
//! for `ratelimit` (the name the reference service registers, which Envoy deployments probe)
//! while the server runs and the current snapshot is healthy ([`crate::Snapshot::healthy`]:
//! with `[envoy] healthy_with_at_least_one_config_loaded`, `NOT_SERVING` while no domain is
//! loaded). The snapshot is looked at every [`HEALTH_INTERVAL`], so a reload that loads the
//! first domain (or removes the last) shows within that time.
//!
//! [`serve_with`] takes the connections from the caller (so `tollgate serve` can cap and guard
//! them) and the HTTP/2 limits ([`GrpcOptions`]): keep-alive pings that find dead peers,
//! a bound on concurrent streams per connection, a deadline per call, and one per answer
//! held by the client's flow control.
//!
//! Beside it: `deferred_write.rs` and `deferred_write_io.rs`, the connection whose HTTP/2
//! writes wait one turn so that answers ready together leave in one write;
//! `message_budget.rs`, the bound on the bytes of unfinished messages all calls hold, and each
//! connection's; `connection.rs`, what one connection's calls hold, and the connection closed
//! when its client takes no answer; `answer_body.rs`, an answer owed to its client, and the
//! layer that puts each call under its connection.

pub(crate) mod answer_body;
pub(crate) mod connection;
pub(crate) mod deferred_write;
pub(crate) mod deferred_write_io;
pub(crate) mod message_budget;

use std::future::Future;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tollgate::Store;
use tonic::transport::server::Connected;

use crate::RateLimitService;

/// The largest `ShouldRateLimit` message decoded (1 MiB); a larger one is refused with
/// `OUT_OF_RANGE` before it is decoded.
///
/// gRPC's default is 4 MiB, and decoding is what costs: 4 MB of small descriptors took a
/// server from 19 to 124 MB of memory, for a call the descriptor caps then refused (one
/// decode per worker thread at a time, so a many-core instance took as many such spikes at
/// once). A call within the default caps (256 descriptors of 32 entries) fits with entries of
/// up to about 120 bytes; Envoy's calls are a few hundred bytes.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// How often the gRPC health service looks at the current snapshot's health.
pub const HEALTH_INTERVAL: Duration = Duration::from_millis(500);

/// The service names the health service answers for, beside the whole server's `""`.
const HEALTH_NAMES: [&str; 2] = ["envoy.service.ratelimit.v3.RateLimitService", "ratelimit"];

/// The HTTP/2 limits of the gRPC server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcOptions {
    /// A connection that has sent nothing for this long is pinged.
    pub keepalive_interval: Duration,
    /// A ping not answered within this closes the connection.
    pub keepalive_timeout: Duration,
    /// Most calls in flight on one connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`),
    /// counting those whose answer the client has not yet taken.
    pub max_concurrent_streams: u32,
    /// A call (its message received and decided) taking longer is answered
    /// `DEADLINE_EXCEEDED`.
    pub call_timeout: Duration,
    /// A connection with an answer its client's HTTP/2 flow control has held this long (the
    /// client announced no room for it, and made none since) is closed.
    pub answer_timeout: Duration,
}

/// The default [`GrpcOptions::max_concurrent_streams`]: 100, Envoy's own and the common
/// gRPC servers' order. A stream costs about 10 KB while its answer waits for the client
/// (tonic's encode buffer, the stream's state), so this bounds what one connection holds to
/// about a megabyte; Envoy opens another connection when it needs more calls in flight.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 100;

impl Default for GrpcOptions {
    /// Pings after 30 s of silence, answered within 10 s; 100 streams; 30 s per call; an
    /// answer held 10 s closes its connection.
    fn default() -> GrpcOptions {
        GrpcOptions {
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            call_timeout: Duration::from_secs(30),
            answer_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves `service` and the gRPC health service on `listener` until `shutdown` completes,
/// then lets calls in flight finish; with the default [`GrpcOptions`], and each connection's
/// writes taking turns ([`crate::DeferredWriteIo`]).
///
/// # Errors
/// The transport's error if the server fails.
pub async fn serve<St: Store>(
    listener: TcpListener,
    service: RateLimitService<St>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "envoy rate limit service listening");
    }
    let incoming =
        TcpListenerStream::new(listener).map(|accepted| accepted.map(crate::DeferredWriteIo::new));
    serve_with(incoming, service, GrpcOptions::default(), shutdown).await
}

/// Serves `service` and the gRPC health service on the connections of `incoming` until
/// `shutdown` completes (then stops taking connections and lets calls in flight finish).
///
/// # Errors
/// The transport's error if the server fails.
pub async fn serve_with<St, I, IO, IE>(
    incoming: I,
    service: RateLimitService<St>,
    options: GrpcOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error>
where
    St: Store,
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (reporter, health) = tonic_health::server::health_reporter();
    debug_assert_eq!(
        <RateLimitServiceServer<RateLimitService<St>> as tonic::server::NamedService>::NAME,
        HEALTH_NAMES[0]
    );
    let mut healthy = service.healthy();
    report(&reporter, healthy).await;
    let probe = service.clone();
    let watcher = tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEALTH_INTERVAL).await;
            let now = probe.healthy();
            if now != healthy {
                tracing::info!(healthy = now, "envoy rate limit service health changed");
                report(&reporter, now).await;
                healthy = now;
            }
        }
    });
    let budget = message_budget::MessageBudget::new(
        message_budget::MESSAGE_BUDGET_BYTES,
        message_budget::CONNECTION_SHARE_BYTES,
    );
    // Each call under its connection: its unfinished message under the budget and the
    // connection's share, its answer owed until the client takes it.
    let accounted = tower::layer::layer_fn(move |inner| {
        answer_body::Accounted::<_, IO::ConnectInfo>::new(inner, std::sync::Arc::clone(&budget))
    });
    let answer_timeout = options.answer_timeout;
    let incoming = incoming
        .map(move |accepted| accepted.map(|io| connection::Tracked::new(io, answer_timeout)));
    let served = tonic::transport::Server::builder()
        .layer(accounted)
        .http2_keepalive_interval(Some(options.keepalive_interval))
        .http2_keepalive_timeout(Some(options.keepalive_timeout))
        .max_concurrent_streams(options.max_concurrent_streams)
        .timeout(options.call_timeout)
        .add_service(health)
        .add_service(
            service
                .into_server()
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    watcher.abort();
    served
}

/// Sets every name's status (the whole server's too) to `healthy`.
async fn report(reporter: &tonic_health::server::HealthReporter, healthy: bool) {
    let status = if healthy {
        tonic_health::ServingStatus::Serving
    } else {
        tonic_health::ServingStatus::NotServing
    };
    for name in std::iter::once("").chain(HEALTH_NAMES) {
        reporter.set_service_status(name, status).await;
    }
}
