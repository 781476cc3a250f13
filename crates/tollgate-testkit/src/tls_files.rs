//! Certificates for the TLS tests, made at run time: a test CA, a server and a client
//! certificate it signed, a second server certificate (a rotation's), a client certificate
//! with a name (`envoy.tollgate.test`), an expired server certificate, and a second CA that
//! signed nothing.
//!
//! Made fresh per test rather than checked in, so that nothing in the repository expires, no
//! private key is committed, and no test depends on OpenSSL: rcgen (on ring) signs them, and
//! they are written as PEM files because that is what `redis-server --tls-*-file`,
//! `redis-cli --cacert` and the clients under test read. The files live in a temporary
//! directory the value owns, removed on drop.
//!
//! Every server certificate carries both extended key usages, serverAuth and clientAuth:
//! Redis presents its `tls-cert-file` as the client certificate too when it connects to
//! another node (`--tls-replication yes`, `--tls-cluster yes`, a sentinel's links), and
//! OpenSSL refuses a client certificate whose key usage names only the server role.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// One day, the unit of every validity period here.
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A test PKI written as PEM files in a temporary directory (removed on drop).
pub struct TlsFiles {
    dir: TempDir,
    /// The test CA, for the certificates made later ([`TlsFiles::server_pair_valid_from`]).
    ca_issuer: Issuer<'static, KeyPair>,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    other_ca: PathBuf,
    other_client_cert: PathBuf,
    other_client_key: PathBuf,
    expired_cert: PathBuf,
    expired_key: PathBuf,
    second_server_cert: PathBuf,
    second_server_key: PathBuf,
    named_client_cert: PathBuf,
    named_client_key: PathBuf,
}

impl TlsFiles {
    /// Makes the CAs, keys and certificates and writes them.
    ///
    /// # Panics
    /// When a key cannot be generated, a certificate cannot be signed or a file cannot be
    /// written.
    pub fn new() -> TlsFiles {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-tls-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let now = now();
        let write = |name: &str, pem: &str| -> PathBuf {
            let path = dir.path().join(name);
            std::fs::write(&path, pem)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            path
        };

        let (ca_params, ca_key) = ca("tollgate test CA", now);
        let ca_pem = ca_params
            .self_signed(&ca_key)
            .unwrap_or_else(|e| panic!("cannot self-sign the test CA: {e}"))
            .pem();
        let ca_issuer = Issuer::new(ca_params, ca_key);

        let (other_params, other_key) = ca("tollgate unrelated CA", now);
        let other_pem = other_params
            .self_signed(&other_key)
            .unwrap_or_else(|e| panic!("cannot self-sign the unrelated CA: {e}"))
            .pem();
        let other_issuer = Issuer::new(other_params, other_key);

        let server = leaf(&ca_issuer, Leaf::Server, now - DAY, now + 365 * DAY);
        let client = leaf(&ca_issuer, Leaf::Client, now - DAY, now + 365 * DAY);
        let other_client = leaf(&other_issuer, Leaf::Client, now - DAY, now + 365 * DAY);
        let expired = leaf(&ca_issuer, Leaf::Server, now - 730 * DAY, now - 365 * DAY);
        let second = leaf(&ca_issuer, Leaf::Server, now - DAY, now + 365 * DAY);
        let named = leaf(&ca_issuer, Leaf::NamedClient, now - DAY, now + 365 * DAY);

        TlsFiles {
            ca: write("ca.crt", &ca_pem),
            server_cert: write("server.crt", &server.0),
            server_key: write("server.key", &server.1),
            client_cert: write("client.crt", &client.0),
            client_key: write("client.key", &client.1),
            other_ca: write("other-ca.crt", &other_pem),
            other_client_cert: write("other-client.crt", &other_client.0),
            other_client_key: write("other-client.key", &other_client.1),
            expired_cert: write("expired.crt", &expired.0),
            expired_key: write("expired.key", &expired.1),
            second_server_cert: write("second-server.crt", &second.0),
            second_server_key: write("second-server.key", &second.1),
            named_client_cert: write("named-client.crt", &named.0),
            named_client_key: write("named-client.key", &named.1),
            ca_issuer,
            dir,
        }
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The test CA's certificate (PEM): what clients trust.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// The server certificate (PEM), signed by [`TlsFiles::ca`], for `127.0.0.1` and
    /// `localhost`, valid from yesterday for a year, usable for serverAuth and clientAuth.
    pub fn server_cert(&self) -> &Path {
        &self.server_cert
    }

    /// The server certificate's private key (PEM, PKCS#8, ECDSA P-256).
    pub fn server_key(&self) -> &Path {
        &self.server_key
    }

    /// A client certificate (PEM) signed by [`TlsFiles::ca`], clientAuth only: what a client
    /// presents to a server started with `auth_clients`.
    pub fn client_cert(&self) -> &Path {
        &self.client_cert
    }

    /// The client certificate's private key (PEM, PKCS#8).
    pub fn client_key(&self) -> &Path {
        &self.client_key
    }

    /// A second CA's certificate (PEM) that signed none of the server certificates: a client
    /// trusting only it must refuse every server here ("wrong CA").
    pub fn other_ca(&self) -> &Path {
        &self.other_ca
    }

    /// A client certificate (PEM) signed by [`TlsFiles::other_ca`]: a server that
    /// authenticates clients against [`TlsFiles::ca`] must refuse it.
    pub fn other_client_cert(&self) -> &Path {
        &self.other_client_cert
    }

    /// The private key of [`TlsFiles::other_client_cert`] (PEM, PKCS#8).
    pub fn other_client_key(&self) -> &Path {
        &self.other_client_key
    }

    /// A server certificate (PEM) from the real CA, same names as
    /// [`TlsFiles::server_cert`], whose validity ended a year ago (it began two years ago).
    pub fn expired_cert(&self) -> &Path {
        &self.expired_cert
    }

    /// The expired certificate's private key (PEM, PKCS#8).
    pub fn expired_key(&self) -> &Path {
        &self.expired_key
    }

    /// A second server certificate like [`TlsFiles::server_cert`] (same CA, names and
    /// validity, its own key): what a rotation replaces the first with.
    pub fn second_server_cert(&self) -> &Path {
        &self.second_server_cert
    }

    /// The private key of [`TlsFiles::second_server_cert`] (PEM, PKCS#8).
    pub fn second_server_key(&self) -> &Path {
        &self.second_server_key
    }

    /// A client certificate signed by [`TlsFiles::ca`] whose subject alternative names are
    /// the DNS name `envoy.tollgate.test` and the URI `spiffe://tollgate.test/envoy`.
    pub fn named_client_cert(&self) -> &Path {
        &self.named_client_cert
    }

    /// The private key of [`TlsFiles::named_client_cert`] (PEM, PKCS#8).
    pub fn named_client_key(&self) -> &Path {
        &self.named_client_key
    }
}

impl TlsFiles {
    /// A new server certificate (as [`TlsFiles::server_cert`]: signed by [`TlsFiles::ca`],
    /// for `127.0.0.1` and `localhost`) valid from `not_before` (to the second, as X.509
    /// keeps it) for a year, and its key, written as `<name>.crt` and `<name>.key` in
    /// [`TlsFiles::dir`]: a certificate not valid yet, for instance.
    ///
    /// # Panics
    /// When `not_before` is before 1970, or a key or file cannot be made.
    pub fn server_pair_valid_from(&self, name: &str, not_before: SystemTime) -> (PathBuf, PathBuf) {
        let from = not_before
            .duration_since(UNIX_EPOCH)
            .unwrap_or_else(|e| panic!("before 1970: {e}"));
        let (cert, key) = leaf(&self.ca_issuer, Leaf::Server, from, from + 365 * DAY);
        let write = |file: String, pem: &str| -> PathBuf {
            let path = self.dir.path().join(file);
            std::fs::write(&path, pem)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            path
        };
        (
            write(format!("{name}.crt"), &cert),
            write(format!("{name}.key"), &key),
        )
    }
}

impl Default for TlsFiles {
    /// [`TlsFiles::new`].
    fn default() -> TlsFiles {
        TlsFiles::new()
    }
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// What a leaf certificate is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaf {
    /// Names `127.0.0.1` and `localhost`; serverAuth and clientAuth.
    Server,
    /// No names; clientAuth.
    Client,
    /// `envoy.tollgate.test` and `spiffe://tollgate.test/envoy`; clientAuth.
    NamedClient,
}

/// The time now, since the Unix epoch. Times stay `Duration`s since the epoch until they are
/// set on a certificate (`epoch() + t`), which spares a direct dependency on the `time` crate.
fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_else(|e| panic!("the clock is before 1970: {e}"))
}

