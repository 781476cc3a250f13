//! [`Listener`]: a bound listener, TCP or Unix; and [`bind_unix`], which creates a Unix
//! socket with its mode and removes it when the listener is dropped.
//!
//! A Unix socket's file outlives a process killed without cleanup; binding over it fails. So
//! a socket file left at the path is removed first, but only when nothing answers on it (a
//! second instance must not steal a running one's socket) and only if it is a socket (a
//! mistyped path must not delete a file).

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use super::socket::Socket;

/// The peer address given to the HTTP API for a Unix socket's clients: a Unix socket's peer
/// is on this host, and the API keys clients by address (`ConnectInfo`).
pub(crate) const UNIX_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener (served with TLS when `[server] tls_cert` is set).
    Tcp(TcpListener),
    /// A Unix socket, removed when this is dropped (always plaintext).
    Unix(UnixSocket),
}

/// A bound Unix socket and its file.
#[derive(Debug)]
pub struct UnixSocket {
    listener: UnixListener,
    _file: SocketFile,
}

/// Removes the socket's file on drop.
#[derive(Debug)]
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.0) {
            Ok(()) => tracing::debug!(path = %self.0.display(), "unix socket removed"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.0.display(), cause = %e, "cannot remove the unix socket")
            }
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Listener {
        Listener::Tcp(listener)
    }
}

impl Listener {
    /// Where it listens, as the config writes it (`127.0.0.1:8080`, `unix:/run/t.sock`).
    ///
    /// # Errors
    /// When the socket's address cannot be read.
    pub fn local_addr(&self) -> io::Result<String> {
        match self {
            Listener::Tcp(l) => Ok(l.local_addr()?.to_string()),
            Listener::Unix(u) => {
                let addr = u.listener.local_addr()?;
                let path = addr.as_pathname().map(Path::display);
                Ok(format!(
                    "unix:{}",
                    path.map(|p| p.to_string()).unwrap_or_default()
                ))
            }
        }
    }

    /// Whether connections are TCP (and so get TLS when it is configured).
    pub(crate) fn is_tcp(&self) -> bool {
        matches!(self, Listener::Tcp(_))
    }

    pub(crate) async fn accept(&self) -> io::Result<(Socket, SocketAddr)> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(|(s, a)| (Socket::Tcp(s), a)),
            Listener::Unix(u) => u
                .listener
                .accept()
                .await
                .map(|(s, _)| (Socket::Unix(s), UNIX_PEER)),
        }
    }

    /// What the kernel has queued, taken without waiting, at most `max` (see
    /// `CappedListener::backlog`); the listener is closed after.
    pub(crate) fn take_queued(self, max: usize) -> Vec<(Socket, SocketAddr)> {
        let mut queued = Vec::new();
        let result = match self {
            Listener::Tcp(l) => l.into_std().and_then(|l| {
                l.set_nonblocking(true)?;
                drain_queue(&mut queued, max, || {
                    let (s, peer) = l.accept()?;
                    s.set_nonblocking(true)?;
                    Ok((Socket::Tcp(tokio::net::TcpStream::from_std(s)?), peer))
                })
            }),
            Listener::Unix(u) => u.listener.into_std().and_then(|l| {
                l.set_nonblocking(true)?;
                drain_queue(&mut queued, max, || {
                    let (s, _) = l.accept()?;
                    s.set_nonblocking(true)?;
                    Ok((
                        Socket::Unix(tokio::net::UnixStream::from_std(s)?),
                        UNIX_PEER,
                    ))
                })
            }),
        };
        if let Err(e) = result {
            tracing::warn!(cause = %e, "could not take the accept queue on shutdown");
        }
        queued
    }
}

/// Calls `accept` until it would block (or `max` are taken), skipping one connection's errors.
fn drain_queue(
    queued: &mut Vec<(Socket, SocketAddr)>,
    max: usize,
    mut accept: impl FnMut() -> io::Result<(Socket, SocketAddr)>,
) -> io::Result<()> {
    while queued.len() < max {
        match accept() {
            Ok(accepted) => queued.push(accepted),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                tracing::warn!(cause = %e, "accept on shutdown failed; queued clients dropped");
                break;
            }
        }
    }
    Ok(())
}

/// A Unix socket at `path` with file mode `mode`, removed when the listener is dropped.
///
/// # Errors
/// When a live socket or another kind of file is at `path`, or binding fails.
pub(crate) fn bind_unix(path: &Path, mode: u32) -> io::Result<Listener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is at this path",
            ));
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process is listening on this socket",
                ));
            }
            Err(_) => std::fs::remove_file(path)?,
        }
    }
    let listener = UnixListener::bind(path)?;
    let file = SocketFile(path.to_owned());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(Listener::Unix(UnixSocket {
        listener,
        _file: file,
    }))
}
