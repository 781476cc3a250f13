//! A request's body, read: its bytes, or the API's error for a body that could not be read
//! (over [`MAX_BODY`], not received in time, broken).
//!
//! Read here frame by frame rather than by axum's `Bytes` extractor: on the check's path that
//! extractor boxed the body once more for its limit, gathered the frames in a list and cost
//! about 2,300 instructions a check (callgrind), where a check's body is one frame that is
//! handed on as it came.

use std::future::poll_fn;
use std::pin::Pin;

use axum::extract::{FromRequest, Request};
use bytes::{Bytes, BytesMut};
use http_body::Body as _;

use super::response::{ApiError, BodyTimedOut};

/// The largest request body accepted.
pub const MAX_BODY: usize = 16 * 1024;

/// A request's body, whole: at most [`MAX_BODY`] bytes. As an extractor, a body that cannot
/// be read is answered with the API's error (`413`, `408`, `400`).
#[derive(Debug)]
pub(super) struct Body(pub(super) Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Body, ApiError> {
        read(request.into_body()).await.map(Body)
    }
}

/// The body's bytes, or the API's error for an unreadable, oversized or late body. A body
/// declared larger than [`MAX_BODY`] is refused before any of it is read.
async fn read(mut body: axum::body::Body) -> Result<Bytes, ApiError> {
    if body.size_hint().lower() > MAX_BODY as u64 {
        return Err(ApiError::TooLarge(MAX_BODY));
    }
    // The one frame read so far, handed on as it came; the frames joined once there are more.
    let mut only: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| broken(&e))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let so_far = only.as_ref().map_or(joined.len(), Bytes::len);
        if so_far + data.len() > MAX_BODY {
            return Err(ApiError::TooLarge(MAX_BODY));
        }
        if only.is_none() && joined.is_empty() {
            only = Some(data);
        } else {
            if let Some(head) = only.take() {
                joined.reserve(head.len() + data.len());
                joined.extend_from_slice(&head);
            }
            joined.extend_from_slice(&data);
        }
    }
    Ok(only.unwrap_or_else(|| joined.freeze()))
}

/// The API's error for a body that failed while it was read.
fn broken(error: &axum::Error) -> ApiError {
    if let Some(BodyTimedOut(after)) = cause::<BodyTimedOut>(error) {
        return ApiError::BodyTimeout(*after);
    }
    ApiError::BadRequest(format!("Failed to buffer the request body: {error}"))
}

/// The first `E` in `error`'s chain of causes.
fn cause<'a, E: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use http_body::{Frame, SizeHint};

    use super::*;

    /// A body of given frames (an `Err` is a body that failed), with a declared size.
    struct Frames {
        frames: VecDeque<Result<Bytes, BodyTimedOut>>,
        declared: Option<u64>,
    }

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = BodyTimedOut;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BodyTimedOut>>> {
            Poll::Ready(self.frames.pop_front().map(|f| f.map(Frame::data)))
        }

        fn size_hint(&self) -> SizeHint {
            self.declared
                .map_or_else(SizeHint::new, SizeHint::with_exact)
        }
    }

    async fn read_frames(frames: Vec<Result<Bytes, BodyTimedOut>>) -> Result<Bytes, ApiError> {
        read(axum::body::Body::new(Frames {
            frames: frames.into(),
            declared: None,
        }))
        .await
    }

    /// A body of one frame (a check's, nearly always) is handed on as it came, not copied.
    #[tokio::test]
    async fn one_frame_is_handed_on_as_it_came() {
        let frame = Bytes::from_static(br#"{"limit": "sms"}"#);
        let read = read_frames(vec![Ok(frame.clone())]).await.expect("read");
        assert_eq!(read, frame);
        assert_eq!(read.as_ptr(), frame.as_ptr());
    }

    /// Frames are joined in order, whatever their number.
    #[tokio::test]
    async fn frames_are_joined_in_order() {
        let parts = ["{\"limit\"", ": ", "\"sms\"", "}"];
        let read = read_frames(parts.iter().map(|p| Ok(Bytes::from(*p))).collect())
            .await
            .expect("read");
        assert_eq!(read, Bytes::from(parts.concat()));
        assert_eq!(read_frames(Vec::new()).await.expect("read"), Bytes::new());
    }

    /// [`MAX_BODY`] bytes pass, in any frames; one byte more is `413`, in the first frame
    /// or a later one.
    #[tokio::test]
    async fn the_bound_holds_across_frames() {
        let half = || Ok(Bytes::from(vec![b'x'; MAX_BODY / 2]));
        assert_eq!(
            read_frames(vec![half(), half()]).await.expect("read").len(),
            MAX_BODY
        );
        let one = || Ok(Bytes::from_static(b"x"));
        for frames in [
            vec![half(), half(), one()],
            vec![one(), half(), half()],
            vec![Ok(Bytes::from(vec![b'x'; MAX_BODY + 1]))],
        ] {
            let error = read_frames(frames).await.expect_err("refused");
            assert!(matches!(error, ApiError::TooLarge(MAX_BODY)), "{error:?}");
        }
    }

    /// A body declared larger than the bound is refused without reading it: its first frame
    /// would fail otherwise.
    #[tokio::test]
    async fn a_declared_oversize_is_refused_unread() {
        let body = |declared| Frames {
            frames: VecDeque::from([Err(BodyTimedOut(Duration::from_secs(1)))]),
            declared: Some(declared),
        };
        let error = read(axum::body::Body::new(body(MAX_BODY as u64 + 1)))
            .await
            .expect_err("refused");
        assert!(matches!(error, ApiError::TooLarge(MAX_BODY)), "{error:?}");
        let error = read(axum::body::Body::new(body(MAX_BODY as u64)))
            .await
            .expect_err("refused");
        assert!(matches!(error, ApiError::BodyTimeout(_)), "{error:?}");
    }

    /// A body the connection layer gave up on is `408` with its timeout, after any frames.
    #[tokio::test]
    async fn a_late_body_is_a_body_timeout() {
        let after = Duration::from_millis(1_500);
        let error = read_frames(vec![Ok(Bytes::from_static(b"{")), Err(BodyTimedOut(after))])
            .await
            .expect_err("refused");
        assert!(
            matches!(error, ApiError::BodyTimeout(d) if d == after),
            "{error:?}"
        );
    }
}
