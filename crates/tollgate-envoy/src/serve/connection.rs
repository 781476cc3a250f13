//! [`Tracked`]: one gRPC connection's socket, with what its calls hold ([`Connection`]): the
//! bytes of their unfinished messages (its share of the [`MessageBudget`]) and the answers
//! owed to its client that the client does not take.
//!
//! tonic keeps its own HTTP/2 loop, so the only handle on a connection is its socket, and the
//! only handle from a call to its connection is the connect info tonic puts in every request
//! of that connection ([`TrackedInfo`]; the socket's own connect info is put back beside it,
//! so `Request::remote_addr` still works).
//!
//! **Owed answers.** A decided call's answer waits for HTTP/2 flow control: a client that
//! announces a window of 0 and never opens it gets the answer's headers, never its message,
//! and its stream stays open. Nothing timed it: the call deadline ends when the handler
//! returns, and the socket is writable all along, so the write-stall guard (in
//! `tollgate-server`) saw nothing. Such a stream holds its answer and tonic's 8 KiB encode
//! buffer, about 10 KB: 100 connections of 1000 calls took a server from 23 MB to 1.06 GB in
//! 3 s, held for ever. Here an answer's message is *owed* from the moment the service gives
//! it to hyper until h2 has written its bytes out, or dropped them
//! ([`crate::serve::answer_body`]: hyper hands it to h2 at once, and h2 holds it while the
//! window is shut); a connection whose oldest owed answer has waited
//! [`crate::GrpcOptions::answer_timeout`] is closed (its socket's next read fails), and every
//! stream on it is dropped. A whole connection, not the stream: hyper
//! gives no handle to reset one stream from outside, and a client that takes no answer for
//! that long is not reading (Envoy's windows are megabytes; its answers are a few hundred
//! bytes). How many answers one connection may owe at once is bounded by
//! `max_concurrent_streams`: an owed answer keeps its stream open, and a client cannot open
//! more.
//!
//! [`MessageBudget`]: crate::serve::message_budget::MessageBudget

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tonic::transport::server::Connected;

/// What one connection's calls hold.
#[derive(Debug, Default)]
pub(crate) struct Connection {
    /// Bytes of unfinished messages this connection's calls hold (its share of the budget).
    unfinished: AtomicUsize,
    owed: Mutex<Owed>,
}

/// The answers owed to the client, by when each became owed.
#[derive(Debug, Default)]
struct Owed {
    /// Each owed answer by its number; numbers grow with time, so the first is the oldest.
    since: BTreeMap<u64, Instant>,
    next: u64,
    /// The socket's task, parked on a read while nothing was owed: woken when something is.
    reader: Option<Waker>,
}

impl Connection {
    pub(crate) fn new() -> Arc<Connection> {
        Arc::new(Connection::default())
    }

    fn owed(&self) -> MutexGuard<'_, Owed> {
        self.owed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `n` bytes of this connection's share of unfinished messages, unless that would
    /// pass `share` (then takes nothing).
    pub(crate) fn take_unfinished(&self, n: usize, share: usize) -> bool {
        let before = self.unfinished.fetch_add(n, Ordering::AcqRel);
        if before + n > share {
            self.unfinished.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives `n` bytes of unfinished messages back.
    pub(crate) fn give_unfinished(&self, n: usize) {
        self.unfinished.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes of unfinished messages held now.
    #[cfg(test)]
    pub(crate) fn unfinished(&self) -> usize {
        self.unfinished.load(Ordering::Acquire)
    }

    /// An answer is owed from now: its number, for [`Connection::paid`].
    pub(crate) fn owe(&self) -> u64 {
        let mut owed = self.owed();
        let id = owed.next;
        owed.next += 1;
        owed.since.insert(id, Instant::now());
        if owed.since.len() == 1
            && let Some(reader) = owed.reader.take()
        {
            // The socket's task may be parked with no deadline: it arms one now.
            reader.wake();
        }
        id
    }

    /// Answer `id` is owed no more (hyper took it, or it is gone).
    pub(crate) fn paid(&self, id: u64) {
        self.owed().since.remove(&id);
    }

    /// Since when the oldest owed answer has waited; with none, `reader` is woken when one is.
    fn oldest_owed(&self, reader: &Waker) -> Option<Instant> {
        let mut owed = self.owed();
        let oldest = owed.since.first_key_value().map(|(_, since)| *since);
        if oldest.is_none() && !owed.reader.as_ref().is_some_and(|w| w.will_wake(reader)) {
            owed.reader = Some(reader.clone());
        }
        oldest
    }

    /// How many answers are owed now.
    #[cfg(test)]
    pub(crate) fn owed_answers(&self) -> usize {
        self.owed().since.len()
    }
}

/// A connection's socket, closed when an answer has been owed for longer than
/// `answer_timeout` (see the module docs).
pub(crate) struct Tracked<IO> {
    inner: IO,
    connection: Arc<Connection>,
    answer_timeout: Duration,
    /// The oldest owed answer's deadline, once one has been armed.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<IO> Tracked<IO> {
    pub(crate) fn new(inner: IO, answer_timeout: Duration) -> Tracked<IO> {
        Tracked {
            inner,
            connection: Connection::new(),
            answer_timeout,
            sleep: None,
        }
    }

    /// Whether the oldest owed answer is past its deadline (else the task wakes at it, or
    /// when an answer becomes owed).
    fn answer_overdue(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(since) = self.connection.oldest_owed(cx.waker()) else {
            return false;
        };
        let deadline = tokio::time::Instant::from_std(since + self.answer_timeout);
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        sleep.as_mut().poll(cx).is_ready()
    }
}

/// The connect info tonic puts in each request: the socket's own, and the [`Connection`].
#[derive(Debug, Clone)]
pub(crate) struct TrackedInfo<T> {
    pub(crate) inner: T,
    pub(crate) connection: Arc<Connection>,
}

impl<IO: Connected> Connected for Tracked<IO> {
    type ConnectInfo = TrackedInfo<IO::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        TrackedInfo {
            inner: self.inner.connect_info(),
            connection: Arc::clone(&self.connection),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(read) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            return Poll::Ready(read);
        }
        // HTTP/2 always has a read waiting: this is where the connection's task parks.
        if this.answer_overdue(cx) {
            metrics::counter!(
                "tollgate_connections_timed_out_total",
                "listener" => "grpc",
                "phase" => "answer_window"
            )
            .increment(1);
            tracing::debug!(
                answer_timeout = ?this.answer_timeout,
                "gRPC connection closed: its client took no answer within answer_timeout \
                 (an HTTP/2 window it never opens?)"
            );
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took none of an answer within answer_timeout",
            )));
        }
        Poll::Pending
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_takes_up_to_its_cap() {
        let connection = Connection::new();
        assert!(connection.take_unfinished(60, 100));
        assert!(!connection.take_unfinished(41, 100), "past the share");
        assert_eq!(connection.unfinished(), 60);
        connection.give_unfinished(60);
        assert_eq!(connection.unfinished(), 0);
    }

    #[test]
    fn the_oldest_owed_answer_comes_first() {
        let connection = Connection::new();
        let waker = Waker::noop();
        assert_eq!(connection.oldest_owed(waker), None);
        let first = connection.owe();
        let first_since = connection.oldest_owed(waker).expect("owed");
        let second = connection.owe();
        assert_eq!(connection.oldest_owed(waker), Some(first_since));
        connection.paid(first);
        assert!(connection.oldest_owed(waker).expect("owed") >= first_since);
        connection.paid(second);
        assert_eq!(connection.oldest_owed(waker), None);
        assert_eq!(connection.owed_answers(), 0);
    }
}
