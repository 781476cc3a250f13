//! The lease tier: units taken from the store ahead of time, handed out by this instance.
//!
//! One entry per (lease-mode limit, key) this instance has seen lately, behind one lock held
//! for a few instructions (no await under it). A request spends from the entry when it holds
//! enough units. When it does not, it takes `k` more plus its cost with one store call
//! ([`crate::Store::take_lease`]), and requests arriving meanwhile wait for that call instead
//! of making their own (so a hot key costs one call per `k` decisions). When the take lands,
//! the requests that waited are served from it first, in the order they came, before anyone
//! else can spend: a local spend never yields, so a task checking in a tight loop would
//! otherwise spend the whole take before the woken waiters ran, and they would wait in vain
//! (measured: 4.4 store calls per `k` decisions instead of 1, 16 such tasks per instance).
//! One that still waited three times in vain (more waiters than units) takes exactly its cost
//! alone (spent at once, never held). After a take's cost is spent, the instance holds at
//! most `k` units of the key: the overshoot bound of `crate::lease`.
//!
//! Time is the deny cache's: the caller's clock when the limiter has one, else a monotonic
//! clock local to this tier. A lease ends at the instant read **before** its take was sent
//! plus the window's rest as the store saw it (capped by the lease duration), so it ends no
//! later than the store's window, whatever the round trip took.
//!
//! Memory: entries of expired leases are dropped by [`LeaseTier::expired`] (the service's
//! periodic give-back) and whenever the tier has doubled since its last clean-up; units of an
//! expired lease dropped that way are lost to this window (an under-admission, never an
//! overshoot).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::limit::key::BuildKeyHasher;

use self::grant::{allowed, apply, clean, rate_units};
pub(crate) use self::take_done::{TakeDone, Waited};

mod grant;
mod take_done;
use crate::{Decision, Key, LeaseGrant, Limit, StoreError};

/// Units of a key held by this instance.
struct Held {
    /// Which entry of the key this is (a key's entry given back or forgotten and made anew
    /// is another): a take's units set aside go back only to the entry they came from.
    id: u64,
    /// The limit, kept for give-backs after the limiter's limits changed.
    limit: Limit,
    /// Unspent units, valid until `until`.
    units: u64,
    /// The window they were taken in (store's clock), named by a give-back.
    window: u64,
    /// Local µs at which the lease ends.
    until: u64,
    /// Local µs at which the store's window ends (the lease may end sooner, at its duration):
    /// what a decision reports as `reset_after`, since the quota comes back then, not when
    /// this instance's lease runs out.
    window_end: u64,
    /// Units of an expired lease, to give back with the next take.
    expired: u64,
    /// Units the store had left at the last take (for `remaining`).
    store_left: u64,
    /// A take is in flight (the request making it holds `top_up`).
    taking: bool,
    /// Requests waiting for it, in the order they came.
    waiters: Vec<Waiter>,
    /// The ticket of the next request to wait.
    next_ticket: u64,
    /// Decisions a take handed to requests that waited for it, until each picks its own up
    /// (by ticket); a request dropped before that gives its units back.
    served: Vec<(u64, Decision, Stamp)>,
    /// Top-up takes finished (or abandoned): the number the one in flight will have.
    takes_done: u64,
    /// The last top-up that failed, by number, and why: the requests that waited for it
    /// apply the failure policy at once instead of calling the store in turn (each would
    /// wait out a timeout).
    failed: Option<(u64, Arc<StoreError>)>,
    /// Local µs until which the store is known to have had `store_left` units only (a take
    /// was refused, or a top-up found nothing): costs above `units + store_left` are
    /// refused here until then.
    dry_until: u64,
    /// Start (local µs) and units spent since, for the observed rate.
    rate_since: u64,
    rate_spent: u64,
    /// `tollgate_lease_overshoot_units{limit}`: units held, summed over keys.
    gauge: metrics::Gauge,
}

