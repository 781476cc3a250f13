//! The certificates chain to the CA they claim, name what they claim, and expire when they
//! claim: checked with `openssl`, a verifier that is not the code that made them.

use std::path::Path;
use std::process::Command;

use tollgate_testkit::TlsFiles;

fn openssl(args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (apt-get install openssl): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn verify(ca: &Path, cert: &Path) -> (bool, String) {
    openssl(&[
        "verify",
        "-CAfile",
        &ca.to_string_lossy(),
        &cert.to_string_lossy(),
    ])
}

#[test]
fn the_files_are_pem_and_the_keys_parse() {
    let tls = TlsFiles::new();
    for cert in [
        tls.ca(),
        tls.server_cert(),
        tls.client_cert(),
        tls.other_ca(),
        tls.other_client_cert(),
        tls.expired_cert(),
    ] {
        let text = std::fs::read_to_string(cert).expect("a certificate file");
        assert!(
            text.starts_with("-----BEGIN CERTIFICATE-----"),
            "{}: {text}",
            cert.display()
        );
    }
    for key in [
        tls.server_key(),
        tls.client_key(),
        tls.other_client_key(),
        tls.expired_key(),
    ] {
        let text = std::fs::read_to_string(key).expect("a key file");
        rcgen::KeyPair::from_pem(&text)
            .unwrap_or_else(|e| panic!("{}: not a private key: {e}", key.display()));
    }
}

#[test]
fn each_certificate_chains_to_its_ca_and_only_to_it() {
    let tls = TlsFiles::new();
    for cert in [tls.server_cert(), tls.client_cert()] {
        let (ok, out) = verify(tls.ca(), cert);
        assert!(ok, "{}: {out}", cert.display());
        let (ok, out) = verify(tls.other_ca(), cert);
        assert!(
            !ok,
            "{} verified against the other CA: {out}",
            cert.display()
        );
    }
    let (ok, out) = verify(tls.other_ca(), tls.other_client_cert());
    assert!(ok, "{out}");
    let (ok, out) = verify(tls.ca(), tls.other_client_cert());
    assert!(!ok, "the other CA's client certificate verified: {out}");

    let (ok, out) = verify(tls.ca(), tls.expired_cert());
    assert!(!ok && out.contains("expired"), "{out}");
}

#[test]
fn the_server_certificate_names_localhost_for_both_roles() {
    let tls = TlsFiles::new();
    let (ok, text) = openssl(&[
        "x509",
        "-noout",
        "-text",
        "-in",
        &tls.server_cert().to_string_lossy(),
    ]);
    assert!(ok, "{text}");
    for wanted in [
        "IP Address:127.0.0.1",
        "DNS:localhost",
        "TLS Web Server Authentication",
        "TLS Web Client Authentication",
    ] {
        assert!(text.contains(wanted), "no {wanted:?} in:\n{text}");
    }
    let (ok, text) = openssl(&[
        "x509",
        "-noout",
        "-checkend",
        "86400",
        "-in",
        &tls.server_cert().to_string_lossy(),
    ]);
    assert!(ok, "the server certificate expires within a day: {text}");
}
