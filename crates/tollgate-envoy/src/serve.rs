//! Serving the rate limit service, with the standard gRPC health service beside it.
//!
//! The shape of mini-redis's `run(listener, shutdown)`: the caller binds (so tests can bind
//! `127.0.0.1:0` and read the port) and says when to stop. `grpc.health.v1.Health` reports
//! `SERVING` for the whole server (`""`) and for `envoy.service.ratelimit.v3.RateLimitService`
//! while the server runs, so that Envoy's gRPC health checks and load balancers can probe it.

use std::future::Future;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tollgate::Store;

use crate::RateLimitService;

/// Serves `service` and the gRPC health service on `listener` until `shutdown` completes,
/// then lets calls in flight finish.
///
/// # Errors
/// The transport's error if the server fails.
pub async fn serve<St: Store>(
    listener: TcpListener,
    service: RateLimitService<St>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<RateLimitService<St>>>()
        .await;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "envoy rate limit service listening");
    }
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}
