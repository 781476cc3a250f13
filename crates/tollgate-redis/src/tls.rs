//! TLS towards Redis: which certificates to trust and to present, and how a TLS failure is
//! told apart from an unreachable server.
//!
//! Managed Redis (ElastiCache, Azure Cache, Memorystore, Upstash, Redis Cloud) speaks TLS, so
//! `rediss://` must work out of the box: with no CA given, the system's roots are trusted
//! (rustls with ring, no OpenSSL). A private CA (`tls_ca`) replaces them, and a client
//! certificate answers servers that run `tls-auth-clients yes`.
//!
//! **A TLS failure is not transient.** An unknown CA, an expired certificate or a refused
//! client certificate does not get better by retrying, so it is reported as
//! [`StoreError::Tls`] with rustls's own reason, and the service refuses to start with it,
//! instead of serving by policy while it retries a connection that can never work.

use std::fmt;
use std::sync::Arc;

use redis::{ClientTlsConfig, RedisError, TlsCertificates};
use tollgate::StoreError;

/// What a TLS connection to Redis trusts and presents.
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// PEM bundle of the CAs to trust instead of the system's roots.
    pub(crate) ca: Option<Vec<u8>>,
    /// PEM client certificate (chain) and its key, for `tls-auth-clients yes`.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept any certificate (no verification at all).
    pub(crate) insecure: bool,
}

impl TlsOptions {
    /// Whether any TLS option was set (then the URL must be `rediss://`).
    pub(crate) fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some() || self.insecure
    }

    /// The certificates for the `redis` crate, when a CA or a client certificate is given
    /// (`None`: the system's roots, no client certificate).
    pub(crate) fn certificates(&self) -> Option<TlsCertificates> {
        if self.ca.is_none() && self.client.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        })
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|_| "<pem>"))
            .field("client_cert", &self.client.as_ref().map(|_| "<pem>"))
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// Makes ring the process's rustls crypto provider unless one is installed already: the
/// `redis` crate's insecure mode asks for the process default, and a binary that links
/// another provider too would otherwise have none chosen.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The rustls error inside `err`, if the call failed in TLS (a certificate refused on either
/// side, an alert from the server).
pub(crate) fn rustls_cause(err: &RedisError) -> Option<&rustls::Error> {
    // The `redis` crate keeps an I/O failure as an `Arc<dyn Error>` whose own `source`
    // skips the io::Error's payload, so the chain is walked by type.
    let source = std::error::Error::source(err)?;
    let io = match source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
        Some(arc) => arc.downcast_ref::<std::io::Error>()?,
        None => source.downcast_ref::<std::io::Error>()?,
    };
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

/// [`StoreError::Tls`] when `err` failed in TLS, with rustls's reason explained.
pub(crate) fn tls_failure(err: &RedisError) -> Option<StoreError> {
    rustls_cause(err).map(|cause| StoreError::Tls(explain(cause).into()))
}

/// rustls's reason in words an operator acts on.
fn explain(cause: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let hint = match cause {
        E::InvalidCertificate(C::UnknownIssuer) => {
            "the server's certificate is not signed by a trusted CA (set tls_ca to the CA that signed it)"
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the server's certificate has expired"
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the server's certificate is not valid yet (check the clocks)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate does not name the host in the URL"
        }
        E::AlertReceived(A::CertificateRequired | A::HandshakeFailure) => {
            "the server requires a client certificate (set tls_cert and tls_key)"
        }
        E::AlertReceived(A::UnknownCA | A::BadCertificate | A::CertificateUnknown) => {
            "the server refused our client certificate (not signed by a CA it trusts)"
        }
        E::AlertReceived(A::CertificateExpired) => {
            "the server refused our client certificate: it has expired"
        }
        _ => "",
    };
    if hint.is_empty() {
        cause.to_string()
    } else {
        format!("{hint} ({cause})")
    }
}
