//! [`MessageBudget`]: how many bytes of gRPC messages still arriving the server holds, all
//! calls of all connections together, bounded by [`MESSAGE_BUDGET_BYTES`], and each
//! connection's calls together by [`CONNECTION_SHARE_BYTES`].
//!
//! A call's message is buffered until it is whole, then decoded. Each call is bounded (1 MiB,
//! [`crate::MAX_MESSAGE_BYTES`]), each connection too (100 calls in flight), and each call
//! ends at its deadline; but their product, over every connection a client may open, is not:
//! 200 calls of an unfinished 1 MB message on one connection took the service from 19 to 254
//! MB in under a second, held until their deadline (11 s). So every request body follows the
//! gRPC framing of what it receives (a 5-byte prefix giving each message's length) and counts
//! the bytes of its *unfinished* message, here and in its connection's share: a chunk that
//! leaves its message unfinished and would take either past its bound fails its call at once
//! with `RESOURCE_EXHAUSTED`, and gives back what that call held.
//!
//! The rules, and why:
//!
//! - **A chunk that completes its message is never refused.** Its message is decoded at once
//!   and its bytes given back; refusing it would free nothing that a moment does not, and
//!   would waste what the call had already sent. Envoy's calls (a few hundred bytes, whole in
//!   one chunk) and health checks never touch the budget, however full it is. Before, the
//!   budget was first come, first served for whole messages too: one connection holding 64
//!   calls of a message 8 bytes short of 1 MiB (re-opened as the call deadline reset them, ~6.7
//!   MB/s) had 32 of 34 ordinary calls and the health check refused.
//! - **A connection holds [`CONNECTION_SHARE_BYTES`] (4 MiB) at most**: four unfinished
//!   messages of the largest size. One connection can no longer fill the budget; it takes
//!   sixteen, each sending its 4 MiB again every call deadline. Past its share, a connection's
//!   own newest chunk is refused: its other calls keep going.
//! - **When the whole budget is full, the newcomer is refused** (an unfinished message's
//!   chunk, never a completing one), rather than an older message evicted: eviction needs a
//!   registry of calls and a way to wake and fail another connection's call, and a client that
//!   re-sends as fast as it is evicted wins either way; with whole messages exempt, what a
//!   full budget refuses is only messages sent in pieces, which Envoy's are not.
//! - **No deadline of its own**: the call deadline (`GrpcOptions::call_timeout`, from the
//!   request's headers) already bounds how long an unfinished message is held.
//!
//! Refusals are counted (`tollgate_grpc_budget_refusals_total`) and logged, at most once a
//! second.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tollgate::LogThrottle;

use super::connection::Connection;

/// The most bytes of messages still arriving that the server holds at once (64 MiB).
pub const MESSAGE_BUDGET_BYTES: usize = 64 << 20;

/// The most bytes of messages still arriving that one connection's calls hold at once (4 MiB:
/// four messages of [`crate::MAX_MESSAGE_BYTES`]).
pub const CONNECTION_SHARE_BYTES: usize = 4 << 20;

/// Bytes of messages held now, and the most there may be.
#[derive(Debug)]
pub(crate) struct MessageBudget {
    held: AtomicUsize,
    cap: usize,
    /// The most one connection holds.
    share: usize,
    /// Refusals are logged at most once a second (counted in full in the metric).
    warnings: LogThrottle,
}

/// Which bound a chunk would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Connection,
    Server,
}

impl MessageBudget {
    /// A budget of `cap` bytes, `share` at most per connection, none held.
    pub(crate) fn new(cap: usize, share: usize) -> Arc<MessageBudget> {
        Arc::new(MessageBudget {
            held: AtomicUsize::new(0),
            cap,
            share,
            warnings: LogThrottle::default(),
        })
    }