/// A CA's parameters and key, valid from three years ago (before the expired certificate it
/// signs began) until a year from now.
fn ca(name: &str, now: Duration) -> (CertificateParams, KeyPair) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("cannot generate a CA key: {e}"));
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + (now - 3 * 365 * DAY);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + (now + 365 * DAY);
    (params, key)
}

/// A leaf certificate signed by `issuer`, valid from `not_before` to `not_after` (since the
/// epoch): its PEM and its key's PEM.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    kind: Leaf,
    not_before: Duration,
    not_after: Duration,
) -> (String, String) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("cannot generate a key: {e}"));
    let names = match kind {
        Leaf::Server => vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
        Leaf::Client => Vec::new(),
        Leaf::NamedClient => vec!["envoy.tollgate.test".to_owned()],
    };
    let mut params = CertificateParams::new(names)
        .unwrap_or_else(|e| panic!("invalid subject alternative names: {e}"));
    if kind == Leaf::NamedClient {
        let uri = "spiffe://tollgate.test/envoy"
            .try_into()
            .unwrap_or_else(|e| panic!("invalid URI name: {e}"));
        params.subject_alt_names.push(rcgen::SanType::URI(uri));
    }
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        match kind {
            Leaf::Server => "localhost",
            Leaf::Client | Leaf::NamedClient => "tollgate test client",
        },
    );
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = match kind {
        Leaf::Server => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        Leaf::Client | Leaf::NamedClient => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    params.use_authority_key_identifier_extension = true;
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + not_before;
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + not_after;
    let cert = params
        .signed_by(&key, issuer)
        .unwrap_or_else(|e| panic!("cannot sign a test certificate: {e}"));
    (cert.pem(), key.serialize_pem())
}
