//! Reservations and settlements through the limiter: validated like a check, one store call
//! each, the limit's failure policy when a reservation's store call fails.
//!
//! A reservation of a shadow limit is a check of it (counted, never waited for): a shadow
//! limit must not change what callers do, and making them sleep would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Limiter, count_shadow_denial, limit_decision, policy_denial, store_latency};
use crate::verdict::{LimitDecision, Source};
use crate::{
    CheckError, Clock, Decision, Entry, Key, Limit, MemoryStore, OnStoreError, Op, Slot,
    SteadyClock, Store, StoreError, Timestamp,
};

use crate::{Pace, Paced, Reservation, SettleError};

impl<S: Store> Limiter<S> {
    /// Reserves `cost` units of `limit` for `key`: the key's next free slot when it begins
    /// within `max_wait`, and the wait until it ([`Reservation::wait`]); a slot further away
    /// is refused ([`crate::Outcome::Limited`], charging nothing). Concurrent reservations,
    /// on every instance, get consecutive slots of the limit's schedule. The caller sleeps
    /// the wait itself, or calls [`Limiter::acquire`], which does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, FakeClock, Limit, Limiter, MemoryStore, Outcome, Quota, Timestamp};
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let clock = FakeClock::new(Timestamp::from_micros(1_000_000_000));
    /// let limiter = Limiter::builder(MemoryStore::builder().clock(clock.clone()).build())
    ///     .clock(clock)
    ///     .limit(Limit::new("upstream", Algorithm::Gcra, Quota::per_minute(60)?.with_burst(1)?)?)
    ///     .build()?;
    /// let no_key: [(&str, &str); 0] = [];
    /// let wait = |r: &tollgate::Reservation| r.wait();
    /// let first = limiter.reserve("upstream", &no_key, 1, Duration::from_secs(5)).await?;
    /// assert_eq!(wait(&first), Some(Duration::ZERO));
    /// let second = limiter.reserve("upstream", &no_key, 1, Duration::from_secs(5)).await?;
    /// assert_eq!(wait(&second), Some(Duration::from_secs(1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    ///
    /// `max_wait` is counted from this call: a store call that took a while (a stalled Redis,
    /// a call sent again) leaves less of it, and a slot whose wait, added to the time the
    /// store call took, would go past `max_wait` is given back and refused. So the caller's
    /// whole wait, the call and [`Reservation::wait`] together, is at most `max_wait`. A call
    /// answered within a millisecond (a round trip to Redis) is not counted,
    /// so that a `max_wait` of zero still takes a free slot from a remote store.
    ///
    /// # Errors
    /// As [`Limiter::check_n`], [`CheckError::CannotReserve`] for a limit whose algorithm
    /// has no slots to hand out (only GCRA and the token bucket do), and
    /// [`CheckError::MaxWaitTooLong`] for a `max_wait` above an hour
    /// ([`crate::rules::DEBT_HORIZON_US`], the deepest queue settlements count with).
    pub async fn reserve<V: AsRef<[u8]>>(
        &self,
        limit: &str,
        key: &[(&str, V)],
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation, CheckError> {
        let now = self.now();
        let started = Started::now(now);
        if max_wait > MAX_WAIT {
            return Err(CheckError::MaxWaitTooLong {
                limit: limit.to_owned(),
                max_wait,
                longest: MAX_WAIT,
            });
        }
        let request = self.prepare(&[limit], key, cost)?;
        let entry = &request.entries()[0];
        if !entry.limit.algorithm().reserves() {
            return Err(CheckError::CannotReserve {
                limit: limit.to_owned(),
                algorithm: entry.limit.algorithm().name().to_owned(),
            });
        }
        let (decision, slot) = if entry.shadow {
            let d = self.run(&request, Op::Check, now).await.remove(0);
            if d.shadow_refused() {
                count_shadow_denial(&d);
            }
            (d, None)
        } else {
            self.reserve_within(entry, max_wait, now, &started).await
        };
        let result = if decision.shown_allowed() {
            "reserved"
        } else {
            "refused"
        };
        count_reservation(entry.limit, result);
        Ok(Reservation {
            limit: entry.limit.clone(),
            key: entry.key.clone(),
            cost,
            decision,
            slot,
            cancelled: Arc::default(),
        })
    }

    /// Gives back a reservation's slot the caller will not use (it gave up waiting, it is
    /// shutting down): the units return to the key when no later slot was handed out after
    /// this one, and are lost otherwise (the upstream then sees one idle slot). Returns
    /// whether they returned. A reservation that took no slot gives nothing back, and neither
    /// does one already cancelled (here, or a clone of it): the store hands a given-back slot,
    /// ticket and all, to the next reservation, whose units a second cancellation would give
    /// back. Units that returned also end the refusals of the key this instance's deny cache
    /// holds.
    ///
    /// # Errors
    /// The store's failure (counted and logged); the slot is then lost (the call may have
    /// given it back: it is not tried again).
    pub async fn cancel(&self, reservation: &Reservation) -> Result<bool, StoreError> {
        let Some(slot) = reservation.slot_to_cancel() else {
            return Ok(false);
        };
        let entry =
            Entry::new(&reservation.limit, reservation.key.clone()).with_cost(reservation.cost);
        let pace = Pace::Cancel {
            ticket: slot.ticket(),
        };
        let paced = if reservation.on_local() {
            let now = self.now().unwrap_or_else(|| SteadyClock.now());
            let local = self.local.get_or_init(MemoryStore::new);
            local.pace_at(&entry, pace, now)
        } else {
            self.pace_store(&entry, pace, self.now()).await
        }?;
        if paced.given_back {
            self.forget_cached(&entry.key);
        }
        count_reservation(entry.limit, given_back_or_lost(paced.given_back));
        Ok(paced.given_back)
    }

    /// Settles a cost known only afterwards: `delta > 0` charges that many more units of
    /// `limit` for `key` whatever the quota says (past the limit it is a debt that later
    /// callers wait out), `delta < 0` gives back `-delta` units the key still counts (never
    /// past a full quota, never units that already left the window or refilled). Every
    /// algorithm; docs/algorithms.md says what each does. Answers the key's state after.
    ///
    /// # Errors
    /// [`SettleError::Check`] as for [`Limiter::check_n`] (`|delta|` must be at most the
    /// limit's capacity, one call's worth); [`SettleError::Store`] when the store fails:
    /// nothing was settled, and no policy can settle in its place.
    pub async fn adjust<V: AsRef<[u8]>>(
        &self,
        limit: &str,
        key: &[(&str, V)],
        delta: i64,
    ) -> Result<Decision, SettleError> {
        let request = self.prepare(&[limit], key, delta.unsigned_abs().max(1))?;
        let entry = &request.entries()[0];
        // Checked here too: a shadow limit's cost above its capacity is no error for a check
        // (`Request` clamps it), but a settlement applies `delta` itself.
        crate::request::fits(entry.limit, delta.unsigned_abs())?;
        let paced = self
            .pace_store(entry, Pace::Adjust { delta }, self.now())
            .await?;
        if delta < 0 {
            self.forget_cached(&entry.key);
        }
        metrics::counter!(
            "tollgate_adjusted_units_total",
            "limit" => Arc::clone(entry.limit.name_arc()),
            "direction" => if delta < 0 { "refund" } else { "charge" }
        )
        .increment(delta.unsigned_abs());
        Ok(paced.decision)
    }

    /// One pacing call to the store, timed like a check's; a failure counted and logged.
    async fn pace_store(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        let started = (!self.store.in_process()).then(Instant::now);
        let result = self.store.pace(entry, pace, now).await;
        if let Some(started) = started {
            store_latency(started, result.as_ref().err());
        }
        if let Err(error) = &result {
            metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().as_str())
                .increment(1);
            self.warn_rate_limited(error);
        }
        result
    }

