//! [`SharedClock`]: the clock the store, the limiters and the reloader share (the store's
//! time unless a test gives a fake one). Its own module so that the reloader, which builds
//! limit sets with it, needs nothing else of the server.

use std::sync::Arc;

use tollgate::{Clock, Timestamp};

/// A clock shared as a trait object (the limiter and memory store take one by value).
#[derive(Clone, Debug)]
pub struct SharedClock(Arc<dyn Clock>);

impl SharedClock {
    /// Shares `clock`.
    pub fn new(clock: impl Clock) -> SharedClock {
        SharedClock(Arc::new(clock))
    }
}

impl Clock for SharedClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }
}
