//! [`CappedListener`]: a TCP listener that holds at most `max_connections` connections open.
//!
//! The permit is taken before `accept()` while there is one: then new connections stay in
//! the kernel's accept queue (the listen backlog), costing us no file descriptor and no
//! memory, and are accepted in order as connections close. Refusing them instead would turn a
//! short burst into errors. When the cap is reached, the next connection is accepted anyway
//! (one file descriptor over the cap, at most) and room is made for it by shedding the
//! connection that has waited longest without a request ([`Shed`]); only when every
//! connection is busy with a request does it wait for one to close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::shed::Shed;

/// A listener with a cap on open connections.
#[derive(Debug)]
pub(crate) struct CappedListener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    shed: Arc<Shed>,
}

/// A connection's place under the cap: its permit (freed when the connection closes) and
/// the listener's [`Shed`], which the connection registers with.
#[derive(Debug)]
pub(crate) struct Slot {
    permit: OwnedSemaphorePermit,
    shed: Option<Arc<Shed>>,
}

impl Slot {
    pub(crate) fn into_parts(self) -> (OwnedSemaphorePermit, Option<Arc<Shed>>) {
        (self.permit, self.shed)
    }
}

/// A permit alone: a connection no listener may shed (tests).
impl From<OwnedSemaphorePermit> for Slot {
    fn from(permit: OwnedSemaphorePermit) -> Slot {
        Slot { permit, shed: None }
    }
}

impl CappedListener {
    /// `listener` capped at `max_connections`.
    pub(crate) fn new(listener: TcpListener, max_connections: usize) -> CappedListener {
        CappedListener {
            listener,
            permits: Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))),
            shed: Shed::new(),
        }
    }

    /// The next connection, with its slot under the cap (see the module docs for a full
    /// listener).
    pub(crate) async fn accept(&self) -> std::io::Result<(TcpStream, SocketAddr, Slot)> {
        let permit = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Full: wait for a permit, or for a new client, whichever comes first; a new
                // client gets the slot of the connection shed for it.
                let (stream, peer) = tokio::select! {
                    permit = Arc::clone(&self.permits).acquire_owned() => {
                        let permit = permit.map_err(std::io::Error::other)?;
                        let (stream, peer) = self.listener.accept().await?;
                        no_delay(&stream, peer);
                        return Ok((stream, peer, self.slot(permit)));
                    }
                    accepted = self.listener.accept() => accepted?,
                };
                no_delay(&stream, peer);
                // Shed one connection for it; until a slot frees, choose again every grace
                // period (none could be shed: all busy or too young; or the one chosen had
                // in fact sent its request, and took the shed back).
                self.shed.evict_one();
                let permit = loop {
                    tokio::select! {
                        permit = Arc::clone(&self.permits).acquire_owned() => {
                            break permit.map_err(std::io::Error::other)?;
                        }
                        () = tokio::time::sleep(super::shed::GRACE) => {
                            self.shed.evict_one();
                        }
                    }
                };
                return Ok((stream, peer, self.slot(permit)));
            }
        };
        let (stream, peer) = self.listener.accept().await?;
        no_delay(&stream, peer);
        Ok((stream, peer, self.slot(permit)))
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit,
            shed: Some(Arc::clone(&self.shed)),
        }
    }

    /// The connections the kernel has already queued, taken without waiting, as far as
    /// permits allow, and the listener closed: on shutdown, their requests were sent before
    /// the listener closed.
    ///
    /// The accept queue is read with the socket's own non-blocking `accept`, not tokio's
    /// `poll_accept`: the latter trusts tokio's cached readiness, which can still say "not
    /// ready" for connections the kernel queued a moment ago (their event not yet seen by the
    /// driver), and those clients would be reset with their request unanswered.
    pub(crate) fn backlog(self) -> Vec<(TcpStream, SocketAddr, Slot)> {
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
                    queued.push((stream, peer, permit.into()));
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
