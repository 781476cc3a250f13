//! The limiter's side of lease mode: requests with lease-mode limits, and give-backs.
//!
//! A request's lease entries are decided by the lease tier (`crate::lease::tier`), one store
//! call only when a lease must be taken or topped up; its other entries by one store call as
//! usual. All or nothing still holds: when one entry refuses, the units the others spent
//! from their leases go back to those leases (locally: the store counted them as taken
//! already, and they stay this instance's to hand out), and an exact entry is not charged.
//! So do they when the request is dropped before its verdict (`SpentGuard`).

use std::sync::Arc;

use smallvec::SmallVec;

use super::{Limiter, limit_decision, subset};
use crate::lease::tier::{Refill, Returned, Stamp, Step, Waited};
use crate::verdict::{LimitDecision, Source};
use crate::{Entry, LeaseTake, Op, Request, Store, StoreError, Timestamp};

/// Waits for another request's take (served from it, or not when it had too few units)
/// before taking exactly the cost alone.
const MAX_WAITS: u32 = 3;

/// When a take's request is dropped mid-call: clears a key's "taking" flag, and gives the
/// units the request set aside back to the lease.
struct AbortOnDrop<'t> {
    tier: &'t crate::lease::tier::LeaseTier,
    key: &'t crate::Key,
    limit: &'t crate::Limit,
    refill: &'t Refill,
    armed: bool,
}

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.tier.abort(self.key, self.limit, self.refill);
        }
    }
}

/// The units a request spent from its entries' leases, each with its stamp, given back to
/// those leases when the request is dropped before its verdict (a client gone, a timeout
/// firing while a later entry's take or the exact entries' store call is under way): a
/// request that got no answer charges nothing, as without leases, where the store gives
/// back what an unanswered call charged.
struct SpentGuard<'r, 'e> {
    tier: &'r crate::lease::tier::LeaseTier,
    entries: &'r [Entry<'e>],
    spent: SmallVec<[(usize, Stamp); 2]>,
}

impl SpentGuard<'_, '_> {
    /// Gives every spent unit back: the request was refused.
    fn refund(&mut self) {
        for (i, stamp) in self.spent.drain(..) {
            let e = &self.entries[i];
            self.tier.refund(&e.key, e.cost, stamp);
        }
    }
}

impl Drop for SpentGuard<'_, '_> {
    fn drop(&mut self) {
        self.refund();
    }
}

/// How one lease entry went.
enum Leased {
    /// Admitted, `cost` spent from the entry's lease, from `Stamp` (to refund if another
    /// entry refuses).
    Spent(LimitDecision, Stamp),
    /// Refused (by the store or the tier), or decided by a failure policy.
    Other(LimitDecision),
}

impl<S: Store> Limiter<S> {
    /// Decides a check with at least one lease-mode entry.
    pub(super) async fn decide_leased(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
    ) -> SmallVec<[LimitDecision; 2]> {
        let entries = request.entries();
        let mut out: SmallVec<[Option<LimitDecision>; 2]> =
            SmallVec::from_elem(None, entries.len());
        let mut spent = SpentGuard {
            tier: &self.leases,
            entries,
            spent: SmallVec::new(),
        };
        let mut admitted = true;
        for (i, e) in entries.iter().enumerate() {
            if e.limit.lease_mode().is_none() {
                continue;
            }
            let d = match self.lease_entry(e, e.cost, now).await {
                Leased::Spent(d, stamp) => {
                    spent.spent.push((i, stamp));
                    d
                }
                Leased::Other(d) => d,
            };
            admitted &= d.decision.is_allowed();
            out[i] = Some(d);
        }
        let others: SmallVec<[usize; 2]> = (0..entries.len())
            .filter(|&i| entries[i].limit.lease_mode().is_none())
            .collect();
        if !others.is_empty() {
            let op = if admitted { Op::Check } else { Op::Peek };
            let decisions = self.ask_store(&subset(request, &others), op, now).await;
            admitted &= decisions.iter().all(|d| d.decision.is_allowed());
            for (&i, d) in others.iter().zip(decisions) {
                out[i] = Some(d);
            }
        }
        if admitted {
            // Answered: what was spent stays spent.
            spent.spent.clear();
        } else {
            spent.refund();
        }
        out.into_iter().flatten().collect()
    }

    /// One lease entry: spent locally, or after a take (this request's, or one it waited
    /// for).
    async fn lease_entry(&self, e: &Entry<'_>, cost: u64, now: Option<Timestamp>) -> Leased {
        let mut waited = 0;
        loop {
            let local_now = self.leases.time(now.map(Timestamp::as_micros));
            match self
                .leases
                .spend(&e.key, e.limit, cost, local_now, waited < MAX_WAITS)
            {
                Step::Spent(decision, stamp) => {
                    return Leased::Spent(limit_decision(e, decision, Source::Lease), stamp);
                }
                Step::Refused(decision) => {
                    return Leased::Other(limit_decision(e, decision, Source::Lease));
                }
                Step::Wait { take, ticket } => {
                    waited += 1;
                    match self.leases.take_done(&e.key, take, ticket, cost).await {
                        Waited::Served(decision, stamp) => {
                            return Leased::Spent(
                                limit_decision(e, decision, Source::Lease),
                                stamp,
                            );
                        }
                        // The take this request waited for failed: the policy, now (not a
                        // second timeout).
                        Waited::Failed(error) => {
                            return Leased::Other(self.policy_for(e, cost, &error));
                        }
                        Waited::Again => {}
                    }
                }
                Step::Take(refill) => {
                    return match self.take(e, &refill, now).await {
                        Ok(Ok((decision, stamp))) => {
                            Leased::Spent(limit_decision(e, decision, Source::Store), stamp)
                        }
                        Ok(Err(decision)) => {
                            Leased::Other(limit_decision(e, decision, Source::Store))
                        }
                        Err(error) => Leased::Other(self.policy_for(e, cost, &error)),
                    };
                }
            }
        }
    }

