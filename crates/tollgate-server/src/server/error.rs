//! [`ServeError`]: why the service could not start, or stopped with an error.

use tollgate::StoreError;
use tollgate_envoy::tonic::transport::Error as GrpcError;

use crate::limits::LimitsError;

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
