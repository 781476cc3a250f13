//! [`CappedListener`]: a listener (TCP or Unix) that holds at most `max_connections`
//! connections open.
//!
//! The permit is taken before `accept()` while there is one: then new connections stay in
//! the kernel's accept queue (the listen backlog), costing us no file descriptor and no
//! memory, and are accepted in order as connections close. Refusing them instead would turn a
//! short burst into errors. When the cap is reached, the next connection is accepted anyway
//! (one file descriptor over the cap, at most) and room is made for it by shedding the
//! connection that has waited longest without a request, or whose client reads no answer,
//! or whose body is late ([`Shed`]); only when every connection is busy with a request in the
//! service does it wait for one to close.
//!
//! [`CappedListener::accept`] is cancel-safe: the connection accepted over the cap waits for
//! its slot in the listener, not in the future, so a caller's `select!` that drops the future
//! (the HTTP loop does, whenever a connection ends) loses nothing; the next call serves it.
//! (Dropping it reset 11–19 % of new clients a few milliseconds after their connect, under a
//! 6 000-socket flood against the default cap.)

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::bound::Listener;
use super::shed::{GRACE, Shed};
use super::socket::Socket;

/// A listener with a cap on open connections.
#[derive(Debug)]
pub(crate) struct CappedListener {
    listener: Listener,
    permits: Arc<Semaphore>,
    shed: Arc<Shed>,
    /// The connection accepted over the cap, waiting for the slot shed for it.
    over: Mutex<Option<Over>>,
}

/// A connection accepted over the cap, and when to shed again if no slot has freed by then.
#[derive(Debug)]
struct Over {
    stream: Socket,
    peer: SocketAddr,
    shed_again: Instant,
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
    pub(crate) fn new(listener: impl Into<Listener>, max_connections: usize) -> CappedListener {
        CappedListener {
            listener: listener.into(),
            permits: Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))),
            shed: Shed::new(),
            over: Mutex::new(None),
        }
    }

    /// The next connection, with its slot under the cap (see the module docs for a full
    /// listener). Cancel-safe.
    pub(crate) async fn accept(&self) -> std::io::Result<(Socket, SocketAddr, Slot)> {
        loop {
            if let Some(shed_again) = self.over_deadline() {
                // A connection waits for the slot shed for it; until one frees, shed again
                // every grace period (none could be shed: all busy or too young; or the one
                // chosen had in fact sent its request, and took the shed back).
                tokio::select! {
                    permit = Arc::clone(&self.permits).acquire_owned() => {
                        let permit = permit.map_err(std::io::Error::other)?;
                        if let Some(over) = self.take_over() {
                            return Ok((over.stream, over.peer, self.slot(permit)));
                        }
                    }
                    () = tokio::time::sleep_until(shed_again) => {
                        self.shed.evict_one();
                        self.postpone_shedding();
                    }
                }
                continue;
            }
            let permit = match Arc::clone(&self.permits).try_acquire_owned() {
                Ok(permit) => permit,
                // Full: wait for a permit, or for a new client, whichever comes first; a new
                // client gets the slot of the connection shed for it.
                Err(_) => tokio::select! {
                    permit = Arc::clone(&self.permits).acquire_owned() => {
                        permit.map_err(std::io::Error::other)?
                    }
                    accepted = self.listener.accept() => {
                        let (stream, peer) = accepted?;
                        no_delay(&stream, peer);
                        self.hold_over(stream, peer);
                        self.shed.evict_one();
                        continue;
                    }
                },
            };
            let (stream, peer) = self.listener.accept().await?;
            no_delay(&stream, peer);
            return Ok((stream, peer, self.slot(permit)));
        }
    }

    /// Whether its connections are TCP (TLS applies to those only).
    pub(crate) fn is_tcp(&self) -> bool {
        self.listener.is_tcp()
    }

    fn over(&self) -> std::sync::MutexGuard<'_, Option<Over>> {
        self.over
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn over_deadline(&self) -> Option<Instant> {
        self.over().as_ref().map(|over| over.shed_again)
    }

    fn take_over(&self) -> Option<Over> {
        self.over().take()
    }

    fn hold_over(&self, stream: Socket, peer: SocketAddr) {
        *self.over() = Some(Over {
            stream,
            peer,
            shed_again: Instant::now() + GRACE,
        });
    }

    fn postpone_shedding(&self) {
        if let Some(over) = self.over().as_mut() {
            over.shed_again = Instant::now() + GRACE;
        }
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit,
            shed: Some(Arc::clone(&self.shed)),
        }
    }

    /// The connection held over the cap and those the kernel has already queued, taken
    /// without waiting, as far as permits allow, and the listener closed: on shutdown, their
    /// requests were sent before the listener closed.
    ///
    /// The accept queue is read with the socket's own non-blocking `accept`, not tokio's
    /// `poll_accept`: the latter trusts tokio's cached readiness, which can still say "not
    /// ready" for connections the kernel queued a moment ago (their event not yet seen by the
    /// driver), and those clients would be reset with their request unanswered.
    pub(crate) fn backlog(self) -> Vec<(Socket, SocketAddr, Slot)> {
        let mut queued = Vec::new();
        // The connection held over the cap first: it was accepted before the rest.
        if let Some(over) = self.take_over()
            && let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned()
        {
            queued.push((over.stream, over.peer, permit.into()));
        }
        let room = self.permits.available_permits();
        for (stream, peer) in self.listener.take_queued(room) {
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                break;
            };
            no_delay(&stream, peer);
            queued.push((stream, peer, permit.into()));
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
/// (A Unix socket has no Nagle.)
fn no_delay(stream: &Socket, peer: SocketAddr) {
    if let Socket::Tcp(stream) = stream
        && let Err(e) = stream.set_nodelay(true)
    {
        tracing::debug!(%peer, cause = %e, "could not set TCP_NODELAY");
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    fn nodelay(stream: &Socket) -> bool {
        match stream {
            Socket::Tcp(s) => s.nodelay().expect("nodelay"),
            Socket::Unix(_) => panic!("a unix socket from a TCP listener"),
        }
    }

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
            assert!(nodelay(stream), "Nagle on for {peer}");
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
        assert!(nodelay(&stream), "Nagle on for {peer}");
    }

    /// A connection accepted over the cap survives the accept future being dropped while it
    /// waits for a slot (as a caller's `select!` drops it), and is the next one returned once
    /// a slot frees. Here nothing can be shed (the connection holding the slot never
    /// registered), so the first `accept` can only wait.
    #[tokio::test]
    async fn a_connection_accepted_over_the_cap_survives_a_dropped_accept() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let capped = CappedListener::new(listener, 1);
        let _first = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (_held, _, slot) = capped.accept().await.expect("accept");
        let mut second = tokio::net::TcpStream::connect(addr).await.expect("connect");
        second.write_all(b"hello").await.expect("write");
        let waited = tokio::time::timeout(Duration::from_millis(200), capped.accept()).await;
        assert!(
            waited.is_err(),
            "accepted beyond the cap with every slot held"
        );
        drop(slot);
        let (mut stream, _, _slot) = tokio::time::timeout(Duration::from_secs(5), capped.accept())
            .await
            .expect("the held connection returned once a slot freed")
            .expect("accept");
        let mut got = [0u8; 5];
        stream.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"hello");
        stream.write_all(b"bye").await.expect("write");
        let mut back = [0u8; 3];
        second
            .read_exact(&mut back)
            .await
            .expect("the client's connection is still open");
        assert_eq!(&back, b"bye");
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
