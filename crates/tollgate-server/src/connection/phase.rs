//! [`Phase`]: what one connection is doing (a head being read, a request in the service, idle
//! between requests) and since when, shared by its socket ([`GuardedIo`]), its service (HTTP/1:
//! [`Phase::begin`]) and its listener's [`Shed`], which picks connections to close from it.
//!
//! Its own module so that the socket and the shed both read it without depending on each
//! other.
//!
//! [`GuardedIo`]: super::GuardedIo
//! [`Shed`]: super::shed::Shed

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

use std::os::fd::AsFd;

/// Which rule a connection's reads follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// HTTP/1: header, idle and busy phases, as the service reports them.
    Http1,
    /// HTTP/2 (gRPC): every byte read restarts `idle_timeout` (the first must come within
    /// `header_timeout`); requests multiplex, so there is no phase to follow.
    Quiet,
}

impl Mode {
    /// The name of the listener whose connections follow this rule, in the connection series.
    fn listener(self) -> &'static str {
        match self {
            Mode::Http1 => "http",
            Mode::Quiet => "grpc",
        }
    }

    /// A listener of this mode starts: its connection series exist from now on, at 0, so that
    /// a rate over them (the dashboard's, an alert's) is 0 rather than absent.
    pub(crate) fn count_from_zero(self) {
        let listener = self.listener();
        metrics::counter!("tollgate_connections_shed_total", "listener" => listener).increment(0);
        // gRPC's `answer_window` is counted by tollgate-envoy (`GrpcOptions::answer_timeout`).
        let grpc = (self == Mode::Quiet).then_some("answer_window");
        for phase in ["head", "idle", "answer"].into_iter().chain(grpc) {
            metrics::counter!(
                "tollgate_connections_timed_out_total",
                "listener" => listener,
                "phase" => phase
            )
            .increment(0);
        }
    }
}

/// What a connection is doing, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Accepted, nothing read yet: the first head must arrive within `header_timeout`.
    Fresh(Instant),
    /// Part of a head read (since the first byte of this request, or the accept).
    Head(Instant),
    /// This many requests in the service: no deadline here.
    Busy(usize),
    /// Waiting for the next request since the last one's response.
    Idle(Instant),
}

/// A connection's phase, shared by its socket, its service and its listener's [`Shed`].
#[derive(Debug)]
pub(crate) struct Phase {
    state: Mutex<State>,
    pub(super) mode: Mode,
    /// Shed by the listener to make room: the next read fails.
    shed: AtomicBool,
    /// The task waiting on the socket, woken when the connection is shed.
    parked: Mutex<Option<Waker>>,
    /// A TLS handshake is under way: reads do not move the phase on (it stays `Fresh`).
    handshaking: AtomicBool,
    /// Since when the socket has taken none of an answer's bytes (its client reads nothing),
    /// if it is so now.
    stalled: Mutex<Option<Instant>>,
    /// A shed that stood was counted (it ends the connection: once at most).
    shed_counted: AtomicBool,
    /// Since when a request in the service has waited for the rest of its body, if one does
    /// now (see `connection::body`).
    body_waiting: Mutex<Option<Instant>>,
}

/// What a connection that may be shed is doing, in the order they are shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Sheddable {
    /// No whole request head yet (HTTP/2: nothing read at all).
    NoRequest,
    /// An answer the client does not take: the socket has accepted none of its bytes since
    /// then (the client's receive buffer is full), whatever the connection is doing.
    Stalled,
    /// HTTP/1, idle between requests.
    Idle,
    /// HTTP/1, a request in the service still waiting for its body (a trickle, or a body
    /// announced and not sent), whose client has sent the head long since.
    SlowBody,
    /// HTTP/2, nothing read since (no call, no answer to a ping).
    Silent,
}

/// A request in the service; its drop (the response is ready) makes the connection idle.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Phase>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.update(|state| match state {
            State::Busy(n) if n > 1 => State::Busy(n - 1),
            _ => State::Idle(Instant::now()),
        });
    }
}

impl Phase {
    pub(super) fn new(mode: Mode) -> Arc<Phase> {
        Arc::new(Phase {
            state: Mutex::new(State::Fresh(Instant::now())),
            mode,
            shed: AtomicBool::new(false),
            parked: Mutex::new(None),
            handshaking: AtomicBool::new(false),
            stalled: Mutex::new(None),
            shed_counted: AtomicBool::new(false),
            body_waiting: Mutex::new(None),
        })
    }

    /// Whether this connection may be shed, and since when it has been so.
    pub(crate) fn sheddable(&self) -> Option<(Sheddable, Instant)> {
        if self.shed.load(Ordering::Acquire) {
            return None;
        }
        if let Some(since) = self.stalled_since() {
            return Some((Sheddable::Stalled, since));
        }
        match (self.mode, self.get()?) {
            (_, State::Fresh(since)) | (Mode::Http1, State::Head(since)) => {
                Some((Sheddable::NoRequest, since))
            }
            (Mode::Http1, State::Idle(since)) => Some((Sheddable::Idle, since)),
            (Mode::Http1, State::Busy(_)) => Some((Sheddable::SlowBody, self.body_waiting()?)),
            (Mode::Quiet, State::Idle(since)) => Some((Sheddable::Silent, since)),
            _ => None,
        }
    }

    /// Sheds the connection: its next read fails, and a read waiting now is woken for it.
    pub(crate) fn shed(&self) {
        self.shed.store(true, Ordering::Release);
        let parked = self.parked.lock().ok().and_then(|mut p| p.take());
        if let Some(waker) = parked {
            waker.wake();
        }
    }

