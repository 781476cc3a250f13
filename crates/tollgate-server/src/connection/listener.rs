//! [`CappedListener`]: a TCP listener that holds at most `max_connections` connections open.
//!
//! The permit is taken before `accept()`: while the cap is reached, new connections stay in
//! the kernel's accept queue (the listen backlog), costing us no file descriptor and no
//! memory, and are accepted in order as connections close. Refusing them instead would turn a
//! short burst into errors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A listener with a cap on open connections.
#[derive(Debug)]
pub(crate) struct CappedListener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
}

impl CappedListener {
    pub(crate) fn new(listener: TcpListener, max_connections: usize) -> CappedListener {
        CappedListener {
            listener,
            permits: Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))),
        }
    }

    /// The next connection, once one of the `max_connections` permits is free; the permit is
    /// held by the connection and freed when it closes.
    pub(crate) async fn accept(
        &self,
    ) -> std::io::Result<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (stream, peer) = self.listener.accept().await?;
        no_delay(&stream, peer);
        Ok((stream, peer, permit))
    }

    /// The connections the kernel has already queued, taken without waiting, as far as
    /// permits allow, and the listener closed: on shutdown, their requests were sent before
    /// the listener closed.
    ///
    /// The accept queue is read with the socket's own non-blocking `accept`, not tokio's
    /// `poll_accept`: the latter trusts tokio's cached readiness, which can still say "not
    /// ready" for connections the kernel queued a moment ago (their event not yet seen by the
    /// driver), and those clients would be reset with their request unanswered.
    pub(crate) fn backlog(self) -> Vec<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        let mut queued = Vec::new();
        let listener = match self.listener.into_std() {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(cause = %e, "could not take the accept queue on shutdown");
                return queued;
            }
        };
        if let Err(e) = listener.set_nonblocking(true) {
            tracing::warn!(cause = %e, "could not take the accept queue on shutdown");
            return queued;
        }
        while let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue;
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "accept on shutdown failed; queued clients dropped");
                    break;
                }
            };
            let stream = stream
                .set_nonblocking(true)
                .and_then(|()| TcpStream::from_std(stream));
            match stream {
                Ok(stream) => {
                    no_delay(&stream, peer);
                    queued.push((stream, peer, permit));
                }
                Err(e) => tracing::debug!(cause = %e, "queued connection dropped on shutdown"),
            }
        }
        queued
    }
}

/// After a failed `accept()`: a moment's pause when the process is out of file descriptors
/// (or memory), so the loop does not spin; none for errors of one connection.
pub(crate) async fn pause_after(e: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::warn!(cause = %e, "accept failed; pausing");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Turns Nagle's algorithm off for an accepted connection. A reply is written as soon as it is
/// decided, and an HTTP/2 reply is several frames (headers, message, trailers), often several
/// writes: with Nagle on, a write made while an earlier one is still unacknowledged waits for
/// the peer's delayed ACK, up to 40 ms on Linux, which put a 40 ms tail on gRPC calls.
fn no_delay(stream: &TcpStream, peer: SocketAddr) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, cause = %e, "could not set TCP_NODELAY");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections queued by the kernel are taken even when tokio's driver has not yet seen
    /// them (here it never ran: nothing awaited since they connected).
    #[tokio::test]
    async fn the_backlog_is_read_from_the_kernel_not_from_cached_readiness() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let capped = CappedListener::new(listener, 100);
        let clients: Vec<std::net::TcpStream> = (0..5)
            .map(|_| std::net::TcpStream::connect(addr).expect("connect"))
            .collect();
        let queued = capped.backlog();
        assert_eq!(queued.len(), clients.len());
        for (stream, peer, _) in &queued {
            assert!(stream.nodelay().expect("nodelay"), "Nagle on for {peer}");
        }
    }

    /// Every accepted connection has Nagle's algorithm off (TCP_NODELAY): with it on, the
    /// frames of an HTTP/2 reply written after an unacknowledged one waited for a delayed ACK.
    #[tokio::test]
    async fn accepted_connections_send_without_delay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let capped = CappedListener::new(listener, 100);
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (stream, peer, _permit) = capped.accept().await.expect("accept");
        assert!(stream.nodelay().expect("nodelay"), "Nagle on for {peer}");
    }

    /// The cap holds on shutdown too: what is over it stays queued (and is reset on close).
    #[tokio::test]
    async fn the_backlog_is_taken_as_far_as_permits_allow() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let capped = CappedListener::new(listener, 3);
        let _clients: Vec<std::net::TcpStream> = (0..5)
            .map(|_| std::net::TcpStream::connect(addr).expect("connect"))
            .collect();
        assert_eq!(capped.backlog().len(), 3);
    }
}
