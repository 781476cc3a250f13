//! A request body that fails once `server.body_timeout` has passed since the end of its head.
//!
//! The handlers read the whole body into `Bytes`; a client that announces a large body and
//! sends it slowly (or not at all) would hold them forever. The deadline covers the whole
//! body, not the gap between two chunks, so trickling a byte at a time does not extend it.
//! The failure reaches the handler as [`BodyTimedOut`] inside axum's body rejection, and the
//! handler answers `408` (see `http::handlers::body`).
//!
//! A body that has to wait for bytes also tells its connection's [`Phase`] since when, until
//! it ends: a listener at its cap may shed a connection whose body is that late
//! (`connection::shed`). A body that arrived with its head (every real client's) never waits,
//! and costs nothing here.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::phase::Phase;
use crate::http::response::BodyTimedOut;

/// `inner`, failing with [`BodyTimedOut`] once its deadline passes.
#[derive(Debug)]
pub(crate) struct TimeoutBody<B> {
    inner: B,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
    /// The connection's phase, told while this body waits for bytes.
    phase: Arc<Phase>,
    /// This body has told the phase it waits (and must tell it when it ends).
    waiting: bool,
}

impl<B> TimeoutBody<B> {
    /// `inner`, due within `timeout` from now, on the connection whose phase is `phase`.
    pub(crate) fn new(inner: B, timeout: Duration, phase: Arc<Phase>) -> TimeoutBody<B> {
        TimeoutBody {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
            phase,
            waiting: false,
        }
    }

    /// The body no longer waits: it has ended, failed or been dropped.
    fn done_waiting(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.phase.wait_for_body(None);
        }
    }
}

impl<B> Drop for TimeoutBody<B> {
    fn drop(&mut self) {
        self.done_waiting();
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
            if !matches!(frame, Some(Ok(_))) {
                this.done_waiting();
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.done_waiting();
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout)))));
        }
        if !this.waiting {
            this.waiting = true;
            this.phase.wait_for_body(Some(std::time::Instant::now()));
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
