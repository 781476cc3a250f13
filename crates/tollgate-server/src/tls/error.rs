//! [`TlsError`]: why the listeners' certificate, key or client CA cannot be used, naming the
//! file and keeping the cause.

use std::path::PathBuf;
use std::time::SystemTime;

/// A certificate, key or CA file that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read (missing, unreadable, a directory).
    #[error("{field} {}: cannot read the file: {source}", path.display())]
    Read {
        /// `server.tls_cert`, `server.tls_key` or `server.tls_client_ca`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not PEM, or holds no block of the kind expected.
    #[error("{field} {}: no PEM {what} in the file{}", path.display(), cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    NotPem {
        /// The field naming it.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// `certificate` or `private key`.
        what: &'static str,
        /// The PEM parser's reason, when it found a malformed block.
        #[source]
        cause: Option<rustls::pki_types::pem::Error>,
    },
    /// The key cannot be used, or does not belong to the certificate.
    #[error("server.tls_key {}: {reason} (certificate {})", key.display(), cert.display())]
    Key {
        /// The key file.
        key: PathBuf,
        /// The certificate file.
        cert: PathBuf,
        /// What is wrong, in words.
        reason: &'static str,
        /// rustls's reason (boxed: it is large, and rare).
        #[source]
        source: Box<rustls::Error>,
    },
    /// The server certificate cannot be parsed.
    #[error("server.tls_cert {}: not a valid X.509 certificate", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// The server certificate's validity has ended.
    #[error("server.tls_cert {}: the certificate expired {}", path.display(), crate::tls::validity::format_time(*not_after))]
    Expired {
        /// The file.
        path: PathBuf,
        /// When it ended.
        not_after: SystemTime,
    },
    /// The server certificate's validity has not begun.
    #[error("server.tls_cert {}: the certificate is not valid before {}", path.display(), crate::tls::validity::format_time(*not_before))]
    NotYetValid {
        /// The file.
        path: PathBuf,
        /// When it begins.
        not_before: SystemTime,
    },
    /// The client CA bundle cannot verify clients.
    #[error("server.tls_client_ca {}: {source}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// rustls's reason.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// rustls refused the configuration (no protocol version in common with the provider).
    #[error("cannot configure TLS: {0}")]
    Config(#[source] Box<rustls::Error>),
}
