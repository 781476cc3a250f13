//! [`TakeDone`]: a request waiting for another request's take of the same key.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::{LeaseTier, Stamp, Waiter};
use crate::{Decision, Key, StoreError};

/// How a wait for a take ended.
#[derive(Debug)]
pub(crate) enum Waited {
    /// The take served this request: its cost is spent, from `Stamp`.
    Served(Decision, Stamp),
    /// The take failed: the failure policy applies, at once.
    Failed(Arc<StoreError>),
    /// The take ended without serving it (too few units, no answer, the entry gone): spend
    /// again.
    Again,
}

/// The future of [`LeaseTier::take_done`].
pub(crate) struct TakeDone<'t> {
    pub(super) tier: &'t LeaseTier,
    pub(super) key: &'t Key,
    pub(super) take: u64,
    pub(super) ticket: u64,
    pub(super) cost: u64,
    /// Ready was returned: nothing to undo on drop.
    pub(super) done: bool,
}

impl Future for TakeDone<'_> {
    type Output = Waited;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Waited> {
        let this = &mut *self;
        let mut map = this.tier.lock();
        let waited = match map.held.get_mut(this.key) {
            Some(h) => {
                if let Some(at) = h.served.iter().position(|(t, ..)| *t == this.ticket) {
                    let (_, decision, stamp) = h.served.swap_remove(at);
                    Waited::Served(decision, stamp)
                } else if h.taking && h.takes_done == this.take {
                    match h.waiters.iter_mut().find(|w| w.ticket == this.ticket) {
                        Some(w) if w.waker.will_wake(cx.waker()) => {}
                        Some(w) => w.waker.clone_from(cx.waker()),
                        None => h.waiters.push(Waiter {
                            ticket: this.ticket,
                            cost: this.cost,
                            waker: cx.waker().clone(),
                        }),
                    }
                    return Poll::Pending;
                } else {
                    match &h.failed {
                        Some((take, error)) if *take == this.take => {
                            Waited::Failed(Arc::clone(error))
                        }
                        _ => Waited::Again,
                    }
                }
            }
            // Given back (a reload, a shutdown): served before that, its answer was kept.
            None => match map
                .served_gone
                .iter()
                .position(|(k, t, ..)| *t == this.ticket && k == this.key)
            {
                Some(at) => {
                    let (.., decision, stamp) = map.served_gone.swap_remove(at);
                    Waited::Served(decision, stamp)
                }
                None => Waited::Again,
            },
        };
        this.done = true;
        Poll::Ready(waited)
    }
}

impl Drop for TakeDone<'_> {
    /// A request dropped while it waited (a timeout, a client gone): it leaves the queue, and
    /// units a take already served it go back to the lease.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut map = self.tier.lock();
        let Some(h) = map.held.get_mut(self.key) else {
            return;
        };
        h.waiters.retain(|w| w.ticket != self.ticket);
        if let Some(at) = h.served.iter().position(|(t, ..)| *t == self.ticket) {
            let (.., stamp) = h.served.swap_remove(at);
            h.give_back_from(stamp, self.cost);
        }
    }
}
