//! [`Unanswered`]: a call whose caller stopped waiting runs to its end anyway, and what it
//! charged is given back.
//!
//! Deadlines (`deadline.rs`) keep a script that *starts* after its caller gave up from
//! charging. One window is left that no deadline can close: Redis ran the script in time and
//! charged, but its reply reached this process after the caller gave up — Redis frozen
//! between running a command and writing its reply (it writes the replies of a whole event
//! loop's commands at once, so a `SIGSTOP` there holds a dozen of them; measured: 13 of 97
//! timed-out checks in one run), a reply stuck in a congested network, a caller whose client
//! went away. The caller answered by its failure policy (or not at all), so the charge is a
//! refused request counted against its key.
//!
//! So a call is not dropped with its caller: [`Unanswered`] holds it, boxed, and when its
//! caller drops it unfinished, the call goes on in a task of its own, for at most
//! [`SETTLE_WITHIN`]. If its reply says it charged (every entry admitted), the same entries
//! are given back, on the clock they were charged at (the give-back of a cross-slot undo,
//! `lua/check.lua` op 2). A late answer charged nothing and gives nothing back. Counted in
//! `tollgate_redis_unanswered_give_backs_total`; a give-back that fails is logged, and its
//! units stay taken until they replenish (an under-admission, never an overshoot).
//!
//! A call still waiting when its patience cuts it (a connection was lost since it was made,
//! and Redis answers the others: `patience.rs`) is handed off the same way, and its caller is
//! told the connection was lost: its request may sit unsent in the `redis` crate for good, or
//! may yet run, and then what it charged is given back.
//!
//! Lease takes are settled the same way: a grant that arrives after its caller gave up is
//! given back whole (`give_back` = the units granted, to the window they were taken in).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{Cmd, Value};
use tollgate::StoreError;

use super::redis_store::RedisStore;
use super::slot_watch::slot_of_script;
use crate::lease::LeaseCall;
use crate::pace::PaceCall;
use crate::script::{Part, invocation, split_batch};

/// How long a call whose caller is gone is waited for before its settling is given up.
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

/// A boxed store call, `'static`: it may outlive its caller.
type Call = Pin<Box<dyn Future<Output = Result<Value, StoreError>> + Send>>;

/// What a call decided, to undo if its caller is gone when its reply comes.
#[derive(Clone, Copy)]
pub(crate) enum Charges<'a> {
    /// One request's call (its own script).
    One(&'a Part),
    /// A batch call: each part's share of the reply.
    Batch(&'a [&'a Part]),
    /// A lease take: a grant is given back whole.
    Lease(&'a LeaseCall),
    /// A pacing call: a reservation's slot is given back (settlements are not undone: the
    /// caller is told the store failed, and the units may or may not have been settled).
    Pace(&'a PaceCall),
}

/// Owned [`Charges`], for the task that settles.
enum Owned {
    One(Part),
    Batch(Vec<Part>),
    Lease(LeaseCall),
    Pace(PaceCall),
}

/// A call that, dropped before it ends, is finished and settled in the background.
pub(crate) struct Unanswered<'a> {
    store: &'a RedisStore,
    call: Option<Call>,
    charges: Charges<'a>,
    /// Lost connections the store had seen when the call was made ([`Patience::losses`]).
    ///
    /// [`Patience::losses`]: crate::patience::Patience::losses
    losses: u64,
}

impl RedisStore {
    /// [`RedisStore::eval`] of `part`'s own call, given back if its caller stops waiting
    /// before the reply and the reply says it charged (this module).
    ///
    /// The future itself, not an `async fn` awaiting it: no layer of its own on every call's
    /// path (docs/architecture.md counts the path).
    pub(crate) fn eval_settled<'a>(&'a self, part: &'a Part) -> Unanswered<'a> {
        Unanswered::new(self, invocation(part), Charges::One(part))
    }

    /// [`RedisStore::eval`] within the store's timeout, measured as every call's is (Redis's
    /// silence, see [`crate::patience::Patience`]): a coalesced call, which no caller's own timeout bounds
    /// (`coalesce.rs`).
    /// A call given up on goes on in the background and is settled as `charges` says
    /// (this module).
    pub(crate) async fn eval_timed(
        &self,
        cmd: Cmd,
        charges: Charges<'_>,
    ) -> Result<Value, StoreError> {
        // A batch is one slot's (`coalesce.rs`): on a cluster, Redis answering is its master.
        let patience = &self.inner.patience;
        let answers = match &self.inner.nodes {
            Some(nodes) => slot_of_script(&cmd).and_then(|slot| nodes.of_slot(slot)),
            None => None,
        };
        let answers = answers.unwrap_or(patience.replies());
        let call = std::pin::pin!(Unanswered::new(self, cmd, charges));
        let result = match patience.wait_on(self.inner.timeout, call, answers).await {
            Ok(r) => r,
            Err(gave_up) => Err(self.gave_up(gave_up)),
        };
        if let Err(e) = &result {
            self.failed(e);
        }
        result
    }
}

