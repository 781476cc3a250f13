//! [`Shed`]: room for a new client when a listener is full, made by closing the connection
//! that has waited longest without a request.
//!
//! The cap (`max_connections`) bounds file descriptors, but by itself it lets an attacker who
//! keeps thousands of sockets open, sending nothing, hold every slot: new clients then wait in
//! the kernel's queue behind the attacker's next sockets until `header_timeout` frees a slot
//! (measured: 7–20 s for a new client under a 6 000-socket flood, or a timeout). So when the
//! listener is full, it accepts the next connection anyway and sheds one that is doing
//! nothing useful, oldest first:
//!
//! 1. a connection that has not yet sent a whole request head (HTTP/1: accepted and silent,
//!    or a head still arriving; HTTP/2: nothing at all read) — what a slowloris holds;
//! 2. else one whose client has taken none of an answer's bytes for 50 ms (its receive buffer
//!    full: it sends requests, pipelined, and reads no answers), whatever it is doing;
//! 3. else, on the HTTP API, a keep-alive connection idle between requests (its client
//!    reconnects when it has something to send);
//! 4. else, on the HTTP API, one whose request has waited for the rest of its body for a
//!    second ([`LONG_GRACE`]): a body trickled, or announced and never sent, a slot held for up
//!    to `body_timeout` each time. Real clients send a request's body (at most 16 KiB) with
//!    its head;
//! 5. else, on the gRPC listener, the HTTP/2 connection silent longest, once silent for a
//!    second ([`LONG_GRACE`] too): no call and no answer to a ping in that time. A client that
//!    answers the server's pings (every half `idle_timeout`) and calls nothing would otherwise
//!    hold its slot for ever; a proxy such as Envoy opens a connection again when it next has
//!    a call, and a call takes milliseconds, so one in flight for a second is rare.
//!
//! Otherwise a connection with a request in the service (a held `/v1/acquire`, a store call),
//! an HTTP/2 connection that spoke within the last second, or one accepted less than 50 ms
//! ago is never shed: the new connection then waits for a slot as before. A client that sends its request at once (every real client) moves out of reach
//! within those 50 ms. Shed connections are counted in `tollgate_connections_shed_total{listener}`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use super::phase::{Phase, Sheddable};

/// How long a connection must have gone without a whole request before it may be shed: a
/// client that connected a moment ago and sent its request at once must get the moment its
/// task needs to read it (a just-accepted connection is "without a request" until then).
pub(crate) const GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a connection whose client did speak must have made no progress before it may be
/// shed (a request waiting for the rest of its body, an HTTP/2 connection silent): far longer
/// than [`GRACE`], since a body on a slow link takes a while, and a call in flight leaves its
/// connection silent until answered.
pub(crate) const LONG_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The connections of one listener that may be shed.
#[derive(Debug)]
pub(crate) struct Shed {
    phases: Mutex<VecDeque<Weak<Phase>>>,
}

impl Shed {
    pub(crate) fn new() -> Arc<Shed> {
        Arc::new(Shed {
            phases: Mutex::new(VecDeque::new()),
        })
    }

    /// Follows `phase` (a new connection).
    pub(crate) fn register(&self, phase: &Arc<Phase>) {
        let mut phases = self
            .phases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Closed connections are dropped from the list now and then, so it stays about as
        // long as the cap.
        if phases.len() >= 64 && phases.len().is_power_of_two() {
            phases.retain(|p| p.strong_count() > 0);
        }
        phases.push_back(Arc::downgrade(phase));
    }

