//! [`GuardedIo`]: one connection's socket, which enforces the connection's deadlines itself.
//!
//! Deadlines live in the socket because only reads show what a client is doing, and because
//! tonic owns its connection tasks: failing a read is the one way to end a connection that
//! works under both hyper's HTTP/1 loop and tonic's HTTP/2 one. The connection's [`Phase`] is
//! moved on by the reads here and, for HTTP/1, by the service ([`Phase::begin`] when hyper
//! hands over a parsed head, the guard's drop when the response is ready).
//!
//! A read that would wait checks the phase's deadline; once it has passed, the read fails with
//! `TimedOut` and the connection ends. A head cut short by `header_timeout` is first answered
//! `408` (one non-blocking write, only when no response bytes are pending). A write that
//! waits (the client reads nothing, and its socket is full) is a stall: it fails once no byte
//! has been taken for `idle_timeout`, or at once if the listener sheds the connection for
//! it; nothing else would end a connection whose client sends pipelined requests and never
//! reads. Writes otherwise pass through, except two: hyper's own empty error answers, which
//! `auto_error` rewrites (here in plaintext; above TLS under TLS, with
//! `auto_error::Rewriting`); and on HTTP/2, while every worker is busy, the first write of
//! each flush, which waits one turn of the scheduler so that answers decided in that turn
//! leave together ([`DeferredWrite`]). Under
//! TLS that turn is taken above TLS ([`GuardedIo::poll_write_turn`], called by `Transport`):
//! here, TLS would already have sealed each write as a record, and its flush would send it
//! before the turn's other answers were queued; the records TLS holds then leave in one
//! vectored write.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Sleep;
use tollgate_envoy::DeferredWrite;

use super::Settings;
use super::auto_error::Rewritten;
use super::listener::Slot;
use super::phase::{Mode, Phase, State, bytes_waiting};
use super::socket::Socket;
use crate::http::ApiError;

/// Where a listener is in its life: connections follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lifecycle {
    /// Serving.
    Serving,
    /// Shutting down: HTTP/1 connections end once they have no request (a head being read,
    /// or in the service, is answered first; an idle one ends at once, one accepted but
    /// silent after `FRESH_GRACE`).
    Draining,
    /// The drain deadline passed: every connection ends now.
    Closing,
}

/// A connection's socket with its permit, phase and deadlines.
pub(crate) struct GuardedIo {
    inner: Socket,
    /// TLS runs above: the bytes here are records, so HTTP answers are neither read nor
    /// written here (no rewritten error answer, no 408 on a cut head).
    under_tls: bool,
    phase: Arc<Phase>,
    settings: Settings,
    lifecycle: Watch,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    /// Since when the socket has taken none of an answer's bytes, if it is so now.
    stalled: Option<Instant>,
    /// The stall's deadline (`idle_timeout` from its start), made at the first stall.
    stall_sleep: Option<Pin<Box<Sleep>>>,
    /// Bytes written and not yet flushed: a 408 written now would land inside them.
    unflushed: bool,
    /// A rewritten error answer still to be written.
    pending: Rewritten,
    /// HTTP/2: writes wait a turn while every worker is busy, to leave together.
    turn: DeferredWrite,
    _permit: OwnedSemaphorePermit,
}

fn shed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection shed: the listener was full and it had sent no request",
    )
}

impl std::fmt::Debug for GuardedIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedIo")
            .field("inner", &self.inner)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

impl GuardedIo {
    pub(crate) fn new(
        inner: impl Into<Socket>,
        slot: impl Into<Slot>,
        mode: Mode,
        settings: Settings,
        lifecycle: watch::Receiver<Lifecycle>,
    ) -> GuardedIo {
        let (permit, shed) = slot.into().into_parts();
        let phase = Phase::new(mode);
        if let Some(shed) = shed {
            shed.register(&phase);
        }
        GuardedIo {
            inner: inner.into(),
            under_tls: false,
            phase,
            settings,
            lifecycle: Watch::new(lifecycle),
            sleep: Box::pin(tokio::time::sleep(settings.header_timeout)),
            armed: None,
            stalled: None,
            stall_sleep: None,
            unflushed: false,
            pending: Rewritten::default(),
            turn: DeferredWrite::new(),
            _permit: permit,
        }
    }

