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
        let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|cause| {
            let reason = match cause {
                rustls::Error::InconsistentKeys(_) => "the key does not match the certificate",
                _ => "the key cannot be used",
            };
            TlsError::Key {
                key: tls.key.clone(),
                cert: tls.cert.clone(),
                reason,
                cause: Box::new(cause),
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

/// The bytes of `path` (named by `field` in errors): a regular file of at most 2 MiB.
fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::file::read(path).map_err(|cause| TlsError::Read {
        field,
        path: path.to_owned(),
        cause,
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
    if encrypted(&bytes) {
        return Err(TlsError::EncryptedKey {
            path: path.to_owned(),
        });
    }
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

/// Whether the PEM `bytes` hold an encrypted private key: PKCS#8's `ENCRYPTED PRIVATE KEY`
/// (which the PEM reader skips, as a kind it does not know) or OpenSSL's traditional
/// encryption (`Proc-Type: 4,ENCRYPTED` headers, which it cannot decode).
fn encrypted(bytes: &[u8]) -> bool {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    has(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || has(b"Proc-Type: 4,ENCRYPTED")
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
        .map_err(|cause| TlsError::ClientCa {
            path: path.to_owned(),
            cause,
        })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tollgate_testkit::TlsFiles;

    use super::*;

    /// The error loading `cert` and `key`, as the binary prints it (`{:#}`, the message and
    /// its causes), checked to say each cause once: the message already holds it.
    fn refused(cert: &Path, key: &Path) -> String {
        let tls = ServerTls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            client_ca: None,
            client_names: Vec::new(),
        };
        let e = TlsConfigs::load(&tls, SystemTime::now()).expect_err("refused");
        let text = e.to_string();
        assert_eq!(
            format!("{:#}", anyhow::Error::new(e)),
            text,
            "a cause printed twice"
        );
        text
    }

    fn write(tls: &TlsFiles, name: &str, text: &str) -> PathBuf {
        let path = tls.dir().join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// A truncated PEM file is said to be truncated, with its missing line as text (not as
    /// a list of byte values); a key that is not the certificate's, and a file that is not
    /// PEM, say why once.
    #[test]
    fn malformed_files_are_described_in_words_once() {
        let tls = TlsFiles::new();
        let pem = std::fs::read_to_string(tls.server_cert()).expect("read");
        let truncated = write(&tls, "truncated.crt", &pem[..300]);
        let e = refused(&truncated, tls.server_key());
        assert!(
            e.ends_with(
                "truncated.crt: no PEM certificate in the file (no `-----END CERTIFICATE-----` line: the file is truncated)"
            ),
            "{e}"
        );
        let e = refused(tls.server_cert(), tls.client_key());
        assert!(e.contains("the key does not match the certificate"), "{e}");
        let garbage = write(&tls, "garbage.crt", "garbage\n");
        let e = refused(&garbage, tls.server_key());
        assert!(
            e.ends_with("garbage.crt: no PEM certificate in the file"),
            "{e}"
        );
    }

    /// An encrypted key (PKCS#8's `ENCRYPTED PRIVATE KEY`, OpenSSL's `Proc-Type:
    /// 4,ENCRYPTED`) is refused as encrypted, not as "no PEM private key" or a base64 error.
    #[test]
    fn encrypted_keys_are_said_to_be_unsupported() {
        let tls = TlsFiles::new();
        let body = "MIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n";
        let pkcs8 = write(
            &tls,
            "enc8.key",
            &format!(
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{body}-----END ENCRYPTED PRIVATE KEY-----\n"
            ),
        );
        let sec1 = write(
            &tls,
            "enc.key",
            &format!(
                "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\n{body}-----END EC PRIVATE KEY-----\n"
            ),
        );
        for key in [pkcs8, sec1] {
            let e = refused(tls.server_cert(), &key);
            assert!(
                e.starts_with(&format!("server.tls_key {}: the private key is encrypted; encrypted keys are not supported", key.display())),
                "{e}"
            );
        }
    }
}
