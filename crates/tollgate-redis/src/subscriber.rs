//! [`Subscriber`]: where the reset listener (`src/resets.rs`) subscribes: a fixed node, or the
//! current master behind Sentinel, followed through failovers.

use std::sync::Arc;

use crate::sentinel::Sentinel;

/// How the reset listener reaches Redis: a fixed node (the single Redis, or any node of a
/// cluster, where pub/sub is broadcast), or the current master behind Sentinel.
#[derive(Clone)]
pub(crate) enum Subscriber {
    /// Boxed: a client holds its whole connection info, and this is made once per store.
    Fixed(Box<redis::Client>),
    Sentinel(Arc<Sentinel>),
}

impl Subscriber {
    /// The client to subscribe with now.
    pub(crate) fn client(&self) -> redis::Client {
        match self {
            Subscriber::Fixed(c) => (**c).clone(),
            Subscriber::Sentinel(s) => s.current().client,
        }
    }
}