impl Held {
    /// A key of `limit` first seen at `now`: no units, no take.
    fn new(limit: &Limit, now: u64, id: u64) -> Held {
        Held {
            id,
            limit: limit.clone(),
            units: 0,
            window: 0,
            until: 0,
            window_end: 0,
            expired: 0,
            store_left: 0,
            taking: false,
            waiters: Vec::new(),
            next_ticket: 0,
            served: Vec::new(),
            takes_done: 0,
            failed: None,
            dry_until: 0,
            rate_since: now,
            rate_spent: 0,
            gauge: metrics::gauge!(
                "tollgate_lease_overshoot_units",
                "limit" => Arc::clone(limit.name_arc())
            ),
        }
    }

    /// Spends `cost` of the units held (the caller checked there are enough).
    fn spend(&mut self, cost: u64) {
        self.units -= cost;
        self.rate_spent += cost;
        self.gauge.decrement(cost as f64);
    }

    /// Where units spent now come from.
    fn stamp(&self) -> Stamp {
        Stamp {
            entry: self.id,
            window: self.window,
        }
    }

    /// Gives back `cost` units spent here from `stamp`'s entry and window: the inverse of
    /// [`Held::spend`]. Units of another entry or an older window are dropped, lost to their
    /// window (an under-admission): added to this lease, they would be handed out beyond
    /// what the store granted for its window (an audit: a request refused by its other limit
    /// after the window turned refunded its unit into the new window's lease, 6 admitted in
    /// a window of 5).
    fn give_back_from(&mut self, stamp: Stamp, cost: u64) {
        if self.stamp() == stamp {
            self.give_back(cost);
        }
    }

    /// Gives back `cost` units spent here: the inverse of [`Held::spend`].
    fn give_back(&mut self, cost: u64) {
        self.units += cost;
        self.rate_spent = self.rate_spent.saturating_sub(cost);
        self.gauge.increment(cost as f64);
    }
}

/// Where units spent from a lease came from: the key's entry and the store's window of the
/// take that held them. A local give-back names it ([`LeaseTier::refund`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    entry: u64,
    window: u64,
}

/// A request waiting for a key's take in flight: served from it, by ticket, when it lands.
struct Waiter {
    ticket: u64,
    cost: u64,
    waker: Waker,
}

/// What a request does with a key's lease.
#[derive(Debug)]
pub(crate) enum Step {
    /// Served locally, from `Stamp`.
    Spent(Decision, Stamp),
    /// Another request of this instance is taking units for the key: wait for it
    /// ([`LeaseTier::take_done`] with the take's number and this request's ticket), served
    /// from it or, if it did not suffice, spend again.
    Wait { take: u64, ticket: u64 },
    /// Refused locally: the store had too few units left until this ends.
    Refused(Decision),
    /// Take this from the store first, then spend the cost from the grant.
    Take(Refill),
}

/// A take to make: see [`crate::LeaseTake`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refill {
    pub(crate) want: u64,
    pub(crate) need: u64,
    /// The units held that the request counts on beside `need`, set aside for it until the
    /// take ends (spent if it is admitted, back to the lease otherwise): left in the lease,
    /// other requests spent them during the take, and the grant then covered less than the
    /// cost it admitted (an audit: 14 admitted in a window of 10, two instances).
    pub(crate) reserved: u64,
    /// The entry they were set aside from ([`Held`]'s `id`).
    pub(crate) entry: u64,
    pub(crate) give_back: u64,
    pub(crate) give_back_window: u64,
    /// Whether this is the key's one top-up (its `taking` flag to clear).
    pub(crate) top_up: bool,
}

/// One lease held at a give-back: key, limit, units, window.
pub(crate) type Returned = (Key, Limit, u64, u64);

/// The leases of one limiter.
#[derive(Debug)]
pub(crate) struct LeaseTier {
    inner: Mutex<Map>,
    epoch: Instant,
    /// Every lease was given back ([`LeaseTier::all`]: a reload replaced the limiter, or a
    /// shutdown): the limiter decides lease-mode limits as exact ones from then on, and no
    /// one gives back what the tier would hold. Read on every lease-mode check, so outside
    /// the lock.
    closed: AtomicBool,
}