    /// TLS will run above this socket: its handshake starts now, and until
    /// [`Phase::handshaken`] the connection stays "accepted, nothing read" (the handshake
    /// must end, and the first head arrive, within `header_timeout` of the accept; and a
    /// connection stalled in its handshake may be shed like a silent one).
    pub(crate) fn under_tls(mut self) -> GuardedIo {
        self.under_tls = true;
        self.phase.handshaking();
        self
    }

    /// The HTTP/2 write turn ([`DeferredWrite`]), for TLS above this socket to take before it
    /// seals what it is given: `Ready` when a write may go now.
    pub(crate) fn poll_write_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.phase.mode == Mode::Quiet {
            self.turn.poll_write_turn(cx)
        } else {
            Poll::Ready(())
        }
    }

    /// Whether a write may go: not once the drain deadline has passed, and only after what is
    /// left of a rewritten answer.
    fn poll_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.lifecycle.poll(cx) == Lifecycle::Closing {
            return Poll::Ready(Err(closing()));
        }
        self.poll_pending(cx)
    }

    /// `written`, noted: bytes now wait for a flush.
    fn note_written(&mut self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.unflushed = true;
        }
        written
    }

    /// Whether the listener shed this connection and the shed stands: it is taken back when the
    /// client has in fact sent bytes, unless the connection is stalled on an answer its client
    /// does not read (pipelined requests waiting do not make that client a live one) or its
    /// request's body is late (a trickle is bytes too).
    fn shed_stands(&self) -> bool {
        if !self.phase.is_shed() {
            return false;
        }
        if self.stalled.is_some() || self.phase.body_waiting().is_some() {
            self.phase.count_shed();
            return true;
        }
        !self.phase.keep_if_speaking(&self.inner)
    }

    /// The phase, for the service.
    pub(crate) fn phase(&self) -> Arc<Phase> {
        Arc::clone(&self.phase)
    }

    /// The deadline of the current phase, and whether it cuts a head short.
    fn deadline(&self, state: State) -> Option<(Instant, bool)> {
        let s = &self.settings;
        match state {
            State::Fresh(since) => Some((since + s.header_timeout, false)),
            State::Head(since) => Some((since + s.header_timeout, self.phase.mode == Mode::Http1)),
            State::Idle(since) => Some((since + s.idle_timeout, false)),
            State::Busy(_) => None,
        }
    }

    /// A response has left: an HTTP/1 connection now idle gets its `idle_timeout` running at
    /// once, its timer set with this task's waker. A read would set it too, but hyper may not
    /// read again before the client writes: after a request without a body, its last read came
    /// back empty while the request was still in the service, when no deadline runs, and that
    /// read's wait is what it then sleeps on. Without this, such a connection was never closed.
    fn arm_idle(&mut self, cx: &mut Context<'_>) {
        if self.phase.mode != Mode::Http1 {
            return;
        }
        let Some(state @ State::Idle(_)) = self.phase.get() else {
            return;
        };
        let Some((deadline, _)) = self.deadline(state) else {
            return;
        };
        if self.armed != Some(deadline) {
            self.sleep.as_mut().reset(deadline.into());
            self.armed = Some(deadline);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            // Already due: the read that fails the connection runs on the next poll.
            cx.waker().wake_by_ref();
        }
    }

    /// What a write to the socket came to, noted: one that waits starts (or continues) a
    /// stall, which fails once it has lasted `idle_timeout`, or at once when the listener has
    /// shed the connection; one that takes bytes ends it.
    fn note_stall<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match written {
            Poll::Pending => {}
            Poll::Ready(result) => {
                if self.stalled.take().is_some() {
                    self.phase.stall(None);
                }
                return Poll::Ready(result);
            }
        }
        let since = match self.stalled {
            Some(since) => since,
            None => {
                let now = Instant::now();
                self.stalled = Some(now);
                self.phase.stall(Some(now));
                now
            }
        };
        // A shed wakes this task (see `Phase::shed`); bytes the client sends meanwhile do not
        // take it back, as they do for a connection shed while waiting on a read.
        self.phase.park(cx.waker());
        if self.phase.is_shed() {
            self.phase.count_shed();
            return Poll::Ready(Err(shed_error()));
        }
        let deadline = tokio::time::Instant::from_std(since + self.settings.idle_timeout);
        let sleep = self
            .stall_sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            self.phase.count_timeout("answer");
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took none of an answer within idle_timeout",
            )));
        }
        Poll::Pending
    }

    /// Writes what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() {
            // Some of it may be written now: a 408 must not land inside it.
            self.unflushed = true;
        }
        self.pending.poll_write_to(&mut self.inner, cx)
    }
}

