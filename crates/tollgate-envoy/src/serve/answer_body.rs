//! [`AnswerBody`]: an answer's body whose messages are *owed* to the client
//! ([`Connection::owe`]) until they have left; and [`Accounted`], the layer that puts every
//! call of a connection under that connection's [`Connection`]: its request body in a
//! [`BudgetBody`], its answer in an [`AnswerBody`].
//!
//! hyper takes an answer's message from its body at once and hands it to h2, which holds it
//! until the client's HTTP/2 window lets it out (and hyper's task, and the body, are done by
//! then: the body says nothing of whether the client took the answer). So each message's
//! bytes go out as a [`Bytes`] that owns its owed mark: the mark is paid when h2 drops those
//! bytes, that is, once it has written them out for the socket, or dropped the stream or the
//! connection. Trailers follow the message they close (headers need no window). A health
//! `Watch` between updates holds no bytes, and owes nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tonic::codegen::http::{Request, Response};

use super::connection::{Connection, TrackedInfo};
use super::message_budget::{BudgetBody, MessageBudget};

/// An answer's body, its messages owed to `connection` until they have left.
pub(crate) struct AnswerBody {
    inner: tonic::body::Body,
    connection: Arc<Connection>,
}

impl AnswerBody {
    pub(crate) fn new(inner: tonic::body::Body, connection: Arc<Connection>) -> AnswerBody {
        AnswerBody { inner, connection }
    }
}

/// Bytes of an answer owed to the client: paid when dropped (sent, or given up).
struct Owed {
    bytes: Bytes,
    connection: Arc<Connection>,
    id: u64,
}

impl AsRef<[u8]> for Owed {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        self.connection.paid(self.id);
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let polled = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let Some(Ok(frame)) = polled else {
            return Poll::Ready(polled);
        };
        let frame = match frame.into_data() {
            Ok(bytes) if !bytes.is_empty() => {
                let connection = Arc::clone(&this.connection);
                let id = connection.owe();
                Frame::data(Bytes::from_owner(Owed {
                    bytes,
                    connection,
                    id,
                }))
            }
            Ok(bytes) => Frame::data(bytes),
            Err(frame) => frame,
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The service under tonic's, for connections whose connect info is a [`TrackedInfo<T>`]: puts
/// the socket's own connect info (`T`) back in the request, and its bodies under the
/// connection (see the module docs).
#[derive(Debug)]
pub(crate) struct Accounted<S, T> {
    inner: S,
    budget: Arc<MessageBudget>,
    _info: std::marker::PhantomData<fn() -> T>,
}

impl<S: Clone, T> Clone for Accounted<S, T> {
    fn clone(&self) -> Self {
        Accounted {
            inner: self.inner.clone(),
            budget: Arc::clone(&self.budget),
            _info: std::marker::PhantomData,
        }
    }
}

impl<S, T> Accounted<S, T> {
    pub(crate) fn new(inner: S, budget: Arc<MessageBudget>) -> Accounted<S, T> {
        Accounted {
            inner,
            budget,
            _info: std::marker::PhantomData,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, T> tower::Service<Request<tonic::body::Body>> for Accounted<S, T>
where
    S: tower::Service<Request<tonic::body::Body>, Response = Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<tonic::body::Body>) -> Self::Future {
        // tonic puts the connect info in every request; a request without (a test calling
        // the service directly) gets a connection of its own.
        let connection = match request.extensions_mut().remove::<TrackedInfo<T>>() {
            Some(info) => {
                request.extensions_mut().insert(info.inner);
                info.connection
            }
            None => Connection::new(),
        };
        let budget = Arc::clone(&self.budget);
        let owner = Arc::clone(&connection);
        let request =
            request.map(|body| tonic::body::Body::new(BudgetBody::new(body, budget, owner)));
        let answered = self.inner.call(request);
        Box::pin(async move {
            let response = answered.await?;
            Ok(response.map(|body| tonic::body::Body::new(AnswerBody::new(body, connection))))
        })
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// A message is owed from when the body gives it until its bytes are dropped (sent, or
    /// given up with their stream); the body's end owes nothing.
    #[tokio::test]
    async fn an_answer_is_owed_until_its_bytes_are_dropped() {
        let connection = Connection::new();
        let mut answer = AnswerBody::new(
            tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(b"answer"))),
            Arc::clone(&connection),
        );
        assert_eq!(connection.owed_answers(), 0, "nothing given yet");
        let frame = answer.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.data_ref().map(|b| &b[..]), Some(&b"answer"[..]));
        assert_eq!(connection.owed_answers(), 1, "given, not yet sent");
        assert!(answer.frame().await.is_none());
        assert_eq!(
            connection.owed_answers(),
            1,
            "the end of the body pays nothing"
        );
        let copy = frame.into_data().expect("data");
        let part = copy.slice(1..3);
        drop(copy);
        assert_eq!(connection.owed_answers(), 1, "a part of it still held");
        drop(part);
        assert_eq!(connection.owed_answers(), 0, "sent");
    }
}