#[derive(Default)]
struct Map {
    held: HashMap<Key, Held, BuildKeyHasher>,
    /// The next entry's id.
    next_id: u64,
    /// Entries after the last clean-up.
    cleaned_at_len: usize,
    /// Units a take in flight when its entry was given back got, or had set aside, beyond
    /// what its request spent: to be given back to the store by the caller
    /// ([`LeaseTier::take_orphans`]).
    orphans: Vec<Returned>,
    /// Answers a take gave its waiters that had not collected them when the entry was given
    /// back ([`LeaseTier::all`]), by key and ticket: their units are spent, so a waiter that
    /// found its entry gone would otherwise take its cost again.
    served_gone: Vec<(Key, u64, Decision, Stamp)>,
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map")
            .field("keys", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl LeaseTier {
    pub(crate) fn new() -> LeaseTier {
        LeaseTier {
            inner: Mutex::new(Map::default()),
            epoch: Instant::now(),
            closed: AtomicBool::new(false),
        }
    }

    /// The tier's time: the caller's clock when it has one, else a local monotonic clock.
    pub(crate) fn time(&self, caller: Option<u64>) -> u64 {
        caller
            .unwrap_or_else(|| u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Spends `cost` units of `key` at `now`, or says what to do first. `may_wait`: wait for
    /// a take in flight rather than take exactly `cost` units alone.
    pub(crate) fn spend(
        &self,
        key: &Key,
        limit: &Limit,
        cost: u64,
        now: u64,
        may_wait: bool,
    ) -> Step {
        let Some(lease) = limit.lease_mode() else {
            unreachable!("only lease-mode entries reach the lease tier")
        };
        let mut map = self.lock();
        if self.is_closed() {
            // Closed while this request was on its way here (the limiter decides lease-mode
            // limits as exact ones once closed): its cost alone, from the store.
            return Step::Take(Refill {
                want: cost,
                need: cost,
                reserved: 0,
                entry: u64::MAX,
                give_back: 0,
                give_back_window: 0,
                top_up: false,
            });
        }
        if !map.held.contains_key(key) {
            if map.held.len() >= 2 * map.cleaned_at_len.max(512) {
                clean(&mut map, now);
            }
            let id = map.next_id;
            map.next_id += 1;
            map.held.insert(key.clone(), Held::new(limit, now, id));
        }
        let Some(h) = map.held.get_mut(key) else {
            unreachable!("inserted above")
        };
        if now >= h.until && h.units > 0 {
            // Expired: the units go back with the next take (the store drops them if their
            // window has ended).
            h.expired += h.units;
            h.gauge.decrement(h.units as f64);
            h.units = 0;
        }
        if h.units >= cost {
            h.spend(cost);
            return Step::Spent(allowed(limit, h, now), h.stamp());
        }
        if now < h.dry_until && cost > h.units + h.store_left {
            let wait = Duration::from_micros(h.dry_until - now);
            return Step::Refused(Decision::refused(
                limit.quota().limit(),
                h.units + h.store_left,
                Duration::from_micros(h.window_end.saturating_sub(now)).max(wait),
                wait,
            ));
        }
        if h.taking && may_wait {
            let ticket = h.next_ticket;
            h.next_ticket += 1;
            return Step::Wait {
                take: h.takes_done,
                ticket,
            };
        }
        let need = cost - h.units;
        let top_up = !h.taking;
        let want = if top_up {
            h.taking = true;
            // k units held once the cost is spent.
            (rate_units(lease, limit, h, now) + cost).saturating_sub(h.units)
        } else {
            need
        };
        let reserved = h.units;
        h.spend(reserved);
        Step::Take(Refill {
            want: want.max(need),
            need,
            reserved,
            entry: h.id,
            give_back: std::mem::take(&mut h.expired),
            give_back_window: h.window,
            top_up,
        })
    }

    /// Waits until top-up number `take` of `key` is over: `cost` served from it (the request
    /// with `ticket`), its failure, or neither (spend again).
    pub(crate) fn take_done<'t>(
        &'t self,
        key: &'t Key,
        take: u64,
        ticket: u64,
        cost: u64,
    ) -> TakeDone<'t> {
        TakeDone {
            tier: self,
            key,
            take,
            ticket,
            cost,
            done: false,
        }
    }

    /// Applies the store's answer to `refill`, sent at `sent` (local µs, read before the
    /// call), then spends the rest of `cost` from it (`refill.reserved` was set aside), and
    /// where from. `None` when the store refused (`need` units were not there) or failed
    /// (`grant` is `None`); the units set aside then go back to the lease.
    pub(crate) fn finish(
        &self,
        key: &Key,
        limit: &Limit,
        refill: &Refill,
        grant: Result<&LeaseGrant, &Arc<StoreError>>,
        sent: u64,
    ) -> Option<(Decision, Stamp)> {
        let grant = match grant {
            Ok(grant) => Some(grant),
            Err(error) => {
                self.failed(key, refill, error);
                self.unreserve(key, limit, refill);
                return None;
            }
        };
        let mut map = self.lock();
        let Some(h) = map.held.get_mut(key).filter(|h| h.id == refill.entry) else {
            // Given back meanwhile (a reload, a shutdown, a reset; another entry may have
            // been made since), or a closed tier's take: this request still gets its cost
            // from the grant and the units it set aside. In a closed tier (its leases given
            // back: a reload, a shutdown), what the grant gave beyond it, or what was set
            // aside for a refused request, goes back to the store through the caller (it was
            // lost to the window: an audit's reloads under load lost 1 194 units of 60 000).
            // After a reset it stays counted until the window ends: the reset may have
            // wiped it already, and a give-back would then take units of later requests. A
            // refund of the cost stays counted (its entry is gone).
            let admitted = grant.filter(|g| g.granted >= refill.need && g.granted > 0);
            let limit_of = || limit.clone();
            match admitted {
                _ if !self.is_closed() => {}
                Some(g) if g.granted > refill.need => {
                    map.orphans
                        .push((key.clone(), limit_of(), g.granted - refill.need, g.window));
                }
                None if refill.reserved > 0 => {
                    map.orphans.push((
                        key.clone(),
                        limit_of(),
                        refill.reserved,
                        refill.give_back_window,
                    ));
                }
                _ => {}
            }
            return admitted.map(|g| {
                let d = Decision::allowed(limit.quota().limit(), g.remaining, g.valid_for);
                let gone = Stamp {
                    entry: refill.entry,
                    window: g.window,
                };
                (d, gone)
            });
        };
        let waiters = if refill.top_up {
            h.taking = false;
            h.takes_done += 1;
            std::mem::take(&mut h.waiters)
        } else {
            Vec::new()
        };
        let decision = grant
            .and_then(|grant| apply(h, refill, grant, sent))
            .map(|d| (d, h.stamp()));
        if decision.is_none() {
            h.give_back(refill.reserved);
        }
        if decision.is_some() {
            // The waiters first, in order, while units last; the rest spend again when woken.
            for w in &waiters {
                if h.units < w.cost {
                    break;
                }
                h.spend(w.cost);
                let served = allowed(limit, h, sent);
                let stamp = h.stamp();
                h.served.push((w.ticket, served, stamp));
            }
        }
        drop(map);
        for w in waiters {
            w.waker.wake();
        }
        decision
    }

    /// A take of `key` failed: a top-up's waiters are told why.
    fn failed(&self, key: &Key, refill: &Refill, error: &Arc<StoreError>) {
        if refill.top_up {
            self.end_take(key, refill.entry, Some(error));
        }
    }

    /// A take of `key` ended without an answer (its request was dropped mid-call): a top-up
    /// lets the next start, and the units set aside go back to the lease.
    pub(crate) fn abort(&self, key: &Key, limit: &Limit, refill: &Refill) {
        if refill.top_up {
            self.end_take(key, refill.entry, None);
        }
        self.unreserve(key, limit, refill);
    }

    /// The units `refill` set aside go back to `key`'s lease (its request was not admitted),
    /// or, its entry given back meanwhile by a closed tier, to the store through the caller.
    fn unreserve(&self, key: &Key, limit: &Limit, refill: &Refill) {
        if refill.reserved == 0 {
            return;
        }
        let mut map = self.lock();
        let closed = self.is_closed();
        match map.held.get_mut(key).filter(|h| h.id == refill.entry) {
            Some(h) => h.give_back(refill.reserved),
            // As `finish`: after a reset, they stay counted.
            None if !closed => {}
            None => map.orphans.push((
                key.clone(),
                limit.clone(),
                refill.reserved,
                refill.give_back_window,
            )),
        }
    }

    /// A top-up of `key` ended without units (`error`, when it failed): the next may start,
    /// and its waiters wake to see why.
    fn end_take(&self, key: &Key, entry: u64, error: Option<&Arc<StoreError>>) {
        let mut map = self.lock();
        let waiters = match map.held.get_mut(key).filter(|h| h.id == entry) {
            Some(h) => {
                h.taking = false;
                if let Some(error) = error {
                    h.failed = Some((h.takes_done, Arc::clone(error)));
                }
                h.takes_done += 1;
                std::mem::take(&mut h.waiters)
            }
            None => Vec::new(),
        };
        drop(map);
        for w in waiters {
            w.waker.wake();
        }
    }

    /// Gives `cost` units spent from `stamp` back to `key`'s local lease (the request they
    /// were spent for was refused by another of its limits): all or nothing, without a store
    /// call. Only to the entry and window they came from (see [`Held::give_back_from`]).
    pub(crate) fn refund(&self, key: &Key, cost: u64, stamp: Stamp) {
        let mut map = self.lock();
        if let Some(h) = map.held.get_mut(key) {
            h.give_back_from(stamp, cost);
        }
    }

    /// Forgets `key`'s lease without giving it back (the key was reset).
    pub(crate) fn forget(&self, key: &Key) {
        let removed = self.lock().held.remove(key);
        if let Some(h) = removed {
            h.gauge.decrement(h.units as f64);
            for w in h.waiters {
                w.waker.wake();
            }
        }
    }

    /// Whether every lease was given back ([`LeaseTier::all`]): the limiter then decides
    /// lease-mode limits as exact ones.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// What takes in flight when their entries were given back must give back too (see
    /// `finish`), taken out of the tier.
    pub(crate) fn take_orphans(&self) -> Vec<Returned> {
        let mut map = self.lock();
        if map.orphans.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut map.orphans)
    }

    /// Takes every lease out of the tier (reload, shutdown): what to give back. The tier is
    /// closed from then on: requests still on it take exactly their cost.
    pub(crate) fn all(&self) -> Vec<Returned> {
        let mut map = self.lock();
        self.closed.store(true, Ordering::Release);
        map.cleaned_at_len = 0;
        let mut drained: Vec<(Key, Held)> = map.held.drain().collect();
        // Under the same lock: a waiter that finds its entry gone finds its answer here.
        for (k, h) in &mut drained {
            for (ticket, decision, stamp) in std::mem::take(&mut h.served) {
                map.served_gone.push((k.clone(), ticket, decision, stamp));
            }
        }
        drop(map);
        let mut out = Vec::new();
        for (k, h) in drained {
            h.gauge.decrement(h.units as f64);
            // Requests waiting for a take in flight: they go on without this entry.
            for w in h.waiters {
                w.waker.wake();
            }
            if h.units + h.expired > 0 {
                out.push((k, h.limit, h.units + h.expired, h.window));
            }
        }
        out
    }

    /// Takes the expired leases with units out of the tier, and drops every expired entry:
    /// what to give back.
    pub(crate) fn expired(&self, now: u64) -> Vec<Returned> {
        let mut map = self.lock();
        let mut out = Vec::new();
        map.held.retain(|k, h| {
            if h.taking || now < h.until.max(h.dry_until) {
                return true;
            }
            if h.units + h.expired > 0 {
                h.gauge.decrement(h.units as f64);
                out.push((k.clone(), h.limit.clone(), h.units + h.expired, h.window));
            }
            false
        });
        map.cleaned_at_len = map.held.len();
        out
    }

    /// Units held, over every key (tests).
    pub(crate) fn units(&self) -> u64 {
        self.lock().held.values().map(|h| h.units).sum()
    }
}
