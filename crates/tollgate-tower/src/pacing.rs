//! Delaying a request until its slot ([`crate::RateLimitLayer::delay_up_to`]) instead of
//! answering 429.
//!
//! The layer's [`Config`](crate::layer::Config) is generic over any [`Store`], while a
//! reservation that gives its slot back when the request is dropped needs a store it can clone
//! into a background task ([`Limiter::acquire`]). So the acquiring is closed over here, where
//! `St: Clone` is known, and the service only calls the closure: the service's bounds stay
//! those of a plain check.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{CheckError, Limiter, Reservation, Store};

use crate::KeyParts;

type Acquiring<'a> = Pin<Box<dyn Future<Output = Result<Reservation, CheckError>> + Send + 'a>>;

/// Takes a key's slot of the layer's one limit at a cost, and sleeps until it begins; the
/// slot is given back if the request is dropped while it waits.
pub(crate) type Pacer = Arc<dyn for<'a> Fn(&'a KeyParts, u64) -> Acquiring<'a> + Send + Sync>;

/// The pacer of `limit`, waiting at most `max_wait` for a slot.
pub(crate) fn pacer<St: Store + Clone>(
    limiter: &Arc<Limiter<St>>,
    limit: &Arc<str>,
    max_wait: Duration,
) -> Pacer {
    let (limiter, limit) = (Arc::clone(limiter), Arc::clone(limit));
    Arc::new(move |key: &KeyParts, cost: u64| -> Acquiring<'_> {
        let (limiter, limit) = (Arc::clone(&limiter), Arc::clone(&limit));
        Box::pin(async move {
            let parts: Vec<(&str, &[u8])> = key.iter().collect();
            limiter.acquire(&limit, &parts, cost, max_wait).await
        })
    })
}
