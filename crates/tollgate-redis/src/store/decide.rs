//! One request's decision: grouped by slot, each group run as its own call or through the
//! coalescer, a late script sent again, and a refusal due within a millisecond decided again.

use std::time::Duration;

#[cfg(feature = "bench")]
use redis::Value;
use smallvec::SmallVec;
use tollgate::{Decision, Decisions, Entry, Request, StoreError, Timestamp};

use super::clock::Sent;
use super::connection::Connection;
use super::redis_store::RedisStore;
#[cfg(not(feature = "bench"))]
use super::unanswered::Unanswered;
use crate::deadline::late;
#[cfg(feature = "bench")]
use crate::script::old_gcra_invocation;
use crate::script::{Op, Part, TimeSource, decode};
use crate::slot::slot_of;

/// How many times a peek whose connection was lost is sent again. More than once: the first
/// resend can race the reconnection (it may still meet the connection that was lost); the
/// store's timeout bounds them all, and a Redis that is down refuses each at once.
const PEEK_RESENDS: u32 = 3;

impl RedisStore {
    /// `part` called on its own, not coalesced: [`RedisStore::eval_settled`].
    #[cfg(not(feature = "bench"))]
    fn eval_alone<'a>(&'a self, part: &'a Part) -> Unanswered<'a> {
        self.eval_settled(part)
    }

    /// `part` called on its own, not coalesced: [`RedisStore::eval_settled`], or the old GCRA
    /// script when a benchmark set it ([`crate::RedisStoreBuilder::old_gcra_script`]).
    #[cfg(feature = "bench")]
    async fn eval_alone(&self, part: &Part) -> Result<Value, StoreError> {
        match self.inner.old_gcra_sha.as_deref() {
            Some(sha) if let Some(cmd) = old_gcra_invocation(part, sha) => {
                self.clone().eval(cmd).await
            }
            _ => self.eval_settled(part).await,
        }
    }

    /// Runs `op` on one group of entries (one slot) on clock `at`. Also returns the clock a
    /// give-back of this group must use: the instant its script decided at, or for GCRA's
    /// single-entry script on the server's clock, which reads no instant, when it was sent
    /// (`Part::undo_clock`).
    ///
    /// On the server's clock, a refusal due within a millisecond is decided again a
    /// millisecond later, once (see [`due_within_a_millisecond`]). A peek whose connection was
    /// lost is sent again, up to [`PEEK_RESENDS`] times; a check is not (its script may have
    /// run).
    pub(super) async fn run_group(
        &self,
        op: Op,
        entries: &[&Entry<'_>],
        at: TimeSource,
        sent: Sent,
        counts_refusals: bool,
    ) -> Result<(TimeSource, SmallVec<[Decision; 2]>), StoreError> {
        let mut inv = Part::new(op, entries, at, counts_refusals);
        inv.set_deadline(sent.deadline);
        inv.set_sent_after(sent.after);
        let mut sent = self.run_once(&mut inv, entries).await;
        // A lost connection (dropped, reset, a failover) leaves a call's fate unknown: a
        // check's script may have run and charged before its reply was lost, so only a peek,
        // which writes nothing, is sent again, on the connection as re-established.
        let mut resends = 0;
        while op == Op::Peek && resends < PEEK_RESENDS {
            let Err(StoreError::Connection(cause)) = &sent else {
                break;
            };
            tracing::debug!(%cause, "connection lost under a peek; sending it again");
            resends += 1;
            sent = Box::pin(self.run_once(&mut inv, entries)).await;
        }
        let mut decided = sent?;
        // The second calls are boxed: rare, and inline they would make every call's state
        // larger (see `Store::decide` below).
        if at == TimeSource::Server
            && op != Op::GiveBack
            && due_within_a_millisecond(&decided.1, entries)
        {
            decided = Box::pin(async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                self.run_once(&mut inv, entries).await
            })
            .await?;
        }
        Ok(decided)
    }

