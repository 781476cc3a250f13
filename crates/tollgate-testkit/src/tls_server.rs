//! How [`RedisServer::start_tls`](crate::RedisServer::start_tls) serves TLS: whether it asks
//! clients for a certificate, and whether it presents the expired one. The two knobs the
//! TLS tests turn; everything else (the CA, the names) is fixed by [`TlsFiles`].

use crate::TlsFiles;

/// Options of a TLS server. The default: no client certificate asked, the valid server
/// certificate presented.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsServer {
    /// Require a client certificate signed by [`TlsFiles::ca`] (`--tls-auth-clients yes`).
    /// Over TLS 1.3 a client without one sees the connection closed, not a handshake error.
    pub auth_clients: bool,
    /// Present [`TlsFiles::expired_cert`] instead of [`TlsFiles::server_cert`].
    pub expired_cert: bool,
}

impl TlsServer {
    /// The `redis-server` arguments: listen TLS on `tls_port` with these files.
    pub(crate) fn args(&self, tls: &TlsFiles, tls_port: u16) -> Vec<String> {
        let (cert, key) = if self.expired_cert {
            (tls.expired_cert(), tls.expired_key())
        } else {
            (tls.server_cert(), tls.server_key())
        };
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path(cert),
            "--tls-key-file".to_owned(),
            path(key),
            "--tls-ca-cert-file".to_owned(),
            path(tls.ca()),
            "--tls-auth-clients".to_owned(),
            if self.auth_clients { "yes" } else { "no" }.to_owned(),
        ]
    }
}
