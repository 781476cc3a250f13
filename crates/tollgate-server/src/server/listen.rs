//! Binding: the listeners `main` binds and the gRPC one `run` binds itself, with an accept
//! queue a flood does not fill.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::error::ServeError;

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

/// The gRPC listener: the one `given`, else `addr` bound here, else none.
pub(super) async fn bind_grpc(
    given: Option<TcpListener>,
    addr: Option<SocketAddr>,
) -> Result<Option<TcpListener>, ServeError> {
    match (given, addr) {
        (Some(listener), _) => Ok(Some(listener)),
        (None, Some(addr)) => listen(addr)
            .map(Some)
            .map_err(|source| ServeError::GrpcBind { addr, source }),
        (None, None) => Ok(None),
    }
}
