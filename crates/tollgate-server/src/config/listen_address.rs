//! [`ListenAddress`]: where a listener listens, a TCP address or a Unix socket's path.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `server.http` or `server.grpc`: `host:port`, or `unix:/path/to.sock`.
///
/// A Unix socket is created with `server.unix_mode`, removed on shutdown, and always served in
/// plaintext: who may connect is decided by its file mode, not by certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket's path (`unix:` in the config).
    Unix(PathBuf),
}

impl ListenAddress {
    /// The TCP address, if it is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ListenAddress::Tcp(addr) => Some(*addr),
            ListenAddress::Unix(_) => None,
        }
    }
}

/// As written in the config: `127.0.0.1:8080`, `unix:/run/tollgate.sock`.
impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Tcp(addr) => write!(f, "{addr}"),
            ListenAddress::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl From<SocketAddr> for ListenAddress {
    fn from(addr: SocketAddr) -> ListenAddress {
        ListenAddress::Tcp(addr)
    }
}
