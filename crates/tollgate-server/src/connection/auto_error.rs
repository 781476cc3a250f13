//! hyper's own answers to a head it cannot parse, rewritten into the API's JSON errors.
//!
//! hyper answers a malformed request line or header (400), a URI too long (414) and a head
//! over the size limit (431) itself, before any service sees a request, with an empty body
//! and no hook to change it. Those answers are recognised on their way to the socket: a whole
//! head alone in one write, with one of those statuses and `content-length: 0`. Nothing the
//! API answers looks like that (every API error has a JSON body), so nothing else is touched.
//! hyper is set to write a head in one buffer (`writev(false)`), so the head arrives whole.
//!
//! In plaintext the connection's socket ([`super::GuardedIo`]) rewrites them; under TLS the
//! socket sees only records, so [`Rewriting`] does it above TLS. Both hold the answer in a
//! [`Rewritten`] until all of it is written.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::ApiError;

/// The API error `written` stands for, when it is one of hyper's empty error answers: its
/// JSON answer ([`ApiError::raw_http1`]) replaces it.
fn hyper_error(written: &[u8]) -> Option<ApiError> {
    let head = std::str::from_utf8(written)
        .ok()?
        .strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    let error = match status {
        "400" => ApiError::Malformed,
        "414" => ApiError::UriTooLong,
        "431" => ApiError::HeadersTooLarge,
        _ => return None,
    };
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-length") {
            empty = value.trim() == "0";
        }
    }
    empty.then_some(error)
}

/// A request refused before the router saw it (malformed head 400, URI too long 414, head
/// too large 431): counted in `tollgate_http_requests_total{route="other"}` with its status,
/// as the router's own answers are, and logged at most once a second. They were counted
/// nowhere and logged only at `debug`: a proxy whose cookies outgrew the head limit had every
/// request refused 431 with nothing on `/metrics` (audit 2026-12).
pub(super) fn count_refused_head(status: axum::http::StatusCode) {
    static LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();
    crate::metrics::http_request_count(crate::metrics::Route::of(""), status);
    if let Some(skipped) = LOG.admit() {
        tracing::info!(
            status = status.as_u16(),
            skipped,
            "request refused before routing (malformed, URI or head too large)"
        );
    }
}

/// A rewritten answer, until all of it is written (before anything else).
#[derive(Debug, Default)]
pub(super) struct Rewritten(Vec<u8>);

impl Rewritten {
    /// Holds the JSON answer in place of `written` when it is one of hyper's empty error
    /// answers; whether it was.
    pub(super) fn replace(&mut self, written: &[u8]) -> bool {
        match hyper_error(written) {
            Some(error) => {
                count_refused_head(error.status());
                self.0 = error.raw_http1();
                true
            }
            None => false,
        }
    }

    /// Nothing held.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes what is held to `io`, `Ready` once none is left.
    pub(super) fn poll_write_to<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.0.is_empty() {
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.0))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.0.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

/// An HTTP/1 connection through TLS whose writes pass [`hyper_error`] (its reads pass through).
#[derive(Debug)]
pub(crate) struct Rewriting<T> {
    inner: T,
    held: Rewritten,
}

impl<T> Rewriting<T> {
    pub(crate) fn new(inner: T) -> Rewriting<T> {
        Rewriting {
            inner,
            held: Rewritten::default(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewriting<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewriting<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.held.poll_write_to(&mut this.inner, cx))?;
        if this.held.replace(buf) {
            // hyper's whole write; the rewritten answer goes now or on the flush that follows.
            let _ = this.held.poll_write_to(&mut this.inner, cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    /// One slice at a time, as by default: an answer is recognised from one whole write.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let buf = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &**b);
        self.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.held.poll_write_to(&mut this.inner, cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.held.poll_write_to(&mut this.inner, cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hyper's empty 431 becomes the JSON error; an API error (with its body) is left alone.
    #[test]
    fn rewrites_only_empty_parse_error_answers() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        let answer = hyper_error(hyper).expect("rewritten").raw_http1();
        let text = String::from_utf8(answer).expect("utf-8");
        assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
        assert!(
            text.ends_with(r#"{"error":"request header fields too large"}"#),
            "{text}"
        );
        let api = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n";
        assert!(hyper_error(api).is_none());
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(hyper_error(ok).is_none());
    }
}
