//! [`Current`]: the master a [`super::Sentinel`] sends calls to now.

use redis::aio::ConnectionManager;

/// The master in use: its address as the sentinels name it, a client for it (the reset
/// listener's subscriptions) and the calls' connection.
#[derive(Clone)]
pub(crate) struct Current {
    pub(crate) addr: (String, u16),
    pub(crate) client: redis::Client,
    pub(crate) manager: ConnectionManager,
}
