//! A request body that fails once `server.body_timeout` has passed since the end of its head.
//!
//! The handlers read the whole body into `Bytes`; a client that announces a large body and
//! sends it slowly (or not at all) would hold them forever. The deadline covers the whole
//! body, not the gap between two chunks, so trickling a byte at a time does not extend it.
//! The failure reaches the handler as [`BodyTimedOut`] inside axum's body rejection, and the
//! handler answers `408` (see `http::handlers::body`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::http::response::BodyTimedOut;

/// `inner`, failing with [`BodyTimedOut`] once its deadline passes.
#[derive(Debug)]
pub(crate) struct TimeoutBody<B> {
    inner: B,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl<B> TimeoutBody<B> {
    /// `inner`, due within `timeout` from now.
    pub(crate) fn new(inner: B, timeout: Duration) -> TimeoutBody<B> {
        TimeoutBody {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
        }
    }
}

impl<B> Body for TimeoutBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
