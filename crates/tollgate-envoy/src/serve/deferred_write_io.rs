//! [`DeferredWriteIo`]: a connection whose writes take turns ([`DeferredWrite`]), for HTTP/2
//! clients and servers that own a plain socket.
//!
//! `tollgate serve` has its own socket type (with deadlines) and embeds [`DeferredWrite`]
//! there; this wrapper gives the same to [`crate::serve`]'s connections and to a tonic client
//! through `Endpoint::connect_with_connector` (see `tollgate bench --grpc`).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use crate::DeferredWrite;

/// `inner`, with its writes deferred one turn of the scheduler while every worker is busy.
#[derive(Debug)]
pub struct DeferredWriteIo<T> {
    inner: T,
    turn: DeferredWrite,
}

impl<T> DeferredWriteIo<T> {
    /// Wraps `inner`; call it on the runtime the connection will run on.
    pub fn new(inner: T) -> DeferredWriteIo<T> {
        DeferredWriteIo {
            inner,
            turn: DeferredWrite::new(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for DeferredWriteIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for DeferredWriteIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.turn.poll_write_turn(cx));
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    /// Forwarded, turn and all: TLS above this writes the records it holds with one vectored
    /// write, which the default (the first slice alone) would split into a system call each.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.turn.poll_write_turn(cx));
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.turn.flushed();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for DeferredWriteIo<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn bytes_pass_both_ways_with_a_turn_taken_before_a_write() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut near = DeferredWriteIo::new(near);
        // The only worker is busy running this test: the write waits one turn, then goes.
        near.write_all(b"ping").await.expect("write");
        near.flush().await.expect("flush");
        let mut got = [0; 4];
        far.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping");
        far.write_all(b"pong").await.expect("write back");
        near.read_exact(&mut got).await.expect("read back");
        assert_eq!(&got, b"pong");
    }

    /// A vectored write goes down whole (TLS above writes the records it holds in one call),
    /// and the stream says it can: h2 and TLS above choose their writes by it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_vectored_write_is_forwarded_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut far, _) = listener.accept().await.expect("accept");
        let mut near = DeferredWriteIo::new(stream);
        assert!(near.is_write_vectored());
        let bufs = [IoSlice::new(b"first "), IoSlice::new(b"second")];
        assert_eq!(near.write_vectored(&bufs).await.expect("write"), 12);
        let mut got = [0; 12];
        far.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"first second");
    }
}
