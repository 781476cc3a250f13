//! [`TlsConfigs`]: the files of [`ServerTls`] read and checked, and the two rustls server
//! configurations built from them, one per listener.
//!
//! Everything that can be wrong with the files is found here, before anything is served or
//! swapped: an unreadable file, no PEM, a key that is not the certificate's, a certificate
//! that has expired or is not yet valid (rustls would serve it; every client would then fail
//! its handshake), a CA bundle with no usable certificate.
//!
//! The two configurations share the certificate and the client CA and differ in what each
//! listener speaks: `http/1.1` by ALPN on the HTTP API, `h2` on the gRPC port (what Envoy
//! asks for), whose client verifier also checks `tls_client_names`.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};

use super::TlsError;
use super::client_names::NamedClients;
use super::validity::Validity;
use crate::config::ServerTls;

/// The rustls configurations of the two listeners, from one certificate.
#[derive(Debug)]
pub(crate) struct TlsConfigs {
    pub(crate) http: Arc<ServerConfig>,
    pub(crate) grpc: Arc<ServerConfig>,
    /// The served certificate's validity.
    pub(crate) validity: Validity,
}

impl TlsConfigs {
    /// Reads and checks the files of `tls` (at time `now`) and builds both configurations.
    pub(crate) fn load(tls: &ServerTls, now: SystemTime) -> Result<TlsConfigs, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates("server.tls_cert", &tls.cert)?;
        let validity = chain
            .first()
            .and_then(|cert| Validity::of(cert))
            .ok_or_else(|| TlsError::Malformed {
                path: tls.cert.clone(),
            })?;
        if now > validity.not_after {
            return Err(TlsError::Expired {
                path: tls.cert.clone(),
                not_after: validity.not_after,
            });
        }
        if now < validity.not_before {
            return Err(TlsError::NotYetValid {
                path: tls.cert.clone(),
                not_before: validity.not_before,
            });
        }
        let key = private_key(&tls.key)?;
        let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|source| {
            let reason = match source {
                rustls::Error::InconsistentKeys(_) => "the key does not match the certificate",
                _ => "the key cannot be used",
            };
            TlsError::Key {
                key: tls.key.clone(),
                cert: tls.cert.clone(),
                reason,
                source: Box::new(source),
            }
        })?;
        let certified = Arc::new(certified);
        let verifier = match &tls.client_ca {
            Some(ca) => Some(client_verifier(ca, &provider)?),
            None => None,
        };
        let grpc_verifier = match &verifier {
            Some(v) if !tls.client_names.is_empty() => Some(Arc::new(NamedClients::new(
                Arc::clone(v),
                tls.client_names.clone(),
            ))
                as Arc<dyn ClientCertVerifier>),
            other => other.clone(),
        };
        Ok(TlsConfigs {
            http: server_config(&provider, verifier, &certified, b"http/1.1")?,
            grpc: server_config(&provider, grpc_verifier, &certified, b"h2")?,
            validity,
        })
    }
}

/// A listener's configuration: the certificate, the client verifier (none: no client
/// certificate asked for), and the one protocol offered by ALPN.
fn server_config(
    provider: &Arc<CryptoProvider>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    certified: &Arc<CertifiedKey>,
    alpn: &[u8],
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(Box::new(e)))?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(Arc::clone(certified))));
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// The bytes of `path` (named by `field` in errors).
fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        field,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate in the PEM file at `path`; at least one.
fn certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(field, path)?;
    let not_pem = |cause| TlsError::NotPem {
        field,
        path: path.to_owned(),
        what: "certificate",
        cause,
    };
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(Some(e)))?;
    if chain.is_empty() {
        return Err(not_pem(None));
    }
    Ok(chain)
}

/// The private key in the PEM file at `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let field = "server.tls_key";
    let bytes = read(field, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::NotPem {
        field,
        path: path.to_owned(),
        what: "private key",
        cause: match e {
            rustls::pki_types::pem::Error::NoItemsFound => None,
            other => Some(other),
        },
    })
}

/// A verifier requiring a client certificate that chains to a CA of the bundle at `path`.
fn client_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certificates("server.tls_client_ca", path)?);
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|source| TlsError::ClientCa {
            path: path.to_owned(),
            source,
        })
}