    /// One call of `inv`: its own, or through the coalescer (sent at once when no call of its
    /// queue is in flight, else as part of the next batch). A check that Redis ran after its
    /// deadline (nothing charged) is sent again with a deadline on that answer's clock: the
    /// caller is still waiting (`deadline.rs`).
    async fn run_once(
        &self,
        inv: &mut Part,
        entries: &[&Entry<'_>],
    ) -> Result<(TimeSource, SmallVec<[Decision; 2]>), StoreError> {
        let reply = loop {
            let reply = match self.coalescer() {
                None => self.eval_alone(inv).await?,
                Some(c) => {
                    let queue = match (&self.inner.connection, entries.first()) {
                        (Connection::Cluster(_), Some(e)) => usize::from(slot_of(e.key().as_str())),
                        _ => 0,
                    };
                    c.call(self, queue, inv).await?
                }
            };
            match late(&reply) {
                Some(server_now) => inv.set_deadline(Some(self.too_late(server_now))),
                None => break reply,
            }
        };
        let (now, decisions) = decode(reply, entries)?;
        let reset_us = match &decisions[..] {
            [one] => u64::try_from(one.reset_after.as_micros()).ok(),
            _ => None,
        };
        let undo_at = inv.undo_clock(now, reset_us);
        Ok((undo_at, decisions))
    }

    /// A request on a cluster: its entries grouped by slot, one group run as a single Redis
    /// runs every request ([`RedisStore::run_group`], called directly by `Store::decide`
    /// there: a single Redis holds every key, so there is nothing to group).
    pub(super) async fn decide_on_cluster(
        &self,
        request: &Request<'_>,
        now: Option<Timestamp>,
        op: Op,
        sent: Sent,
    ) -> Result<Decisions, StoreError> {
        let entries = request.entries();
        let at = time_source(now);
        let counts = request.counts_refusals();
        let groups = self.groups(entries);
        if groups.len() > 1 {
            // Boxed: only a cluster's cross-slot requests come here, and inline this
            // path's give-backs would make every call's state larger.
            if counts || op == Op::Peek {
                // Each entry on its own: one call per slot, nothing to give back.
                return Box::pin(self.decide_per_slot(entries, &groups, op, at, sent, counts))
                    .await;
            }
            if request.has_needs() {
                return Box::pin(self.decide_needs_across_slots(request, at, sent)).await;
            }
            return Box::pin(self.decide_across_slots(entries, &groups, op, at, sent)).await;
        }
        let group: SmallVec<[&Entry<'_>; 2]> = entries.iter().collect();
        let (_, decisions) = self.run_group(op, &group, at, sent, counts).await?;
        Ok(decisions.into_iter().collect())
    }
}

/// The clock a request is decided on: the caller's instant, else Redis's own.
pub(super) fn time_source(now: Option<Timestamp>) -> TimeSource {
    match now {
        Some(t) => TimeSource::Caller(t.as_micros()),
        None => TimeSource::Server,
    }
}

/// Whether `decisions` refuse, and only for less than a millisecond.
///
/// On Redis's clock GCRA knows the instant only to the millisecond, and it errs towards
/// refusing (`lua/gcra.lua`): a unit that the exact rule may admit within the current
/// millisecond (the last of a burst taken within one, say) is refused until the next. The
/// state cannot tell that case from one where admitting would be too early, so rather than
/// refuse it or guess, the store asks again once the millisecond is over: one more round trip
/// and a millisecond, only for a call that would otherwise be refused with a wait under a
/// millisecond. Any algorithm's refusal of that kind gets the same second look (not one of a
/// cost above its capacity, which no wait makes pass).
fn due_within_a_millisecond(decisions: &[Decision], entries: &[&Entry<'_>]) -> bool {
    // A refusal that may pass: not a cost above its capacity (a shadow entry's, which never
    // passes; the sliding rules answer it with a wait of 0, and it was sent again for
    // nothing).
    let may_pass = |(i, d): (usize, &Decision)| {
        !d.is_allowed()
            && entries
                .get(i)
                .is_none_or(|e| e.cost() <= e.limit().capacity())
    };
    decisions.iter().enumerate().any(may_pass)
        && decisions.iter().enumerate().all(|(i, d)| {
            !may_pass((i, d))
                || d.retry_after()
                    .is_some_and(|r| r < Duration::from_millis(1))
        })
}
