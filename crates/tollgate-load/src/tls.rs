//! The gRPC mode's TLS: a rustls client configuration from [`ClientTls`] (the CA bundle, and a
//! client certificate for mTLS), offering `h2` by ALPN as Envoy does.

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{ClientTls, LoadError};

/// The client configuration for `tls`.
pub(crate) fn client_config(tls: &ClientTls) -> Result<Arc<ClientConfig>, LoadError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certificates("--cacert", &tls.ca)?);
    if added == 0 {
        return Err(bad("--cacert", &tls.ca, "no usable CA certificate"));
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("--cacert", &tls.ca, e))?
        .with_root_certificates(roots);
    let mut config = match &tls.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates("--cert", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("--key", key, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("--key", cert, e))?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, LoadError> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(what, path, e))?;
    if chain.is_empty() {
        return Err(bad(what, path, "no PEM certificate"));
    }
    Ok(chain)
}

fn bad(what: &'static str, path: &Path, reason: impl std::fmt::Display) -> LoadError {
    LoadError::TlsFile {
        what,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}
