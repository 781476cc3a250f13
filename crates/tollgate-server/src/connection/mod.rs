//! What a client may hold: the connection layer under both listeners.
//!
//! `axum::serve` and tonic's own accept loop bound nothing: a client that sends half a head,
//! announces a 10 GB body, or just keeps a socket open holds a file descriptor and memory
//! forever, and on shutdown one such client stalls the drain. This module bounds each of
//! those, with the `[server]` settings ([`Settings`]):
//!
//! - [`CappedListener`]: at most `max_connections` open connections per listener; a permit is
//!   taken *before* `accept()`, so the excess waits in the kernel's accept queue, not in our
//!   file descriptors; when full, a new client gets the slot of the connection that has waited
//!   longest without a request, shed for it (`shed`), so a flood of silent sockets cannot
//!   lock new clients out;
//! - [`GuardedIo`]: the socket of one connection, which knows its [`Phase`] (a new connection
//!   or a head being read: `header_timeout`; between requests: `idle_timeout`; a request in
//!   the service: no clock, the body and store timeouts apply) and fails its reads once the
//!   phase's deadline passes; on shutdown it ends idle HTTP/1 connections (EOF) and, past the
//!   drain deadline, every connection; on HTTP/2 its writes wait one turn of the scheduler
//!   while every worker is busy, so that answers decided together leave together
//!   ([`tollgate_envoy::DeferredWrite`]);
//! - `body`: a request body that fails once `body_timeout` has passed since the end of the head
//!   (the handlers answer `408`);
//! - `auto_error`: hyper answers a malformed head (400, 414, 431) itself, with an empty body
//!   and no hook; those answers are rewritten, on their way to the socket, into the API's JSON
//!   error body;
//! - [`http1::serve`]: the HTTP API's accept loop and graceful drain, and its answer (414) to
//!   a request target over `http1::MAX_URI`, which hyper would route; [`grpc_incoming`]: the
//!   connections handed to tonic for the Envoy service (which keeps its own HTTP/2 loop);
//! - `handshake`: TLS above [`GuardedIo`], so the handshake is under the same deadlines, cap
//!   and shed as a request head; `transport`: a gRPC connection with or without TLS;
//! - `bound`: [`Listener`], TCP or a Unix socket (removed when dropped); `socket`: an
//!   accepted connection of either.
//!
//! TLS applies to TCP listeners only: a Unix socket's file mode decides who may connect.
//! Under TLS, hyper's own answers to a malformed head (400, 431) go out as hyper writes them
//! (empty bodies), and a head cut short by `header_timeout` gets no 408: both are rewritten
//! or written on the socket, below the encryption.
//!
//! Why not hyper's `header_read_timeout`: it also runs between keep-alive requests, so an idle
//! connection would be closed after `header_timeout` and `idle_timeout` could never be longer.

mod auto_error;
mod body;
mod bound;
mod guard;
mod handshake;
pub(crate) mod http1;
mod listener;
mod phase;
mod shed;
mod socket;
mod transport;

use std::time::Duration;

pub(crate) use bound::bind_unix;
pub use bound::{Listener, UnixSocket};
pub(crate) use guard::{GuardedIo, Lifecycle};
pub(crate) use handshake::handshake;
pub(crate) use listener::CappedListener;
pub(crate) use phase::Mode;
pub(crate) use transport::Transport;

use crate::config::ServerConfig;
use crate::tls::TlsAcceptors;

/// The `[server]` settings the connection layer enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) shutdown_timeout: Duration,
}

impl Settings {
    pub(crate) fn new(server: &ServerConfig) -> Settings {
        Settings {
            header_timeout: server.header_timeout,
            body_timeout: server.body_timeout,
            idle_timeout: server.idle_timeout,
            max_connections: server.max_connections,
            shutdown_timeout: server.shutdown_timeout,
        }
    }
}

/// The connections of `listener` for tonic: each accepted under the cap and guarded with the
/// idle rule of HTTP/2 (every byte read restarts `idle_timeout`; the server's keep-alive pings
/// make a healthy client answer well within it), through TLS when `tls` is given (and the
/// listener is TCP), each handshake in a task of its own. Accepting stops when tonic drops the
/// stream.
pub(crate) fn grpc_incoming(
    listener: CappedListener,
    settings: Settings,
    tls: Option<TlsAcceptors>,
    lifecycle: tokio::sync::watch::Receiver<Lifecycle>,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<Transport>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let tls = tls.filter(|_| listener.is_tcp());
    Mode::Quiet.count_from_zero();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let io = match accepted {
                Ok((stream, _, permit)) => {
                    GuardedIo::new(stream, permit, Mode::Quiet, settings, lifecycle.clone())
                }
                Err(e) => {
                    listener::pause_after(&e).await;
                    continue;
                }
            };
            let Some(tls) = &tls else {
                if tx.send(Ok(Transport::Plain(io))).await.is_err() {
                    return;
                }
                continue;
            };
            let (acceptor, tx) = (tls.grpc(), tx.clone());
            tokio::spawn(async move {
                if let Ok(stream) = handshake(acceptor, io, settings, "grpc").await {
                    let _ = tx.send(Ok(Transport::Tls(Box::new(stream)))).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
