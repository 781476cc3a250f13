//! [`tollgate::Store`] for [`RedisStore`]: each operation under the breaker and the timeout.

use smallvec::SmallVec;
use tokio::time::Instant;
use tollgate::{
    Decisions, Entry, Key, LeaseGrant, LeaseTake, Pace, Paced, Request, Store, StoreError,
    Timestamp,
};

use super::decide::time_source;
use super::redis_store::RedisStore;
use super::unanswered::{Charges, Unanswered};
use crate::deadline::late;
use crate::script::Op;
use crate::slot::slot_of;

impl Store for RedisStore {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: tollgate::Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        // Pinned here and handed on as a pointer: each `async fn` that takes a future by
        // value keeps its own copy of it (the argument, then the awaited local), and this one
        // is the whole decision's state, so passed by value it was copied three times per
        // decision (docs/benchmarks.md, "Smaller futures").
        //
        // `guarded`'s body, written out: every check and peek awaits Redis here, not through
        // a layer of its own (docs/architecture.md counts the path).
        let permit = self.inner.breaker.admit()?;
        let sent = self.sent_at(Instant::now());
        let op = Op::from(op);
        let waited = if self.is_cluster() {
            // Redis answering is, for a request on one master, that master answering.
            let slots = request.entries().iter().map(|e| slot_of(e.key().as_str()));
            let answers = self.answers(slots);
            let call = std::pin::pin!(self.decide_on_cluster(request, now, op, sent));
            self.inner
                .patience
                .wait_on(self.inner.timeout, call, answers)
                .await
        } else {
            // A single Redis holds every key: the request is one group, run as it is.
            let group: SmallVec<[&Entry<'_>; 2]> = request.entries().iter().collect();
            let at = time_source(now);
            let counts = request.counts_refusals();
            let call = std::pin::pin!(self.run_group(op, &group, at, sent, counts));
            let waited = self.inner.patience.wait(self.inner.timeout, call).await;
            waited.map(|ran| ran.map(|(_, decisions)| decisions.into_iter().collect()))
        };
        self.guarded_end(permit, waited)
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        let slots = request.entries().iter().map(|e| slot_of(e.key().as_str()));
        self.guarded_on(slots, async {
            for group in self.groups(request.entries()) {
                let keys: Vec<&Key> = group.iter().map(|&i| request.entries()[i].key()).collect();
                self.delete(&keys).await?;
            }
            Ok(())
        })
        .await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        let mut deadline = self.deadline_from(Instant::now());
        let call = crate::lease::LeaseCall::new(take, now);
        self.guarded_on(std::iter::once_with(|| slot_of(take.key.as_str())), async {
            loop {
                let cmd = call.invocation(deadline);
                let reply = Unanswered::new(self, cmd, Charges::Lease(&call)).await?;
                match late(&reply) {
                    // Nothing was taken nor given back: the same take again, still awaited.
                    Some(server_now) => deadline = Some(self.too_late(server_now)),
                    None => return crate::lease::decode(reply),
                }
            }
        })
        .await
    }

    async fn pace(
        &self,
        entry: &Entry<'_>,
        pace: Pace,
        now: Option<Timestamp>,
    ) -> Result<Paced, StoreError> {
        let mut deadline = self.deadline_from(Instant::now());
        let call = crate::pace::PaceCall::new(entry, pace, now);
        self.guarded_on(
            std::iter::once_with(|| slot_of(entry.key().as_str())),
            async {
                loop {
                    let cmd = call.invocation(deadline);
                    let reply = Unanswered::new(self, cmd, Charges::Pace(&call)).await?;
                    match late(&reply) {
                        // Nothing was written: the same call again, still awaited.
                        Some(server_now) => deadline = Some(self.too_late(server_now)),
                        None => return call.decode(reply),
                    }
                }
            },
        )
        .await
    }

    fn in_process(&self) -> bool {
        false
    }
}