    /// The entry's failure policy, applied to one request of `cost`.
    fn policy_for(&self, e: &Entry<'_>, cost: u64, error: &StoreError) -> LimitDecision {
        let one = Request::from_validated(SmallVec::from_elem(e.clone().with_cost(cost), 1));
        let mut decisions = self.apply_policies(&one, error, Op::Check);
        decisions.remove(0)
    }

    /// One store call for `refill`, then the cost spent from the grant (and the units it set
    /// aside): the admission (`Ok(Ok)`), the store's refusal (`Ok(Err)`), or the store's
    /// failure.
    async fn take(
        &self,
        e: &Entry<'_>,
        refill: &Refill,
        now: Option<Timestamp>,
    ) -> Result<Result<(crate::Decision, Stamp), crate::Decision>, Arc<StoreError>> {
        // A request dropped mid-call must not leave its key "taking" for ever.
        let mut guard = AbortOnDrop {
            tier: &self.leases,
            key: &e.key,
            limit: e.limit,
            refill,
            armed: refill.top_up || refill.reserved > 0,
        };
        let sent = self.leases.time(now.map(Timestamp::as_micros));
        let take = LeaseTake {
            limit: e.limit,
            key: &e.key,
            want: refill.want,
            need: refill.need,
            give_back: refill.give_back,
            give_back_window: refill.give_back_window,
        };
        let started = std::time::Instant::now();
        let result = self.store.take_lease(&take, now).await;
        super::store_latency(started, result.as_ref().err());
        guard.armed = false;
        let outcome = match &result {
            Ok(g) if g.granted >= refill.need && g.granted > 0 => "granted",
            Ok(_) => "refused",
            Err(_) => "failed",
        };
        metrics::counter!(
            "tollgate_lease_takes_total",
            "limit" => Arc::clone(e.limit.name_arc()),
            "result" => outcome
        )
        .increment(1);
        let outcome = match result {
            Ok(grant) => Ok(
                match self
                    .leases
                    .finish(&e.key, e.limit, refill, Ok(&grant), sent)
                {
                    Some(spent) => Ok(spent),
                    None => Err(crate::Decision::refused(
                        e.limit.quota().limit(),
                        grant.remaining,
                        grant.valid_for,
                        grant.retry_after.unwrap_or(grant.valid_for),
                    )),
                },
            ),
            Err(error) => {
                metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().as_str())
                    .increment(1);
                self.warn_rate_limited(&error);
                let error = Arc::new(error);
                self.leases
                    .finish(&e.key, e.limit, refill, Err(&error), sent);
                Err(error)
            }
        };
        // Units of a take whose entry was given back meanwhile (a reload, a shutdown), beyond
        // what this request spent: back to the store now, as the give-back they missed.
        let orphans = self.leases.take_orphans();
        if !orphans.is_empty()
            && let Err(error) = self.give_back(orphans).await
        {
            tracing::warn!(cause = %error, "lease units of a take that outlived its lease could not be given back; they stay counted until their window ends");
        }
        outcome
    }

    /// Gives every lease this limiter holds back to the store (a reload replacing the
    /// limiter, a shutdown): one store call per key holding units. Returns the units given
    /// back. The limiter holds no lease after it: a take in flight gives back what it gets
    /// beyond its request's cost, and later requests take exactly their cost (one store call
    /// each, as in exact mode), so that nothing is left held by a limiter no one sweeps.
    ///
    /// # Errors
    /// The first store failure; the other leases are still given back (units a failed call
    /// could not return stay counted until their window ends: an under-admission).
    pub async fn return_leases(&self) -> Result<u64, StoreError> {
        let leases = self.leases.all();
        self.give_back(leases).await
    }

    /// Gives back the leases that have expired (not spent within the lease duration) and
    /// drops the tier's expired entries; the service calls it periodically, a library user
    /// may (a lease's units otherwise go back with the key's next take). Returns the units
    /// given back.
    ///
    /// # Errors
    /// As [`Limiter::return_leases`].
    pub async fn return_expired_leases(&self) -> Result<u64, StoreError> {
        let now = self.leases.time(self.now().map(Timestamp::as_micros));
        let leases = self.leases.expired(now);
        self.give_back(leases).await
    }

    /// Units this limiter holds in leases, over every key.
    pub fn leased_units(&self) -> u64 {
        self.leases.units()
    }

    async fn give_back(&self, leases: Vec<Returned>) -> Result<u64, StoreError> {
        let now = self.now();
        let mut first_error = None;
        let mut returned = 0;
        for (key, limit, units, window) in leases {
            let take = LeaseTake {
                limit: &limit,
                key: &key,
                want: 0,
                need: 0,
                give_back: units,
                give_back_window: window,
            };
            match self.store.take_lease(&take, now).await {
                Ok(_) => {
                    returned += units;
                    metrics::counter!(
                        "tollgate_lease_returned_units_total",
                        "limit" => Arc::clone(limit.name_arc())
                    )
                    .increment(units);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(returned),
        }
    }
}
