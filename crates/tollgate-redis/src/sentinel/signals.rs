//! [`Signals`]: what makes a [`super::Sentinel`]'s follower look for the master now, shared
//! with the tasks that hear the sentinels' `+switch-master` announcements.

use std::sync::Mutex;

use tokio::sync::Notify;

/// A wake-up for the follower, and the address a sentinel just announced as the new master.
#[derive(Default)]
pub(super) struct Signals {
    /// Woken by a failing call ([`super::Sentinel::suspect`]) or an announcement.
    pub(super) wake: Notify,
    /// The newest `+switch-master` address not yet tried.
    hint: Mutex<Option<(String, u16)>>,
}

impl Signals {
    /// A sentinel announced `addr` as the new master: try it first on the next look, now.
    pub(super) fn announce(&self, addr: (String, u16)) {
        *self
            .hint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(addr);
        self.wake.notify_one();
    }

    /// The announced address, once.
    pub(super) fn take_hint(&self) -> Option<(String, u16)> {
        self.hint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}