    pub(super) fn is_shed(&self) -> bool {
        self.shed.load(Ordering::Acquire)
    }

    /// A connection chosen to be shed whose client has in fact sent bytes (they wait in the
    /// kernel, not yet seen by this task on a loaded process) is kept: the shed is taken back
    /// and the listener chooses again. Otherwise the shed stands, and is counted.
    pub(super) fn keep_if_speaking(&self, stream: &impl AsFd) -> bool {
        if bytes_waiting(stream) {
            self.shed.store(false, Ordering::Release);
            return true;
        }
        self.count_shed();
        false
    }

    /// A shed that stands, counted (once: the connection ends on it, though both its read and
    /// its write may still see it).
    pub(super) fn count_shed(&self) {
        if self.shed_counted.swap(true, Ordering::AcqRel) {
            return;
        }
        metrics::counter!("tollgate_connections_shed_total", "listener" => self.listener())
            .increment(1);
        if let Some(skipped) = SHED_LOG.admit() {
            tracing::warn!(
                listener = self.listener(),
                skipped,
                "connection shed: the listener is at server.max_connections, and this one \
                 was making no progress (counted in tollgate_connections_shed_total)"
            );
        }
    }

    /// A connection closed by one of its deadlines, counted by what it had not done in time:
    /// `head` (send its first bytes, or the rest of a head), `idle` (send a next request, or
    /// on HTTP/2 anything), `answer` (take any of an answer's bytes).
    pub(super) fn count_timeout(&self, phase: &'static str) {
        metrics::counter!(
            "tollgate_connections_timed_out_total",
            "listener" => self.listener(),
            "phase" => phase
        )
        .increment(1);
        if let Some(skipped) = TIMEOUT_LOG.admit() {
            tracing::info!(
                listener = self.listener(),
                phase,
                skipped,
                "connection closed by a deadline: its client sent or took nothing in time \
                 (counted in tollgate_connections_timed_out_total)"
            );
        }
    }

    /// The listener's name in the connection series.
    fn listener(&self) -> &'static str {
        self.mode.listener()
    }

    /// The socket stopped taking an answer's bytes at `since` (`Some`), or took some again
    /// (`None`).
    pub(super) fn stall(&self, since: Option<Instant>) {
        if let Ok(mut stalled) = self.stalled.lock() {
            *stalled = since;
        }
    }

    fn stalled_since(&self) -> Option<Instant> {
        self.stalled.lock().ok().and_then(|s| *s)
    }

    /// A request's body began to wait for bytes at `since` (`Some`), or has ended (`None`).
    pub(crate) fn wait_for_body(&self, since: Option<Instant>) {
        if let Ok(mut waiting) = self.body_waiting.lock() {
            *waiting = since;
        }
    }

    /// Since when a request's body has waited for bytes, if one does.
    pub(super) fn body_waiting(&self) -> Option<Instant> {
        self.body_waiting.lock().ok().and_then(|w| *w)
    }

    /// Remembers the task waiting on the socket (see [`Phase::shed`]).
    pub(super) fn park(&self, waker: &Waker) {
        if let Ok(mut parked) = self.parked.lock()
            && !parked.as_ref().is_some_and(|w| w.will_wake(waker))
        {
            *parked = Some(waker.clone());
        }
    }

    pub(super) fn update(&self, f: impl FnOnce(State) -> State) {
        if let Ok(mut state) = self.state.lock() {
            *state = f(*state);
        }
    }

    pub(super) fn get(&self) -> Option<State> {
        self.state.lock().ok().map(|s| *s)
    }

    /// A request handed to the service: no deadline until the returned guard is dropped.
    pub(crate) fn begin(self: &Arc<Phase>) -> Busy {
        self.update(|state| match state {
            State::Busy(n) => State::Busy(n + 1),
            _ => State::Busy(1),
        });
        Busy(Arc::clone(self))
    }

    /// A TLS handshake starts: until [`Phase::handshaken`], reads leave the phase as it is.
    pub(super) fn handshaking(&self) {
        self.handshaking.store(true, Ordering::Release);
    }

    /// The TLS handshake is over: reads move the phase on again.
    pub(super) fn handshaken(&self) {
        self.handshaking.store(false, Ordering::Release);
    }

    /// Bytes were read.
    pub(super) fn read(&self) {
        if self.handshaking.load(Ordering::Acquire) {
            return;
        }
        let mode = self.mode;
        self.update(|state| match (mode, state) {
            (Mode::Quiet, _) => State::Idle(Instant::now()),
            (Mode::Http1, State::Fresh(since)) => State::Head(since),
            (Mode::Http1, State::Idle(_)) => State::Head(Instant::now()),
            (Mode::Http1, other) => other,
        });
    }
}

/// Whether the client's bytes wait in the socket, asked of the kernel (a non-blocking peek).
///
/// `GuardedIo`'s read can answer "pending" with a request already in the socket: tokio reads only
/// once its driver has seen the socket readable, and on a loaded process (or a socket accepted
/// a moment ago) it may not have yet. Draining would then close a connection whose request
/// was sent before the signal. With bytes waiting, the read stays pending: the driver wakes it.
pub(super) fn bytes_waiting(stream: &impl AsFd) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    matches!(socket2::SockRef::from(stream).peek(&mut byte), Ok(n) if n > 0)
}

/// One line a second for sheds and one for timeouts, with the count held back: a flood of
/// idle or slow clients meets them on every connection (the counters count each).
static SHED_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();
static TIMEOUT_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();