impl<'a> Unanswered<'a> {
    /// `cmd` on `store` (its `eval`: script reloads and slot moves included), undone as
    /// `charges` says if its caller is gone when it ends.
    pub(crate) fn new(store: &'a RedisStore, cmd: Cmd, charges: Charges<'a>) -> Unanswered<'a> {
        Unanswered {
            store,
            call: Some(Box::pin(store.clone().eval(cmd))),
            charges,
            losses: store.inner.patience.losses(),
        }
    }
}

impl Future for Unanswered<'_> {
    type Output = Result<Value, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Ready(Err(StoreError::Protocol(
                "a store call was polled after it ended".into(),
            )));
        };
        if let Poll::Ready(out) = call.as_mut().poll(cx) {
            self.call = None;
            return Poll::Ready(out);
        }
        if !self.store.inner.patience.cut_since(self.losses) {
            return Poll::Pending;
        }
        self.hand_off();
        Poll::Ready(Err(StoreError::Connection(
            "no reply: a connection was lost while this call waited, and Redis answers the others"
                .into(),
        )))
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.hand_off();
    }
}

impl Unanswered<'_> {
    /// Hands the unfinished call off to a task of its own, which waits for its reply and gives
    /// back what it charged (nothing to wait for when it charges nothing).
    fn hand_off(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        // A peek or a give-back charges nothing: nothing to settle, nothing to wait for.
        if let Charges::One(part) = self.charges
            && !part.charges()
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let owned = match self.charges {
            Charges::One(part) => Owned::One(part.clone()),
            Charges::Batch(parts) => Owned::Batch(parts.iter().map(|&p| p.clone()).collect()),
            Charges::Lease(take) => Owned::Lease(take.clone()),
            Charges::Pace(call) => Owned::Pace(call.clone()),
        };
        let store = self.store.clone();
        runtime.spawn(async move {
            let Ok(Ok(reply)) = tokio::time::timeout(SETTLE_WITHIN, call).await else {
                return;
            };
            match owned {
                Owned::One(part) => settle(&store, &part, &reply).await,
                Owned::Batch(parts) => {
                    let refs: Vec<&Part> = parts.iter().collect();
                    if let Ok(answers) = split_batch(reply, &refs) {
                        for (part, answer) in parts.iter().zip(answers) {
                            if let Ok(answer) = answer {
                                settle(&store, part, &answer).await;
                            }
                        }
                    }
                }
                Owned::Lease(take) => settle_lease(&store, &take, reply).await,
                Owned::Pace(call) => {
                    if crate::deadline::is_late(&reply) {
                        store.count_late();
                    } else if let Some(cancel) = call.cancel_of(reply) {
                        give_back(&store, &cancel).await;
                    }
                }
            }
        });
    }
}

/// Gives back what `part` charged, if `reply` (its answer) says it did: its caller is gone.
pub(crate) async fn settle(store: &RedisStore, part: &Part, reply: &Value) {
    if crate::deadline::is_late(reply) {
        store.count_late();
        return;
    }
    let Some(undo) = part.undo_of(reply) else {
        return;
    };
    give_back(store, &invocation(&undo)).await;
}

/// Gives back a lease grant whose caller is gone (`take`: the call, `reply`: its answer).
async fn settle_lease(store: &RedisStore, take: &LeaseCall, reply: Value) {
    if crate::deadline::is_late(&reply) {
        store.count_late();
        return;
    }
    let Ok(grant) = crate::lease::decode(reply) else {
        return;
    };
    if grant.granted == 0 {
        return;
    }
    give_back(store, &take.give_back_only(grant.granted, grant.window)).await;
}

async fn give_back(store: &RedisStore, cmd: &Cmd) {
    store.gave_back_unanswered();
    match tokio::time::timeout(SETTLE_WITHIN, store.clone().eval(cmd.clone())).await {
        Ok(Ok(_)) => tracing::debug!("gave back a check whose caller stopped waiting"),
        Ok(Err(cause)) => tracing::warn!(
            %cause,
            "could not give back a check whose caller stopped waiting; its units stay taken until they replenish"
        ),
        Err(_) => tracing::warn!(
            "no answer to the give-back of a check whose caller stopped waiting; its units stay taken until they replenish"
        ),
    }
}
