//! [`NamedClients`]: mTLS that also checks who the client is, for the gRPC listener's
//! `server.tls_client_names`.
//!
//! A client CA often signs certificates for many workloads (a mesh's CA, a company's); only
//! some of them should reach the rate limit service. The check runs inside the handshake, as
//! part of verifying the client's certificate, so a client with the wrong name is refused
//! there with a TLS alert, like one with no certificate, and never reaches HTTP/2.
//!
//! Names are compared whole (no wildcards: a list of allowed clients, not a hostname
//! pattern; host names without regard to case, as DNS does) with the certificate's DNS and URI subject alternative names (SPIFFE IDs are URI
//! names), or, for a certificate without them, with its subject's common name, which older
//! CAs still put names in (RFC 6125: a certificate with alternative names is who they say).

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
        let dns: Vec<&str> = cert.valid_dns_names().collect();
        let uris: Vec<&str> = cert.valid_uri_names().collect();
        carries(&self.names, &dns, &uris, || common_name(cert.subject()))
    }
}

/// Whether a certificate with these DNS and URI names (and this common name, read only when
/// it has neither: RFC 6125, a certificate that has them says who it is there) carries one of
/// `allowed`. DNS names and the common name are host names, which DNS compares without case
/// (RFC 4343: `Envoy.Edge.svc` is `envoy.edge.svc`); URI names are compared exactly (a
/// SPIFFE ID's path is case-sensitive, and its trust domain is lower case by definition).
fn carries<'a>(
    allowed: &[String],
    dns: &[&str],
    uris: &[&str],
    common_name: impl FnOnce() -> Option<&'a str>,
) -> bool {
    // A host name matches an allowed host name in any case, never an allowed URI (`scheme://`)
    // in another case: a common name written as a SPIFFE ID is compared exactly.
    let host = |name: &str| {
        allowed.iter().any(|n| {
            if n.contains("://") {
                n == name
            } else {
                n.eq_ignore_ascii_case(name)
            }
        })
    };
    if dns.is_empty() && uris.is_empty() {
        return common_name().is_some_and(host);
    }
    dns.iter().any(|name| host(name)) || uris.iter().any(|name| allowed.iter().any(|n| n == name))
}

/// The common name (OID 2.5.4.3) of a DER `Name`, read attribute by attribute: `None` unless
/// there is exactly one, and it is text. (It was found by searching the bytes for the OID,
/// so a CA-signed certificate whose organisation's value held those bytes and a name passed
/// as that name: an audit's `attacker.svc` reached the service as `envoy.edge.svc`.)
fn common_name(subject: &[u8]) -> Option<&str> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    // The Name's RDNs, with or without the SEQUENCE around them (RDNs are SETs, 0x31).
    let mut rdns = match element(subject) {
        Some((0x30, inner, [])) => inner,
        _ => subject,
    };
    let mut found = None;
    while !rdns.is_empty() {
        let (0x31, set, rest) = element(rdns)? else {
            return None;
        };
        rdns = rest;
        let mut attributes = set;
        while !attributes.is_empty() {
            let (0x30, attribute, rest) = element(attributes)? else {
                return None;
            };
            attributes = rest;
            let (0x06, oid, value) = element(attribute)? else {
                return None;
            };
            if oid != CN {
                continue;
            }
            // UTF8String, PrintableString, IA5String.
            let (tag, text, []) = element(value)? else {
                return None;
            };
            if !matches!(tag, 0x0C | 0x13 | 0x16) || found.is_some() {
                return None;
            }
            found = Some(std::str::from_utf8(text).ok()?);
        }
    }
    found
}

/// The DER element at the start of `der`: its tag, its contents and the bytes after it
/// (lengths up to 64 KiB, far past any name).
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81 => {
            let (&len, rest) = rest.split_first()?;
            (usize::from(len), rest)
        }
        0x82 => {
            let (len, rest) = rest.split_at_checked(2)?;
            (usize::from(u16::from_be_bytes([len[0], len[1]])), rest)
        }
        _ => return None,
    };
    let (contents, rest) = rest.split_at_checked(len)?;
    Some((tag, contents, rest))
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

#[cfg(test)]
mod tests {
    use super::{carries, common_name};

    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if contents.len() < 0x80 {
            out.push(u8::try_from(contents.len()).expect("short"));
        } else {
            out.push(0x81);
            out.push(u8::try_from(contents.len()).expect("under 256"));
        }
        out.extend_from_slice(contents);
        out
    }

    /// One RDN of one attribute: `oid` (contents) with a UTF8String `value`.
    fn rdn(oid: &[u8], value: &[u8]) -> Vec<u8> {
        let attribute = [tlv(0x06, oid), tlv(0x0C, value)].concat();
        tlv(0x31, &tlv(0x30, &attribute))
    }

    const O: [u8; 3] = [0x55, 0x04, 0x0A];
    const CN: [u8; 3] = [0x55, 0x04, 0x03];

    /// The audit's certificate: an organisation whose value is the bytes of a common name
    /// attribute naming `envoy.edge.svc`, before the real common name `attacker.svc`.
    #[test]
    fn a_name_inside_another_attribute_is_not_the_common_name() {
        let forged = [
            &[0x06, 0x03, 0x55, 0x04, 0x03, 0x0C, 0x0E][..],
            b"envoy.edge.svc",
        ]
        .concat();
        let rdns = [rdn(&O, &forged), rdn(&CN, b"attacker.svc")].concat();
        assert_eq!(common_name(&rdns), Some("attacker.svc"));
        assert_eq!(common_name(&tlv(0x30, &rdns)), Some("attacker.svc"));
    }

    #[test]
    fn one_text_common_name_or_none() {
        let plain = [rdn(&O, b"Example"), rdn(&CN, b"envoy.edge.svc")].concat();
        assert_eq!(common_name(&plain), Some("envoy.edge.svc"));
        assert_eq!(common_name(&rdn(&O, b"Example")), None, "no common name");
        let two = [rdn(&CN, b"envoy.edge.svc"), rdn(&CN, b"attacker.svc")].concat();
        assert_eq!(common_name(&two), None, "two common names");
        let truncated = &plain[..plain.len() - 3];
        assert_eq!(common_name(truncated), None);
        let long = "a".repeat(200);
        assert_eq!(common_name(&rdn(&CN, long.as_bytes())), Some(long.as_str()));
    }

    /// DNS names and common names are host names, compared without case; URI names (SPIFFE
    /// IDs) exactly; the common name counts only without alternative names.
    #[test]
    fn host_names_match_in_any_case_and_uris_exactly() {
        let allowed = [
            "envoy.edge.svc".to_owned(),
            "spiffe://td/ns/Edge".to_owned(),
        ];
        let no_cn = || None;
        assert!(carries(&allowed, &["Envoy.EDGE.svc"], &[], no_cn));
        assert!(!carries(&allowed, &["envoy.edge.svc.evil"], &[], no_cn));
        assert!(carries(&allowed, &[], &["spiffe://td/ns/Edge"], no_cn));
        assert!(!carries(&allowed, &[], &["spiffe://td/ns/edge"], no_cn));
        assert!(carries(&allowed, &[], &[], || Some("ENVOY.edge.svc")));
        assert!(!carries(&allowed, &["other.svc"], &[], || Some(
            "envoy.edge.svc"
        )));
        assert!(!carries(&allowed, &[], &[], no_cn));
        // A common name written as a URI is compared exactly with the allowed URIs.
        assert!(carries(&allowed, &[], &[], || Some("spiffe://td/ns/Edge")));
        assert!(!carries(&allowed, &[], &[], || Some("spiffe://td/ns/edge")));
    }
}