/// How long a connection accepted but silent may still send its first request once the
/// server drains. Its client connected before the signal and is about to write (or wrote, and
/// the bytes are still on their way through a loaded kernel); closing it at once would lose a
/// request sent in good faith. Go's `http.Server.Shutdown` waits five seconds for such
/// connections; one is plenty on a loopback or a LAN, and keeps a SIGTERM quick.
const FRESH_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

fn closing() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the server is shutting down",
    )
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let lifecycle = this.lifecycle.poll(cx);
        if lifecycle == Lifecycle::Closing {
            return Poll::Ready(Err(closing()));
        }
        if this.shed_stands() {
            return Poll::Ready(Err(shed_error()));
        }
        let before = buf.filled().len();
        if let Poll::Ready(result) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            if buf.filled().len() > before {
                this.phase.read();
            }
            return Poll::Ready(result);
        }
        // Waiting on the socket: a shed wakes this task (checked again after parking, so a
        // shed between the check above and the park is not missed).
        this.phase.park(cx.waker());
        if this.shed_stands() {
            return Poll::Ready(Err(shed_error()));
        }
        let Some(state) = this.phase.get() else {
            return Poll::Pending;
        };
        let mut drain_at = None;
        if lifecycle == Lifecycle::Draining
            && this.phase.mode == Mode::Http1
            && matches!(state, State::Idle(_) | State::Fresh(_))
            && !bytes_waiting(&this.inner)
        {
            // Nothing of a next request has arrived: end of stream, hyper closes; but a
            // connection accepted a moment ago gets `FRESH_GRACE` to deliver its first request.
            match state {
                State::Fresh(since) if Instant::now() < since + FRESH_GRACE => {
                    drain_at = Some(since + FRESH_GRACE);
                }
                _ => return Poll::Ready(Ok(())),
            }
        }
        let Some((deadline, cuts_head)) = this.deadline(state) else {
            return Poll::Pending;
        };
        let (deadline, cuts_head) = match drain_at {
            Some(at) if at < deadline => (at, false),
            _ => (deadline, cuts_head),
        };
        if this.armed != Some(deadline) {
            this.sleep.as_mut().reset(deadline.into());
            this.armed = Some(deadline);
        }
        if this.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if drain_at.is_some_and(|at| at <= deadline) {
            // The grace is over with nothing sent: end of stream, as for an idle connection.
            return Poll::Ready(Ok(()));
        }
        if cuts_head && !this.under_tls && !this.unflushed && this.pending.is_empty() {
            // One attempt: a client that reads nothing gets nothing.
            let answer = ApiError::HeaderTimeout.raw_http1();
            let _ = Pin::new(&mut this.inner).poll_write(cx, &answer);
        }
        this.phase.count_timeout(match state {
            State::Idle(_) => "idle",
            State::Fresh(_) | State::Head(_) | State::Busy(_) => "head",
        });
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "connection timed out",
        )))
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_writable(cx))?;
        if this.phase.mode == Mode::Http1 && !this.under_tls && this.pending.replace(buf) {
            // The error answer is hyper's whole write; the rewritten one goes out now or on
            // the flush that follows.
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        if this.phase.mode == Mode::Quiet && !this.under_tls {
            std::task::ready!(this.turn.poll_write_turn(cx));
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        let written = this.note_stall(cx, written);
        this.note_written(written)
    }

    /// Under TLS, the records it holds in one system call; otherwise one slice at a time, as
    /// by default (hyper's HTTP/1 answers are rewritten whole, from one write).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.under_tls {
            let buf = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return Pin::new(this).poll_write(cx, buf);
        }
        std::task::ready!(this.poll_writable(cx))?;
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        let written = this.note_stall(cx, written);
        this.note_written(written)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_pending(cx))?;
        std::task::ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.unflushed = false;
        this.turn.flushed();
        this.arm_idle(cx);
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl tollgate_envoy::tonic::transport::server::Connected for GuardedIo {
    type ConnectInfo = tollgate_envoy::tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The listener's [`Lifecycle`], polled from inside `poll_read`/`poll_write` so that a change
/// wakes a connection waiting on its socket.
struct Watch {
    rx: watch::Receiver<Lifecycle>,
    changed: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Watch {
    fn new(rx: watch::Receiver<Lifecycle>) -> Watch {
        Watch { rx, changed: None }
    }

    /// The current lifecycle; the task is woken on the next change.
    fn poll(&mut self, cx: &mut Context<'_>) -> Lifecycle {
        loop {
            if self.changed.is_none() {
                // Seen from here on: the next future waits for a later change.
                self.rx.borrow_and_update();
            }
            let changed = self.changed.get_or_insert_with(|| {
                let mut rx = self.rx.clone();
                Box::pin(async move {
                    if rx.changed().await.is_err() {
                        // The listener is gone: nothing will change any more.
                        std::future::pending::<()>().await;
                    }
                })
            });
            if changed.as_mut().poll(cx).is_pending() {
                break;
            }
            self.changed = None;
        }
        *self.rx.borrow()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;
    use tokio::sync::Semaphore;

    use super::*;

    /// `stream` guarded in `mode` (5 s for every timeout), the server in `lifecycle`; with the
    /// lifecycle's sender, to keep while the connection is used.
    async fn guarded(
        stream: tokio::net::TcpStream,
        mode: Mode,
        lifecycle: Lifecycle,
    ) -> (GuardedIo, watch::Sender<Lifecycle>) {
        let settings = Settings {
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            max_connections: 1,
            shutdown_timeout: Duration::from_secs(5),
        };
        let (sender, watcher) = watch::channel(lifecycle);
        let permit = Arc::new(Semaphore::new(1))
            .acquire_owned()
            .await
            .expect("permit");
        let io = GuardedIo::new(Socket::Tcp(stream), permit, mode, settings, watcher);
        (io, sender)
    }

    /// Draining ends a connection with nothing sent, but not one whose request is in the
    /// socket while tokio's driver has not yet seen it readable (here: never, since nothing
    /// was awaited between the accept and the read).
    #[tokio::test]
    async fn draining_reads_a_request_the_driver_has_not_seen_yet() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut client = std::net::TcpStream::connect(addr).expect("connect");
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .expect("write");
        let (stream, _) = listener.accept().await.expect("accept");
        let (mut io, _lifecycle) = guarded(stream, Mode::Http1, Lifecycle::Draining).await;
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), io.read(&mut buf))
            .await
            .expect("read within 5 s")
            .expect("read");
        assert!(n > 0, "the request was taken for an end of stream");
        assert!(buf[..n].starts_with(b"GET /healthz"));

        // With nothing sent, draining ends the connection (end of stream), after the grace.
        let mut quiet = std::net::TcpStream::connect(addr).expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        let (mut io, _lifecycle) = guarded(stream, Mode::Http1, Lifecycle::Draining).await;
        let n = tokio::time::timeout(Duration::from_secs(5), io.read(&mut buf))
            .await
            .expect("read within 5 s")
            .expect("read");
        assert_eq!(n, 0);
        quiet.flush().expect("flush");
    }

    /// Under TLS, a vectored write (the records TLS holds) leaves whole, in one system call;
    /// the default would write the first slice alone, a call per record. Without TLS it is
    /// one slice at a time, as before: hyper's HTTP/1 answers are rewritten from one write.
    #[tokio::test]
    async fn under_tls_a_vectored_write_sends_every_slice() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let bufs = [
            IoSlice::new(b"first record "),
            IoSlice::new(b"second record"),
        ];
        for (tls, sent) in [(true, 26), (false, 13)] {
            let _client = std::net::TcpStream::connect(addr).expect("connect");
            let (stream, _) = listener.accept().await.expect("accept");
            let mode = if tls { Mode::Quiet } else { Mode::Http1 };
            let (mut io, _lifecycle) = guarded(stream, mode, Lifecycle::Serving).await;
            if tls {
                io = io.under_tls();
            }
            let n = io.write_vectored(&bufs).await.expect("write");
            assert_eq!(n, sent, "under TLS: {tls}");
        }
    }
}
