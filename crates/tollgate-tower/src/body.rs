//! The response body of a rate-limited service: the inner service's body, or the short body
//! of a refusal. One type for both keeps the service's response type nameable, and its error
//! stays the inner body's (a refusal body cannot fail).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The inner service's body, or the body of a refusal.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Refusal { bytes: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// Wraps the inner service's body.
    pub fn inner(body: B) -> ResponseBody<B> {
        ResponseBody {
            kind: Kind::Inner { body },
        }
    }

    /// A refusal's body.
    pub fn refusal(bytes: Bytes) -> ResponseBody<B> {
        ResponseBody {
            kind: Kind::Refusal {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Refusal { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Refusal { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Refusal { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("ResponseBody::Inner"),
            Kind::Refusal { bytes } => f.debug_tuple("ResponseBody::Refusal").field(bytes).finish(),
        }
    }
}
