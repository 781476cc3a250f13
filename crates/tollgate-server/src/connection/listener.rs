//! [`CappedListener`]: a TCP listener that holds at most `max_connections` connections open.
//!
//! The permit is taken before `accept()`: while the cap is reached, new connections stay in
//! the kernel's accept queue (the listen backlog), costing us no file descriptor and no
//! memory, and are accepted in order as connections close. Refusing them instead would turn a
//! short burst into errors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
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
        Ok((stream, peer, permit))
    }

    /// The connections the kernel has already queued, taken without waiting, as far as
    /// permits allow: on shutdown, their requests were sent before the listener closed.
    pub(crate) fn backlog(&self) -> Vec<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut queued = Vec::new();
        while let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            match self.listener.poll_accept(&mut cx) {
                Poll::Ready(Ok((stream, peer))) => queued.push((stream, peer, permit)),
                Poll::Ready(Err(_)) | Poll::Pending => break,
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
