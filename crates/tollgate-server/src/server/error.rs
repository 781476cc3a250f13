//! [`ServeError`]: why the service could not start, or stopped with an error.

use tollgate::StoreError;
use tollgate_envoy::tonic::transport::Error as GrpcError;

use crate::limits::LimitsError;
use crate::tls::TlsError;

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
    /// The certificate, key or client CA cannot be served (the message names the file).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The gRPC listen address could not be bound.
    #[error("cannot listen on {addr} (server.grpc)")]
    GrpcBind {
        /// The address (`unix:` and a path for a Unix socket).
        addr: crate::config::ListenAddress,
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
