//! [`TakeDone`]: a request waiting for another request's take of the same key.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::LeaseTier;
use crate::{Key, StoreError};

/// The future of [`LeaseTier::take_done`].
pub(crate) struct TakeDone<'t> {
    pub(super) tier: &'t LeaseTier,
    pub(super) key: &'t Key,
    pub(super) take: u64,
}

impl Future for TakeDone<'_> {
    type Output = Option<Arc<StoreError>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut map = self.tier.lock();
        match map.held.get_mut(self.key) {
            Some(h) if h.taking && h.takes_done == self.take => {
                if !h.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    h.waiters.push(cx.waker().clone());
                }
                Poll::Pending
            }
            Some(h) => Poll::Ready(match &h.failed {
                Some((take, error)) if *take == self.take => Some(Arc::clone(error)),
                _ => None,
            }),
            None => Poll::Ready(None),
        }
    }
}
