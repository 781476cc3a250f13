//! A request whose entries lie in several slots of a cluster: one call per slot, all or
//! nothing across them where the request asks it (see the crate docs for the guarantee).

use std::time::Duration;

use smallvec::SmallVec;
use tollgate::{Decision, Decisions, Entry, NotUntil, Request, StoreError};

use super::clock::Sent;
use super::redis_store::RedisStore;
use crate::script::{Op, TimeSource};
use crate::slot::slot_of;

impl RedisStore {
    /// [`RedisStore::decide`] of a request whose entries lie in several slots of a cluster and
    /// are decided each on its own (a peek, or a request that counts refusals): one call per
    /// slot.
    pub(super) async fn decide_per_slot(
        &self,
        entries: &[Entry<'_>],
        groups: &[Group],
        op: Op,
        at: TimeSource,
        sent: Sent,
        counts_refusals: bool,
    ) -> Result<Decisions, StoreError> {
        let mut out: SmallVec<[Option<Decision>; 2]> = SmallVec::from_elem(None, entries.len());
        for group in groups {
            let members: SmallVec<[&Entry<'_>; 2]> = group.iter().map(|&i| &entries[i]).collect();
            let (_, decisions) = self
                .run_group(op, &members, at, sent, counts_refusals)
                .await?;
            for (&i, d) in group.iter().zip(decisions) {
                out[i] = Some(d);
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| StoreError::Protocol("an entry got no decision".into())))
            .collect()
    }

    /// [`RedisStore::decide`] of a check whose entries lie in several slots of a cluster and
    /// need less than all or nothing (`tollgate::Need`): no script sees every slot, so the
    /// request is peeked slot by slot, and when it is admitted the entries that admitted are
    /// checked as one all-or-nothing request across slots ([`RedisStore::decide_across_slots`],
    /// giving back on a later slot's refusal). Should one of them refuse meanwhile (another
    /// caller took the units between the two steps), nothing stays charged and the whole is
    /// decided again, up to [`NEEDS_ATTEMPTS`] times; after that, the entries the check left
    /// uncharged answer refused (retry after a millisecond), so the answer never claims an
    /// admission it did not charge.
    pub(super) async fn decide_needs_across_slots(
        &self,
        request: &Request<'_>,
        at: TimeSource,
        sent: Sent,
    ) -> Result<Decisions, StoreError> {
        let entries = request.entries();
        let groups = self.groups(entries);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = self
                .decide_per_slot(entries, &groups, Op::Peek, at, Sent::default(), false)
                .await?;
            if !request.admitted(out.iter().map(|d| d.is_allowed())) {
                return Ok(out);
            }
            let chosen: SmallVec<[usize; 4]> = (0..entries.len())
                .filter(|&i| out[i].is_allowed())
                .collect();
            let Some(mut chosen_request) = request.select(&chosen) else {
                return Ok(out);
            };
            for i in 0..chosen.len() {
                chosen_request.set_need(i, tollgate::Need::Must);
            }
            let chosen_entries = chosen_request.entries();
            let chosen_groups = self.groups(chosen_entries);
            let checked: Decisions = if chosen_groups.len() > 1 {
                self.decide_across_slots(chosen_entries, &chosen_groups, Op::Check, at, sent)
                    .await?
            } else {
                let group: SmallVec<[&Entry<'_>; 2]> = chosen_entries.iter().collect();
                let (_, d) = self.run_group(Op::Check, &group, at, sent, false).await?;
                d.into_iter().collect()
            };
            let charged = checked.iter().all(|d| d.is_allowed());
            let mut merged: SmallVec<[Decision; 2]> = out.iter().copied().collect();
            for (&i, d) in chosen.iter().zip(checked.iter()) {
                merged[i] = *d;
            }
            if charged || !request.admitted(merged.iter().map(|d| d.is_allowed())) {
                return Ok(merged.into_iter().collect());
            }
            if attempt >= NEEDS_ATTEMPTS {
                for &i in &chosen {
                    let d = &mut merged[i];
                    if d.is_allowed() {
                        d.admission =
                            tollgate::Admission::Refused(NotUntil::new(Duration::from_millis(1)));
                    }
                }
                return Ok(merged.into_iter().collect());
            }
        }
    }

    /// [`RedisStore::decide`] of a request whose entries lie in several slots of a cluster:
    /// one call per group, all or nothing across them (see the crate docs).
    pub(super) async fn decide_across_slots(
        &self,
        entries: &[Entry<'_>],
        groups: &[Group],
        op: Op,
        at: TimeSource,
        sent: Sent,
    ) -> Result<Decisions, StoreError> {
        let mut out: SmallVec<[Option<Decision>; 2]> = SmallVec::from_elem(None, entries.len());
        let mut charged: SmallVec<[(&Group, TimeSource); 4]> = SmallVec::new();
        let mut denied_at = None;
        for (g, group) in groups.iter().enumerate() {
            let members: SmallVec<[&Entry<'_>; 2]> = group.iter().map(|&i| &entries[i]).collect();
            let (undo_at, decisions) = match self.run_group(op, &members, at, sent, false).await {
                Ok(r) => r,
                Err(e) => {
                    self.give_back(entries, &charged).await;
                    return Err(e);
                }
            };
            let all = decisions.iter().all(|d| d.is_allowed());
            for (&i, d) in group.iter().zip(decisions) {
                out[i] = Some(d);
            }
            if op == Op::Check {
                if all {
                    charged.push((group, undo_at));
                } else {
                    denied_at = Some(g);
                    break;
                }
            }
        }
        if let Some(g) = denied_at {
            // Undo the groups already charged, and tell the rest how they stand.
            for (i, d) in self.give_back(entries, &charged).await {
                out[i] = Some(d);
            }
            for group in &groups[g + 1..] {
                let members: SmallVec<[&Entry<'_>; 2]> =
                    group.iter().map(|&i| &entries[i]).collect();
                let (_, decisions) = self
                    .run_group(Op::Peek, &members, at, Sent::default(), false)
                    .await?;
                for (&i, d) in group.iter().zip(decisions) {
                    out[i] = Some(d);
                }
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| StoreError::Protocol("an entry got no decision".into())))
            .collect()
    }

    /// Gives back each entry's cost on every charged group, each on the clock it was charged
    /// on (best effort: a failure leaves the units taken until they replenish, and is
    /// logged). Returns the decisions after the give-back.
    async fn give_back(
        &self,
        entries: &[Entry<'_>],
        charged: &[(&Group, TimeSource)],
    ) -> Vec<(usize, Decision)> {
        let mut out = Vec::new();
        if charged.is_empty() {
            return out;
        }
        for &(group, at) in charged {
            let members: SmallVec<[&Entry<'_>; 2]> = group.iter().map(|&i| &entries[i]).collect();
            match self
                .run_group(Op::GiveBack, &members, at, Sent::default(), false)
                .await
            {
                Ok((_, decisions)) => out.extend(group.iter().copied().zip(decisions)),
                Err(e) => tracing::warn!(
                    cause = %e,
                    "could not give back units of a cross-slot check; they stay taken until they replenish"
                ),
            }
        }
        metrics::counter!("tollgate_redis_cross_slot_give_backs_total").increment(1);
        out
    }

    /// Entry indices grouped by hash slot, in order of first appearance; one group on a
    /// single Redis.
    pub(super) fn groups(&self, entries: &[Entry<'_>]) -> SmallVec<[Group; 2]> {
        let mut groups: SmallVec<[(u16, Group); 2]> = SmallVec::new();
        if !self.is_cluster() {
            groups.push((0, (0..entries.len()).collect()));
        } else {
            for (i, e) in entries.iter().enumerate() {
                let slot = slot_of(e.key().as_str());
                match groups.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, g)) => g.push(i),
                    None => groups.push((slot, SmallVec::from_elem(i, 1))),
                }
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }
}

/// How many times a cross-slot check of entries that need less than all or nothing is decided
/// again after another caller took units between its peek and its check
/// ([`RedisStore::decide_needs_across_slots`]).
const NEEDS_ATTEMPTS: u32 = 4;

/// Indices of a request's entries that share a slot.
type Group = SmallVec<[usize; 2]>;
