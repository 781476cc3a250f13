//! TLS on the listeners: the certificate, key and client CA of `[server]` read, checked and
//! turned into rustls configurations, swapped whole when the files change.
//!
//! rustls through tokio-rustls rather than tonic's own TLS: tonic's takes a fixed identity,
//! and certificates issued by cert-manager or Vault rotate every few days without a restart.
//! The handshake itself runs in the connection layer (`crate::connection`), under the same
//! deadlines and connection cap as the requests that follow it.
//!
//! - `configs`: `TlsConfigs`, the files read and checked, one configuration per listener;
//! - `acceptors`: `TlsAcceptors`, the current configurations, swapped by the reloader;
//! - `client_names`: the gRPC listener's `tls_client_names` check, inside the handshake;
//! - `validity`: a certificate's validity period, read from its DER;
//! - `error`: [`TlsError`], naming the file and the cause.

mod acceptors;
mod client_names;
mod configs;
mod error;
pub(crate) mod validity;

use std::time::SystemTime;

pub(crate) use acceptors::TlsAcceptors;
pub(crate) use configs::TlsConfigs;
pub use error::TlsError;
pub use validity::format_time;

use crate::config::ServerTls;

/// Reads and checks the files of `tls` as the service would serve them now (what
/// `tollgate check-config` runs), and returns when the certificate expires.
///
/// # Errors
/// [`TlsError`] naming the file at fault and why.
pub fn check(tls: &ServerTls) -> Result<SystemTime, TlsError> {
    TlsConfigs::load(tls, SystemTime::now()).map(|c| c.validity.not_after)
}