    /// A reservation whose slot begins within `max_wait` of `started`: the store's (or the
    /// policy's) answer, its slot given back and refused when the store call took so long
    /// that the slot's wait would end past `max_wait`. The store counts the budget from its
    /// call too (Redis sends what is left of it with each try), but a call can wait before
    /// its script runs (bytes queued to a stalled node, a cluster client's own retries): only
    /// here is the whole time known. The wait is from the store's answer, which comes after
    /// the slot was computed, so sleeping it never goes early.
    async fn reserve_within(
        &self,
        entry: &Entry<'_>,
        max_wait: Duration,
        now: Option<Timestamp>,
        started: &Started,
    ) -> (LimitDecision, Option<Slot>) {
        let (mut decision, slot) = self.pace_or_policy(entry, max_wait, now, started).await;
        let Some(taken) = slot else {
            return (decision, None);
        };
        // An in-process store answers within the call, at the reservation's instant: there is
        // no delay to count (and measuring nanoseconds would refuse slots at exactly
        // `max_wait`).
        if self.store.in_process() && matches!(decision.source, Source::Store) {
            return (decision, slot);
        }
        let spent = counted(started.elapsed(self.now()));
        let Some(over) = (spent + taken.wait())
            .checked_sub(max_wait)
            .filter(|o| !o.is_zero())
        else {
            return (decision, slot);
        };
        // Too late for this caller: the slot goes back (lost if a later one was handed out
        // meanwhile), and the reservation is refused, charging nothing.
        let cancel = Pace::Cancel {
            ticket: taken.ticket(),
        };
        let on_local = matches!(
            decision.source,
            Source::Policy {
                policy: OnStoreError::Local,
                ..
            }
        );
        let given = if on_local {
            let at = self.now().unwrap_or_else(|| SteadyClock.now());
            let local = self.local.get_or_init(MemoryStore::new);
            local.pace_at(entry, cancel, at).ok()
        } else {
            self.pace_store(entry, cancel, self.now()).await.ok()
        };
        let given_back = given.as_ref().is_some_and(|p| p.given_back);
        if given_back {
            self.forget_cached(&entry.key);
        }
        count_reservation(entry.limit, given_back_or_lost(given_back));
        let after = given.map_or(decision.decision, |p| p.decision);
        decision.decision =
            Decision::refused(after.limit, after.remaining, after.reset_after, over);
        (decision, None)
    }

