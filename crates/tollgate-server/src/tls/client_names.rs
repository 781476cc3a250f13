//! [`NamedClients`]: mTLS that also checks who the client is, for the gRPC listener's
//! `server.tls_client_names`.
//!
//! A client CA often signs certificates for many workloads (a mesh's CA, a company's); only
//! some of them should reach the rate limit service. The check runs inside the handshake, as
//! part of verifying the client's certificate, so a client with the wrong name is refused
//! there with a TLS alert, like one with no certificate, and never reaches HTTP/2.
//!
//! Names are compared exactly (no wildcards: a list of allowed clients, not a hostname
//! match) with the certificate's DNS and URI subject alternative names (SPIFFE IDs are URI
//! names) and with its subject's common name, which older CAs still put names in.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// A client verifier (the CA's) that also requires one of `names`.
#[derive(Debug)]
pub(crate) struct NamedClients {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<String>,
}

impl NamedClients {
    pub(crate) fn new(inner: Arc<dyn ClientCertVerifier>, names: Vec<String>) -> NamedClients {
        NamedClients { inner, names }
    }

    /// Whether the certificate carries one of the allowed names.
    fn allowed(&self, end_entity: &CertificateDer<'_>) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(end_entity) else {
            return false;
        };
        let allowed = |name: &str| self.names.iter().any(|n| n == name);
        cert.valid_dns_names().any(allowed)
            || cert.valid_uri_names().any(allowed)
            || common_name(cert.subject()).is_some_and(allowed)
    }
}

/// The first common name (OID 2.5.4.3) in a DER `Name`, when it is text.
fn common_name(subject: &[u8]) -> Option<&str> {
    const CN: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
    let at = subject.windows(CN.len()).position(|w| w == CN)? + CN.len();
    let (&tag, rest) = subject.get(at..)?.split_first()?;
    // UTF8String, PrintableString, IA5String: short lengths only (a name fits in 127 bytes).
    if !matches!(tag, 0x0C | 0x13 | 0x16) {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    std::str::from_utf8(rest.get(..usize::from(len).min(0x7f))?).ok()
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if !self.allowed(end_entity) {
            tracing::debug!("gRPC client certificate refused: none of server.tls_client_names");
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
