//! [`Limiter::acquire`]: a reservation slept until, given back when the caller gives up.
//!
//! The wait is slept on the runtime's timer (tokio), not on the limiter's clock: the slot's
//! time comes from the store (Redis `TIME` by default), and the wait is a duration from the
//! reservation, which any local timer measures. A caller that stops waiting (its future is
//! dropped: a timeout, a shutdown) gives its slot back with a cancellation spawned on the
//! runtime, since a destructor cannot wait for a store call. As [`Limiter::cancel`], once the
//! units are back it forgets the key's refusals this instance's deny cache holds: they
//! counted the slot.

use std::time::Duration;

use super::Limiter;
use crate::{CheckError, Clock, Entry, MemoryStore, SteadyClock, Store};

use super::pacing::given_back_or_lost;
use crate::{Pace, Reservation};

impl<S: Store + Clone> Limiter<S> {
    /// Reserves `cost` units of `limit` for `key` ([`Limiter::reserve`]) and, when a slot
    /// within `max_wait` was taken, sleeps until it begins. The reservation is answered
    /// after the sleep (allowed), or at once when refused (limited, or unavailable by the
    /// limit's failure policy). Dropping the future while it sleeps gives the slot back
    /// ([`Limiter::cancel`]) when no later slot was handed out after it.
    ///
    /// Needs a tokio runtime with its timer enabled.
    ///
    /// # Errors
    /// As [`Limiter::reserve`].
    pub async fn acquire<V: AsRef<[u8]>>(
        &self,
        limit: &str,
        key: &[(&str, V)],
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation, CheckError> {
        let reservation = self.reserve(limit, key, cost, max_wait).await?;
        if let Some(wait) = reservation.wait().filter(|w| !w.is_zero()) {
            let mut guard = CancelOnDrop {
                limiter: Some(self),
                reservation: &reservation,
            };
            tokio::time::sleep(wait).await;
            guard.limiter = None;
        }
        Ok(reservation)
    }
}

/// Gives a reservation's slot back when dropped armed (`limiter` set): the sleep of
/// [`Limiter::acquire`] did not end.
struct CancelOnDrop<'a, S: Store + Clone> {
    limiter: Option<&'a Limiter<S>>,
    reservation: &'a Reservation,
}

impl<S: Store + Clone> Drop for CancelOnDrop<'_, S> {
    fn drop(&mut self) {
        let Some(limiter) = self.limiter.take() else {
            return;
        };
        let Some(slot) = self.reservation.slot_to_cancel() else {
            return;
        };
        let reservation = self.reservation.clone();
        let pace = Pace::Cancel {
            ticket: slot.ticket(),
        };
        if reservation.on_local() {
            // The local fallback answers in this process: no task needed.
            let now = limiter.now().unwrap_or_else(|| SteadyClock.now());
            let local = limiter.local.get_or_init(MemoryStore::new);
            let entry =
                Entry::new(&reservation.limit, reservation.key.clone()).with_cost(reservation.cost);
            let given_back = matches!(local.pace_at(&entry, pace, now), Ok(p) if p.given_back);
            if given_back {
                // As `Limiter::cancel`: a refusal cached before counted the slot's units.
                limiter.forget_cached(&reservation.key);
            }
            super::pacing::count_reservation(&reservation.limit, given_back_or_lost(given_back));
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                limit = reservation.limit.name(),
                "no runtime to give a slot back: it is lost"
            );
            return;
        };
        let store = limiter.store.clone();
        // A handle to the limiter's deny cache: the task outlives the borrow of the limiter.
        let deny_cache = limiter.deny_cache.clone();
        let now = limiter.now();
        runtime.spawn(async move {
            let entry =
                Entry::new(&reservation.limit, reservation.key.clone()).with_cost(reservation.cost);
            let result = store.pace(&entry, pace, now).await;
            let given_back = matches!(result, Ok(p) if p.given_back);
            if given_back && let Some(cache) = &deny_cache {
                // As `Limiter::cancel`, once the units are back: forgotten any earlier, a check
                // made meanwhile would cache a refusal that counts them again.
                cache.forget(&reservation.key);
            }
            super::pacing::count_reservation(&reservation.limit, given_back_or_lost(given_back));
        });
    }
}
