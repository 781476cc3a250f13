//! [`TlsError`]: why the listeners' certificate, key or client CA cannot be used, naming the
//! file and the cause.
//!
//! The cause is part of the message (the reloader logs the message alone), so it is not also
//! the error's `source`: a report that prints the chain (`{:#}`) would print it twice.

use std::path::PathBuf;
use std::time::SystemTime;

/// A certificate, key or CA file that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read (missing, unreadable, a directory).
    #[error("{field} {}: cannot read the file: {cause}", path.display())]
    Read {
        /// `server.tls_cert`, `server.tls_key` or `server.tls_client_ca`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (not a regular file, larger than 2 MiB, or the I/O error).
        cause: std::io::Error,
    },
    /// The file is not PEM, or holds no block of the kind expected.
    #[error("{field} {}: no PEM {what} in the file{}", path.display(), cause.as_ref().map(|c| format!(" ({})", pem_cause(c))).unwrap_or_default())]
    NotPem {
        /// The field naming it.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// `certificate` or `private key`.
        what: &'static str,
        /// The PEM parser's reason, when it found a malformed block.
        cause: Option<rustls::pki_types::pem::Error>,
    },
    /// The private key is encrypted (`ENCRYPTED PRIVATE KEY`, or OpenSSL's `Proc-Type:
    /// 4,ENCRYPTED`): there is no passphrase to decrypt it with.
    #[error("server.tls_key {}: the private key is encrypted; encrypted keys are not supported (decrypt it: `openssl pkey -in key.pem -out plain.pem`)", path.display())]
    EncryptedKey {
        /// The key file.
        path: PathBuf,
    },
    /// The key cannot be used, or does not belong to the certificate.
    #[error("server.tls_key {}: {reason} (certificate {}): {cause}", key.display(), cert.display())]
    Key {
        /// The key file.
        key: PathBuf,
        /// The certificate file.
        cert: PathBuf,
        /// What is wrong, in words.
        reason: &'static str,
        /// rustls's reason (boxed: it is large, and rare).
        cause: Box<rustls::Error>,
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
    #[error("server.tls_client_ca {}: {cause}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// rustls's reason.
        cause: rustls::server::VerifierBuilderError,
    },
    /// rustls refused the configuration (no protocol version in common with the provider).
    #[error("cannot configure TLS: {0}")]
    Config(Box<rustls::Error>),
}

/// The PEM parser's reason in words, with the lines it quotes as text (its own message shows
/// them as lists of byte values).
fn pem_cause(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;

    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    match e {
        // `end_marker` is the label (`CERTIFICATE`).
        Error::MissingSectionEnd { end_marker } => format!(
            "no `-----END {}-----` line: the file is truncated",
            text(end_marker)
        ),
        Error::IllegalSectionStart { line } => {
            format!("malformed BEGIN line `{}`", text(line))
        }
        other => other.to_string(),
    }
}
