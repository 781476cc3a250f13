//! Binding: the listeners `main` binds and the gRPC one `run` binds itself, with an accept
//! queue a flood does not fill; a `unix:` address becomes a Unix socket with `unix_mode`.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::error::ServeError;
use crate::config::ListenAddress;
use crate::connection::{Listener, bind_unix};

/// The accept queue asked of the kernel for each listener ([`listen`]), which caps it at
/// `net.core.somaxconn` (4096 by default since Linux 5.4).
///
/// Deep enough that a flood of sockets over `max_connections` does not fill it: once it is
/// full, the kernel drops new clients' SYNs, and a client whose SYN is dropped tries again only
/// after 1 s (then 3 s). With 128 (the standard library's, which tokio's `bind` uses too), a
/// 6 000-socket flood against the default cap of 4096 filled it in bursts: a new client now
/// and then waited a second or more. Queued connections cost the process nothing until they
/// are accepted.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` with an accept queue of [`LISTEN_BACKLOG`] (what `main` binds,
/// and `run` for `server.grpc`).
///
/// # Errors
/// When the address cannot be bound (taken, not local, not permitted).
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As the standard library's `bind` does: a restarted service rebinds at once, even with
    // its previous connections still in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A listener on `addr`: TCP ([`listen`]), or a Unix socket of file mode `unix_mode`
/// (removed when the listener is dropped; one left by a process that died is replaced).
///
/// # Errors
/// When the address cannot be bound, or a live socket or another file is at the path.
pub fn bind(addr: &ListenAddress, unix_mode: u32) -> std::io::Result<Listener> {
    match addr {
        ListenAddress::Tcp(addr) => listen(*addr).map(Listener::Tcp),
        ListenAddress::Unix(path) => bind_unix(path, unix_mode),
    }
}

/// The gRPC listener: the one `given`, else `addr` bound here, else none.
pub(super) fn bind_grpc(
    given: Option<Listener>,
    addr: Option<&ListenAddress>,
    unix_mode: u32,
) -> Result<Option<Listener>, ServeError> {
    match (given, addr) {
        (Some(listener), _) => Ok(Some(listener)),
        (None, Some(addr)) => {
            bind(addr, unix_mode)
                .map(Some)
                .map_err(|source| ServeError::GrpcBind {
                    addr: addr.clone(),
                    source,
                })
        }
        (None, None) => Ok(None),
    }
}