    /// Takes `n` bytes, unless that would pass the cap (then takes nothing).
    fn take(&self, n: usize) -> bool {
        let before = self.held.fetch_add(n, Ordering::AcqRel);
        if before + n > self.cap {
            self.held.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Takes `n` bytes for a call of `connection`: from its share, then from the budget; or
    /// nothing, and which was full.
    fn take_for(&self, connection: &Connection, n: usize) -> Result<(), Full> {
        if !connection.take_unfinished(n, self.share) {
            return Err(Full::Connection);
        }
        if !self.take(n) {
            connection.give_unfinished(n);
            return Err(Full::Server);
        }
        Ok(())
    }

    /// Gives `n` bytes of a call of `connection` back.
    fn give_for(&self, connection: &Connection, n: usize) {
        connection.give_unfinished(n);
        self.give(n);
    }

    /// A call refused because a bound is full: counted, and logged (at most once a second).
    fn refused(&self, full: Full) {
        metrics::counter!("tollgate_grpc_budget_refusals_total").increment(1);
        if let Some(also) = self.warnings.admit() {
            tracing::warn!(
                budget = self.cap,
                connection_share = self.share,
                held = self.held.load(Ordering::Acquire),
                full = ?full,
                also_refused_since_last_warning = also,
                "gRPC calls refused: unfinished messages fill their budget (a client sending \
                 messages it does not finish?)"
            );
        }
    }

    /// Gives `n` bytes back.
    fn give(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// Where a request body is in its gRPC framing: how many bytes of its current message have
/// arrived (prefix included) and how many are still to come.
#[derive(Debug, Default)]
struct Framing {
    prefix: [u8; 5],
    /// Bytes of the prefix received (5 once whole).
    prefix_len: usize,
    /// Bytes of the message still to come, once its prefix is whole.
    left: usize,
    /// Bytes of the current, unfinished message received so far (0 between messages).
    unfinished: usize,
}

impl Framing {
    /// Follows `data`: afterwards, `unfinished` is what of a message is still incomplete.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.prefix_len < 5 {
                let n = (5 - self.prefix_len).min(data.len());
                self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
                self.prefix_len += n;
                self.unfinished += n;
                data = &data[n..];
                if self.prefix_len == 5 {
                    let [_, a, b, c, d] = self.prefix;
                    self.left = u32::from_be_bytes([a, b, c, d]) as usize;
                    if self.left == 0 {
                        *self = Framing::default();
                    }
                }
                continue;
            }
            let n = self.left.min(data.len());
            self.left -= n;
            self.unfinished += n;
            data = &data[n..];
            if self.left == 0 {
                *self = Framing::default();
            }
        }
    }
}

/// A request body whose unfinished message counts against a [`MessageBudget`] and its
/// connection's share while it lives.
pub(crate) struct BudgetBody {
    inner: tonic::body::Body,
    budget: Arc<MessageBudget>,
    connection: Arc<Connection>,
    framing: Framing,
    /// What this body has taken from the budget (and its connection's share).
    held: usize,
}

impl BudgetBody {
    pub(crate) fn new(
        inner: tonic::body::Body,
        budget: Arc<MessageBudget>,
        connection: Arc<Connection>,
    ) -> BudgetBody {
        BudgetBody {
            inner,
            budget,
            connection,
            framing: Framing::default(),
            held: 0,
        }
    }
}

impl Drop for BudgetBody {
    fn drop(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.budget.give_for(&self.connection, held);
    }
}

impl Body for BudgetBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            None => return Poll::Ready(None),
        };
        let Some(data) = frame.data_ref() else {
            return Poll::Ready(Some(Ok(frame)));
        };
        this.framing.feed(data);
        let unfinished = this.framing.unfinished;
        if unfinished <= this.held {
            // A message completed (decoded next, its bytes free): never refused.
            this.budget
                .give_for(&this.connection, this.held - unfinished);
            this.held = unfinished;
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Err(full) = this
            .budget
            .take_for(&this.connection, unfinished - this.held)
        {
            // What this call held goes back now: it is refused, whatever it sends next.
            let held = std::mem::take(&mut this.held);
            this.budget.give_for(&this.connection, held);
            this.budget.refused(full);
            let message = match full {
                Full::Connection => format!(
                    "one connection's calls hold {CONNECTION_SHARE_BYTES} bytes of unfinished \
                     messages at most, and this one's are full; send the message whole"
                ),
                Full::Server => format!(
                    "the server holds {MESSAGE_BUDGET_BYTES} bytes of unfinished messages at \
                     most, and is full; send the message whole"
                ),
            };
            return Poll::Ready(Some(Err(tonic::Status::resource_exhausted(message))));
        }
        this.held = unfinished;
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// A gRPC message of `len` bytes (uncompressed), its prefix included.
    fn message(len: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 5 + len as usize];
        bytes[1..5].copy_from_slice(&len.to_be_bytes());
        bytes
    }

    /// A body of `chunks`, one frame each, under `budget` for `connection`.
    fn body(
        chunks: Vec<Vec<u8>>,
        budget: &Arc<MessageBudget>,
        connection: &Arc<Connection>,
    ) -> BudgetBody {
        let frames = chunks
            .into_iter()
            .map(|chunk| Ok::<_, tonic::Status>(Frame::data(Bytes::from(chunk))));
        BudgetBody::new(
            tonic::body::Body::new(http_body_util::StreamBody::new(tokio_stream::iter(frames))),
            Arc::clone(budget),
            Arc::clone(connection),
        )
    }

    #[test]
    fn a_budget_takes_up_to_its_cap_and_gets_bytes_back() {
        let budget = MessageBudget::new(100, 100);
        assert!(budget.take(60));
        assert!(!budget.take(41), "past the cap");
        assert_eq!(budget.held(), 60, "a refused take holds nothing");
        assert!(budget.take(40));
        budget.give(60);
        assert_eq!(budget.held(), 40);
    }

    #[test]
    fn framing_follows_messages_across_chunks() {
        let mut framing = Framing::default();
        let whole = message(3);
        framing.feed(&whole);
        assert_eq!(framing.unfinished, 0, "a whole message");
        framing.feed(&whole[..2]);
        assert_eq!(framing.unfinished, 2, "part of a prefix");
        framing.feed(&whole[2..6]);
        assert_eq!(framing.unfinished, 6);
        // The rest, then a whole empty message, then part of a next one.
        let mut rest = whole[6..].to_vec();
        rest.extend(message(0));
        rest.extend(&message(10)[..7]);
        framing.feed(&rest);
        assert_eq!(framing.unfinished, 7);
    }

    /// An unfinished message holds its bytes until it completes (then none) or the body is
    /// dropped; one past the connection's share is refused, and holds nothing.
    #[tokio::test]
    async fn unfinished_bytes_are_held_until_the_message_is_whole() {
        let budget = MessageBudget::new(100, 30);
        let connection = Connection::new();
        let whole = message(20);
        let mut first = body(
            vec![whole[..10].to_vec(), whole[10..].to_vec()],
            &budget,
            &connection,
        );
        first.frame().await.expect("a frame").expect("taken");
        assert_eq!((budget.held(), connection.unfinished()), (10, 10));
        first.frame().await.expect("a frame").expect("whole");
        assert_eq!(budget.held(), 0, "a whole message holds nothing");

        let mut second = body(vec![message(40)[..25].to_vec()], &budget, &connection);
        second.frame().await.expect("a frame").expect("taken");
        assert_eq!(connection.unfinished(), 25);
        let mut third = body(vec![message(40)[..10].to_vec()], &budget, &connection);
        let refused = third
            .frame()
            .await
            .expect("a frame")
            .expect_err("past the connection's share");
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert_eq!((budget.held(), connection.unfinished()), (25, 25));
        drop(second);
        assert_eq!((budget.held(), connection.unfinished()), (0, 0));
    }

    /// A full budget refuses a newcomer's unfinished chunk, never a whole message: whole
    /// messages are decoded at once, and are what Envoy and health checks send.
    #[tokio::test]
    async fn a_full_budget_refuses_unfinished_messages_never_whole_ones() {
        let budget = MessageBudget::new(30, 30);
        let hog = Connection::new();
        let mut holding = body(vec![message(100)[..30].to_vec()], &budget, &hog);
        holding.frame().await.expect("a frame").expect("taken");
        assert_eq!(budget.held(), 30);

        let other = Connection::new();
        let mut whole = body(vec![message(50)], &budget, &other);
        whole
            .frame()
            .await
            .expect("a frame")
            .expect("a whole message passes");
        let mut unfinished = body(vec![message(50)[..10].to_vec()], &budget, &other);
        let refused = unfinished
            .frame()
            .await
            .expect("a frame")
            .expect_err("past the budget");
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert!(
            refused.message().contains("the server holds"),
            "{refused:?}"
        );
        assert_eq!((budget.held(), other.unfinished()), (30, 0));
    }
}
