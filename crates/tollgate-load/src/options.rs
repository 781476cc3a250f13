//! What to run: [`BenchOptions`] for both modes, [`GrpcTarget`] for the gRPC call.

use std::path::PathBuf;
use std::time::Duration;

/// How long one call or connect may take unless told otherwise (`tollgate bench --timeout`):
/// far above any latency worth measuring, short enough that a service that does not answer
/// is reported as such within seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Base URL, e.g. `http://127.0.0.1:8080` (HTTP) or `http://127.0.0.1:8081` (gRPC).
    pub url: String,
    /// Connections, each with one request in flight.
    pub concurrency: usize,
    /// How long to run.
    pub duration: Duration,
    /// HTTP only: which limit to check (default: the first the service lists).
    pub limit: Option<String>,
    /// Distinct key values to cycle through.
    pub keys: u64,
}

/// The gRPC call of [`crate::run_grpc`]: one `RateLimitRequest` with one descriptor.
#[derive(Debug, Clone)]
pub struct GrpcTarget {
    /// The request's `domain`.
    pub domain: String,
    /// The descriptor's entries, in order. The value of the **last** entry is varied over
    /// `--keys` values (`<value>-0` … `<value>-<N-1>`); with `--keys 1` it is sent as given.
    pub descriptor: Vec<(String, String)>,
    /// HTTP/2 connections the tasks share, each carrying its tasks' calls as concurrent
    /// streams, as Envoy multiplexes its calls to a rate limit service; 0 = one connection per
    /// task.
    pub channels: usize,
    /// For an `https://` URL: whom to trust, and the client certificate to present (mTLS).
    pub tls: Option<ClientTls>,
}

/// The client side of TLS: the CA bundle the service's certificate must chain to, and a
/// client certificate and key (PEM files) when the service asks for one.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// The CA bundle (PEM).
    pub ca: PathBuf,
    /// The client certificate and its key (PEM), for a service with `tls_client_ca`.
    pub identity: Option<(PathBuf, PathBuf)>,
}
