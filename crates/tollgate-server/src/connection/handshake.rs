//! The TLS handshake of one accepted connection, under the connection layer's rules.
//!
//! TLS runs above [`GuardedIo`], so the handshake's reads are the socket's reads: the
//! connection counts against `max_connections` from its accept, and until the handshake is
//! over it stays "accepted, nothing read" ([`GuardedIo::under_tls`]): the handshake and the
//! first request head together must arrive within `header_timeout` of the accept, and a
//! connection stalled in its handshake is shed, like a silent one, when the listener is full.
//! A client that opens TLS connections and never finishes the handshake therefore holds at
//! most `max_connections` slots for at most `header_timeout` each, and costs one accept and
//! at most one key exchange each.
//!
//! Handshakes are counted in `tollgate_tls_handshakes_total{listener, result}`; a refused one
//! (no client certificate, a certificate from another CA, a name not allowed, a stalled or
//! garbled handshake) is logged at `debug`: a client's mistake, not the server's.

use std::io;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::{GuardedIo, Settings};

/// Runs the handshake on `io` for `listener` (`http` or `grpc`).
pub(crate) async fn handshake(
    acceptor: TlsAcceptor,
    io: GuardedIo,
    settings: Settings,
    listener: &'static str,
) -> io::Result<TlsStream<GuardedIo>> {
    let phase = io.phase();
    // The socket enforces the deadline; this bounds a handshake whose writes never drain too.
    let done = tokio::time::timeout(settings.header_timeout, acceptor.accept(io.under_tls())).await;
    let result = match done {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "TLS handshake not done within header_timeout",
        )),
    };
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("tollgate_tls_handshakes_total", "listener" => listener, "result" => outcome)
        .increment(1);
    match result {
        Ok(stream) => {
            phase.handshaken();
            Ok(stream)
        }
        Err(e) => {
            tracing::debug!(listener, cause = %e, "TLS handshake failed");
            Err(e)
        }
    }
}
