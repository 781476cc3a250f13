//! [`TlsAcceptors`]: the current TLS configuration of both listeners, swapped whole when the
//! certificate files change.
//!
//! Each new connection takes the configuration current at its accept; a swap changes what
//! later handshakes get and nothing else, so connections already open carry on with the
//! certificate they were served.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_rustls::TlsAcceptor;

use super::configs::TlsConfigs;

/// The listeners' current TLS configuration, shared by the accept loops and the reloader.
#[derive(Debug, Clone)]
pub(crate) struct TlsAcceptors(Arc<ArcSwap<TlsConfigs>>);

impl TlsAcceptors {
    pub(crate) fn new(configs: TlsConfigs) -> TlsAcceptors {
        TlsAcceptors(Arc::new(ArcSwap::from_pointee(configs)))
    }

    /// For a new connection to the HTTP API.
    pub(crate) fn http(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.0.load().http))
    }

    /// For a new connection to the gRPC listener.
    pub(crate) fn grpc(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.0.load().grpc))
    }

    /// Serves `configs` to the connections accepted from now on.
    pub(crate) fn replace(&self, configs: TlsConfigs) {
        self.0.store(Arc::new(configs));
    }
}