    /// Sheds the connection that has waited longest without a request (see the module
    /// docs); `false` when none may be shed now.
    ///
    /// Cheap under a flood, where it runs for every accept: the list is in accept order, and a
    /// connection without a request has been so since its accept, so the first such entry is
    /// the oldest (and when it is too young, so are all after it). Only when there is none are
    /// the stalled, idle, slow-bodied and silent HTTP/2 connections scanned.
    pub(crate) fn evict_one(&self) -> bool {
        let mut phases = self
            .phases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while phases.front().is_some_and(|p| p.strong_count() == 0) {
            phases.pop_front();
        }
        let mut no_request = None;
        for phase in phases.iter().filter_map(Weak::upgrade) {
            if let Some((Sheddable::NoRequest, since)) = phase.sheddable() {
                if since.elapsed() >= GRACE {
                    no_request = Some(phase);
                }
                break;
            }
        }
        let victim = no_request.or_else(|| {
            phases
                .iter()
                .filter_map(Weak::upgrade)
                .filter_map(|p| match p.sheddable() {
                    Some((Sheddable::Stalled, since)) if since.elapsed() >= GRACE => {
                        Some(((Sheddable::Stalled, since), p))
                    }
                    Some((Sheddable::Idle, since)) => Some(((Sheddable::Idle, since), p)),
                    Some((kind @ (Sheddable::SlowBody | Sheddable::Silent), since))
                        if since.elapsed() >= LONG_GRACE =>
                    {
                        Some(((kind, since), p))
                    }
                    _ => None,
                })
                .min_by_key(|(rank, _)| *rank)
                .map(|(_, p)| p)
        });
        drop(phases);
        match victim {
            Some(phase) => {
                phase.shed();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::connection::phase::{Mode, State};

    /// A connection whose client reads no answer goes before one idle between requests, even
    /// a younger one; but only once it has been so for the grace period. One whose body is
    /// late goes last, after a second; so does an HTTP/2 connection silent for a second.
    #[test]
    fn stalled_connections_go_before_idle_ones_and_late_bodies_after() {
        let shed = Shed::new();
        let long_ago = Instant::now() - 10 * GRACE;
        let idle = Phase::new(Mode::Http1);
        idle.update(|_| State::Idle(long_ago));
        let stalled = Phase::new(Mode::Http1);
        stalled.update(|_| State::Busy(1));
        stalled.stall(Some(Instant::now()));
        shed.register(&idle);
        shed.register(&stalled);

        // Stalled a moment ago: not yet; the idle one goes.
        assert!(shed.evict_one());
        assert!(idle.is_shed() && !stalled.is_shed());

        let idle_too = Phase::new(Mode::Http1);
        idle_too.update(|_| State::Idle(long_ago));
        shed.register(&idle_too);
        stalled.stall(Some(Instant::now() - 2 * GRACE));
        assert!(shed.evict_one());
        assert!(stalled.is_shed() && !idle_too.is_shed());

        // A body late for less than a second: not yet; for longer, after any idle one.
        let slow = Phase::new(Mode::Http1);
        slow.update(|_| State::Busy(1));
        slow.wait_for_body(Some(Instant::now() - LONG_GRACE / 2));
        let only_slow = Shed::new();
        only_slow.register(&slow);
        assert!(!only_slow.evict_one());
        slow.wait_for_body(Some(Instant::now() - 2 * LONG_GRACE));
        let idle_last = Phase::new(Mode::Http1);
        idle_last.update(|_| State::Idle(Instant::now()));
        only_slow.register(&idle_last);
        assert!(only_slow.evict_one());
        assert!(idle_last.is_shed() && !slow.is_shed());
        assert!(only_slow.evict_one());
        assert!(slow.is_shed());

        // HTTP/2: silent for a second, yes; for less, no.
        let quiet = Phase::new(Mode::Quiet);
        quiet.update(|_| State::Idle(Instant::now() - LONG_GRACE / 2));
        let only_quiet = Shed::new();
        only_quiet.register(&quiet);
        assert!(!only_quiet.evict_one());
        quiet.update(|_| State::Idle(Instant::now() - 2 * LONG_GRACE));
        assert!(only_quiet.evict_one());
        assert!(quiet.is_shed());

        // Busy, not stalled, its body whole: never.
        let busy = Phase::new(Mode::Http1);
        busy.update(|_| State::Busy(1));
        let only_busy = Shed::new();
        only_busy.register(&busy);
        assert!(!only_busy.evict_one());
        assert!(!busy.is_shed());
    }
}