    /// A reservation in the store, or the limit's failure policy when the store fails:
    /// `allow` goes now, `deny` refuses (retry in 1 s), `local` reserves on this
    /// instance's memory store, within what is left of `max_wait` after the failed call.
    async fn pace_or_policy(
        &self,
        entry: &Entry<'_>,
        max_wait: Duration,
        now: Option<Timestamp>,
        started: &Started,
    ) -> (LimitDecision, Option<Slot>) {
        let pace = Pace::Reserve { max_wait };
        let error = match self.pace_store(entry, pace, now).await {
            Ok(paced) => {
                return (
                    limit_decision(entry, paced.decision, Source::Store),
                    paced.slot,
                );
            }
            Err(error) => error,
        };
        let policy = entry.limit.policy();
        let limit = entry.limit.quota().limit();
        let (decision, slot) = match policy {
            OnStoreError::Allow => (Decision::allowed(limit, limit, Duration::ZERO), None),
            OnStoreError::Deny => (policy_denial(limit), None),
            OnStoreError::Local => {
                let at = self.now();
                let left = max_wait.saturating_sub(counted(started.elapsed(at)));
                let local = self.local.get_or_init(MemoryStore::new);
                let at = at.unwrap_or_else(|| SteadyClock.now());
                match local.pace_at(entry, Pace::Reserve { max_wait: left }, at) {
                    Ok(paced) => (paced.decision, paced.slot),
                    Err(_) => (policy_denial(limit), None),
                }
            }
        };
        let source = Source::Policy {
            policy,
            error: error.kind(),
        };
        (limit_decision(entry, decision, source), slot)
    }

    /// Forgets a refusal the deny cache holds for `key`: units went back to it.
    pub(super) fn forget_cached(&self, key: &Key) {
        if let Some(cache) = &self.deny_cache {
            cache.forget(key);
        }
    }
}

/// The longest a reservation may wait: [`crate::rules::DEBT_HORIZON_US`], the deepest queue
/// of reservations a settlement's debt is counted on top of (docs/algorithms.md), and the
/// service's longest `server.max_acquire_wait`. A queue deeper than that would run a key's
/// schedule arbitrarily far ahead (with `Duration::MAX`, until its `tat` overflowed).
pub(super) const MAX_WAIT: Duration = Duration::from_micros(crate::rules::DEBT_HORIZON_US);

/// How long a store call may take and count as no wait at all: a round trip to Redis. A
/// reservation's store call that took longer is counted in full against its `max_wait`
/// (`tollgate-redis` sends each try with what is left of it by the same rule).
pub(super) const ORDINARY_CALL: Duration = Duration::from_millis(1);

/// The part of a store call's `spent` time that counts against a reservation's `max_wait`:
/// none within [`ORDINARY_CALL`], all of it beyond.
fn counted(spent: Duration) -> Duration {
    if spent <= ORDINARY_CALL {
        Duration::ZERO
    } else {
        spent
    }
}

/// A monotonic clock that the runtime's paused time moves (tokio's, with its feature).
#[cfg(feature = "tokio")]
type Monotonic = tokio::time::Instant;
#[cfg(not(feature = "tokio"))]
type Monotonic = Instant;

/// When a reservation started, which its `max_wait` is counted from: on a monotonic clock,
/// and on the limiter's clock when it has one (a fake clock moves only that one).
pub(super) struct Started {
    at: Monotonic,
    clock: Option<Timestamp>,
}

impl Started {
    /// Now, the limiter's clock reading `clock`.
    fn now(clock: Option<Timestamp>) -> Started {
        Started {
            at: Monotonic::now(),
            clock,
        }
    }

    /// How long since the start, the limiter's clock now reading `clock`: the longer of the
    /// two clocks' readings (either may be the one that moved).
    fn elapsed(&self, clock: Option<Timestamp>) -> Duration {
        let on_clock = match (self.clock, clock) {
            (Some(from), Some(to)) => {
                Duration::from_micros(to.as_micros().saturating_sub(from.as_micros()))
            }
            _ => Duration::ZERO,
        };
        self.at.elapsed().max(on_clock)
    }
}

/// Counts what became of a reservation in `tollgate_reservations_total{limit, result}`.
pub(super) fn count_reservation(limit: &Limit, result: &'static str) {
    metrics::counter!(
        "tollgate_reservations_total",
        "limit" => Arc::clone(limit.name_arc()),
        "result" => result
    )
    .increment(1);
}

/// The `result` label of a cancellation.
pub(super) fn given_back_or_lost(given_back: bool) -> &'static str {
    if given_back { "given_back" } else { "lost" }
}
