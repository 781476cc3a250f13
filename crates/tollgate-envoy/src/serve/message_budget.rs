//! [`MessageBudget`]: how many bytes of gRPC messages still arriving the server holds, all
//! calls of all connections together, bounded by [`MESSAGE_BUDGET_BYTES`].
//!
//! A call's message is buffered until it is whole, then decoded. Each call is bounded (1 MiB,
//! [`crate::MAX_MESSAGE_BYTES`]), each connection too (1024 calls in flight), and each call
//! ends at its deadline; but their product, over every connection a client may open, is not:
//! 200 calls of an unfinished 1 MB message on one connection took the service from 19 to 254
//! MB in under a second, held until their deadline (11 s). So every request body counts its
//! bytes here as they arrive and gives them back when it ends (whole and decoded, refused, or
//! dropped); a chunk that would take the total past the budget fails its call at once with
//! `RESOURCE_EXHAUSTED`, and gives back what that call held.
//!
//! Envoy's calls are a few hundred bytes, whole in one chunk, and leave the budget as soon as
//! they are decoded: a thousand calls in flight hold under a megabyte of it. Only messages that
//! stay unfinished fill it; while they do, new calls are refused rather than the process
//! running out of memory. Refusals are counted (`tollgate_grpc_budget_refusals_total`) and
//! logged, at most once a second.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tollgate::LogThrottle;

/// The most bytes of messages still arriving that the server holds at once (64 MiB).
pub const MESSAGE_BUDGET_BYTES: usize = 64 << 20;

/// Bytes of messages held now, and the most there may be.
#[derive(Debug)]
pub(crate) struct MessageBudget {
    held: AtomicUsize,
    cap: usize,
    /// Refusals are logged at most once a second (counted in full in the metric).
    warnings: LogThrottle,
}

impl MessageBudget {
    /// A budget of `cap` bytes, none held.
    pub(crate) fn new(cap: usize) -> Arc<MessageBudget> {
        Arc::new(MessageBudget {
            held: AtomicUsize::new(0),
            cap,
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

    /// A call refused because the budget is full: counted, and logged (at most once a second).
    fn refused(&self) {
        metrics::counter!("tollgate_grpc_budget_refusals_total").increment(1);
        if let Some(also) = self.warnings.admit() {
            tracing::warn!(
                budget = self.cap,
                held = self.held.load(Ordering::Acquire),
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

/// A request body whose bytes count against a [`MessageBudget`] while it lives.
pub(crate) struct BudgetBody {
    inner: tonic::body::Body,
    budget: Arc<MessageBudget>,
    /// What this body has taken from the budget.
    held: usize,
}

impl BudgetBody {
    pub(crate) fn new(inner: tonic::body::Body, budget: Arc<MessageBudget>) -> BudgetBody {
        BudgetBody {
            inner,
            budget,
            held: 0,
        }
    }
}

impl Drop for BudgetBody {
    fn drop(&mut self) {
        self.budget.give(std::mem::take(&mut self.held));
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
        if let Some(data) = frame.data_ref() {
            if !this.budget.take(data.len()) {
                // What this call held goes back now: it is refused, whatever it sends next.
                this.budget.give(std::mem::take(&mut this.held));
                this.budget.refused();
                return Poll::Ready(Some(Err(tonic::Status::resource_exhausted(format!(
                    "the server holds {MESSAGE_BUDGET_BYTES} bytes of unfinished messages at \
                     most, and is full; send the message whole"
                )))));
            }
            this.held += data.len();
        }
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
    use super::*;

    #[test]
    fn a_budget_takes_up_to_its_cap_and_gets_bytes_back() {
        let budget = MessageBudget::new(100);
        assert!(budget.take(60));
        assert!(!budget.take(41), "past the cap");
        assert_eq!(budget.held(), 60, "a refused take holds nothing");
        assert!(budget.take(40));
        budget.give(60);
        assert_eq!(budget.held(), 40);
    }

    #[tokio::test]
    async fn a_body_holds_its_bytes_until_dropped_and_a_refused_one_none() {
        use http_body_util::BodyExt as _;
        let budget = MessageBudget::new(10);
        let mut body = BudgetBody::new(
            tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(b"123456"))),
            Arc::clone(&budget),
        );
        let frame = body.frame().await.expect("a frame").expect("taken");
        assert_eq!(frame.data_ref().map(Bytes::len), Some(6));
        assert_eq!(budget.held(), 6);
        let mut second = BudgetBody::new(
            tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(b"123456"))),
            Arc::clone(&budget),
        );
        let refused = second
            .frame()
            .await
            .expect("a frame")
            .expect_err("past the budget");
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert_eq!(budget.held(), 6);
        drop(body);
        assert_eq!(budget.held(), 0);
    }
}
