//! [`Transport`]: a gRPC connection as tonic gets it, with or without TLS (tonic serves one
//! stream type per server).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;
use tollgate_envoy::tonic::transport::server::{Connected, TcpConnectInfo};

use super::GuardedIo;

/// A guarded connection, in plaintext or through TLS.
// Plaintext unboxed: it is the common case, and a connection's transport is moved once.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Transport {
    /// Plaintext (no `tls_cert`, or a Unix socket).
    Plain(GuardedIo),
    /// Through TLS, handshake done (boxed: rustls's state is large).
    Tls(Box<TlsStream<GuardedIo>>),
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Transport::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Transport::Tls(io) => {
                // The turn is taken here, before TLS seals the write (see `GuardedIo`).
                std::task::ready!(io.get_mut().0.poll_write_turn(cx));
                Pin::new(io.as_mut()).poll_write(cx, buf)
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Transport::Tls(io) => {
                std::task::ready!(io.get_mut().0.poll_write_turn(cx));
                Pin::new(io.as_mut()).poll_write_vectored(cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Plain(io) => io.is_write_vectored(),
            Transport::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(io) => Pin::new(io).poll_flush(cx),
            Transport::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Transport::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Connected for Transport {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        match self {
            Transport::Plain(io) => io.connect_info(),
            Transport::Tls(io) => io.get_ref().0.connect_info(),
        }
    }
}
