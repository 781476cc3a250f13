//! [`HeldAcquires`]: at most half of the HTTP listener's connections wait in a held
//! `/v1/acquire`.
//!
//! A held acquire (`"hold": true`) keeps its connection busy with a request in the service
//! until its slot, up to `server.max_acquire_wait`, and a connection busy in the service is
//! never shed to make room for a new client (`connection/shed.rs`). So held acquires alone
//! could take every one of the listener's `max_connections`: booking a key's slots a minute
//! ahead takes a few acquires of the key's whole capacity (its own quota, which the caller may
//! spend as it likes), and then every held acquire on that key waits a minute. An audit did
//! that on a listener of 256: `/healthz` answered after 57.7 s, every other client waiting in
//! the kernel's queue behind the held ones.
//!
//! So at most half of `max_connections` may hold an acquire at once. Past that, an acquire
//! asking to hold is answered 503 (`Retry-After: 1`, counted in
//! `tollgate_held_acquires_refused_total`; those held now are `tollgate_held_acquires`)
//! before anything is booked, and its connection is
//! idle again, which the listener may shed. The other half stays for every other request,
//! where a full listener sheds as before. An acquire without `hold` answers at once and is
//! not counted.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::metrics::HELD_ACQUIRES;

/// The held acquires of the HTTP listener, and how many may be held at once.
#[derive(Debug)]
pub(crate) struct HeldAcquires {
    held: AtomicUsize,
    cap: usize,
}

/// One held acquire's place, given back when dropped (answered, or its client gone).
#[derive(Debug)]
pub(crate) struct Hold<'a>(&'a AtomicUsize);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!(HELD_ACQUIRES).decrement(1.0);
    }
}

impl HeldAcquires {
    /// Room for half of `max_connections` (at least one).
    pub(crate) fn new(max_connections: usize) -> HeldAcquires {
        HeldAcquires {
            held: AtomicUsize::new(0),
            cap: (max_connections / 2).max(1),
        }
    }

    /// A place for one more held acquire; `None` when every place is taken.
    pub(crate) fn try_hold(&self) -> Option<Hold<'_>> {
        if self.held.fetch_add(1, Ordering::AcqRel) >= self.cap {
            self.held.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        metrics::gauge!(HELD_ACQUIRES).increment(1.0);
        Some(Hold(&self.held))
    }

    /// How many may be held at once.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Half the connections, at least one; a place comes back when its hold is dropped, and
    /// a refused try takes none.
    #[test]
    fn half_the_connections_hold_at_once() {
        assert_eq!(HeldAcquires::new(1).cap(), 1);
        assert_eq!(HeldAcquires::new(4096).cap(), 2048);
        let held = HeldAcquires::new(5);
        let first = held.try_hold().expect("room");
        let second = held.try_hold().expect("room");
        assert!(held.try_hold().is_none(), "two of five");
        assert!(held.try_hold().is_none(), "a refusal takes no place");
        drop(first);
        let third = held.try_hold().expect("a place came back");
        assert!(held.try_hold().is_none());
        drop((second, third));
        assert_eq!(held.held.load(Ordering::Acquire), 0);
    }
}
