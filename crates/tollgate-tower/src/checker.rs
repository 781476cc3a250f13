//! The limiter with its store type erased, so that the layer and the service carry no store
//! type parameter and one `RateLimit<S>` type serves the memory store and Redis alike. The
//! price is one boxed future per request.

use std::future::Future;
use std::pin::Pin;

use tollgate::{CheckError, Limiter, Store, Verdict};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the service needs of a [`Limiter`].
pub(crate) trait Checker: Send + Sync + 'static {
    fn check_all<'a>(
        &'a self,
        limits: &'a [&'a str],
        key: &'a [(&'a str, &'a [u8])],
        cost: u64,
    ) -> BoxFuture<'a, Result<Verdict, CheckError>>;
}

impl<St: Store> Checker for Limiter<St> {
    fn check_all<'a>(
        &'a self,
        limits: &'a [&'a str],
        key: &'a [(&'a str, &'a [u8])],
        cost: u64,
    ) -> BoxFuture<'a, Result<Verdict, CheckError>> {
        Box::pin(Limiter::check_all(self, limits, key, cost))
    }
}
