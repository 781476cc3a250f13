//! [`Patience`]: the store timeout, measured as Redis's silence, not as this process's queue.
//!
//! A plain `tokio::time::timeout` around a call measures everything between the caller and
//! the reply: the wait for a worker thread, the queue of calls pipelined ahead on the one
//! multiplexed connection, the reader task that parses replies. On a busy, healthy instance
//! (200 clients on two cores shared with Redis and a load generator) that wait passed 50 ms
//! while Redis answered every script in microseconds, and checks were refused by their
//! failure policy: a store error that was this process's own queue.
//!
//! So the timeout measures what it is for, whether Redis is answering:
//! - a call that has waited `timeout` fails **only if Redis answered nothing** on this store
//!   in that time (no reply to any call: a dead, stopped or blocked Redis, a lost connection);
//!   while replies keep coming, the call waits another `timeout`;
//! - a timer that fires late by more than half a `timeout` shows that this process was not
//!   running (the silence is ours, its replies may sit unread in the socket): the call waits
//!   another `timeout` too;
//! - before giving up, the call waits one more millisecond and looks again, in case the
//!   reader task had a reply in hand but no thread to run on. If the timer and that
//!   millisecond together ran late by more than [`STALL_SIGN`] (3 ms), this process's
//!   threads are queued up (a ready task waits its turn: the reader task with the replies,
//!   the callers that would count them), and the silence may be ours again: the call waits
//!   another `timeout`. Measured on a debug build, 200 clients and a busy loop on a second
//!   core: every call given up without this rule had run 4–54 ms late, while an idle
//!   runtime runs its timers at most a millisecond late; 66 of 20,000 checks failed with
//!   Redis answering every `PING` within 5 ms, and 2–7 with the rule;
//! - whatever happens, a call ends one second after its timeout ([`longest_wait`]): a bound
//!   on latency when this process is overloaded. (On a cluster, a call whose keys are on one
//!   master counts that master's replies only, `store/node_replies.rs`: the others answering
//!   do not keep it waiting on a silent one; a call across masters counts them all, and is
//!   held by this bound when one of them is silent.) A smaller bound
//!   (four timeouts, 200 ms at the default) still failed calls on a debug build under 200
//!   clients on a loaded two-core machine, every one of them with Redis answering. A call
//!   ended by the bound while Redis was answering, or while this process ran late, fails as
//!   [`GaveUp::Busy`] (the store error `Overloaded`, not `Timeout`): the cause is this
//!   process, and an operator who reads `timeout` looks at Redis.
//!
//! A call that heard nothing while the last thing heard on the store was a lost connection
//! ([`GaveUp::Disconnected`]) was waiting for the reconnection (the `redis` crate's
//! connection manager holds calls while it reconnects): a dead Redis refusing connections,
//! reported as a connection failure rather than as a timeout, so that the breaker's cause and
//! the error kind say "connection" when Redis is gone.
//!
//! A call that was waiting when a connection of the store was lost, and still waits at its
//! timeout while Redis answers the others, is **cut**: its store call ends with a lost
//! connection (a peek is then sent again on the connection as re-established,
//! `store/decide.rs`). Its request may never be answered: the `redis` crate can strand a
//! request sent just as its connection's driver ends. The driver drops its channel's
//! receiver, which drops the requests queued in the channel; a request pushed a moment later,
//! by a caller that had already reserved its place, stays in the channel with its reply's
//! sender, and the channel lives on because that caller itself holds a sender to it. No reply
//! and no error ever come. Seen in one to five of every hundred runs of the two `CLIENT KILL`
//! tests (tests/it/dropped_connection.rs, ten kills a run), instrumented: each time the
//! caller's request had been pushed into a closed channel; before the cut it waited out the
//! bound while Redis answered everyone else, and ended `overloaded`. Which calls are cut is
//! decided by [`Patience::cut_since`]: those made before the loss that are still waiting,
//! when a patience whose call was waiting across the loss reaches its timeout while Redis
//! answers others (a Redis that answers nobody is a dead or silent one, as above, and its
//! calls fail as they did).
//!
//! A dead Redis is therefore detected in `timeout` and a millisecond (or two timeouts, when its last reply came just after
//! the call began), as before; a busy one is waited for, up to the bound.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How much longer than its timeout a call may wait while Redis keeps answering others.
const BUSY_BOUND: Duration = Duration::from_secs(1);

/// The longest a store call with this `timeout` waits, however busy a healthy Redis is: the
/// timeout and `BUSY_BOUND`, and the millisecond of the second look (see the module docs).
pub fn longest_wait(timeout: Duration) -> Duration {
    timeout + BUSY_BOUND + GRACE
}

/// How long a call that heard nothing waits for the reader task to run before giving up.
const GRACE: Duration = Duration::from_millis(1);

/// How late the timer and the grace may run together before the silence counts as this
/// process's, not Redis's (see the module docs): tokio's timer has a millisecond's grain, so
/// an idle runtime is up to about two late.
const STALL_SIGN: Duration = Duration::from_millis(3);

/// Replies heard from Redis on one store: bumped by every call that got an answer, read by
/// the calls that are waiting for theirs.
#[derive(Debug, Default)]
pub(crate) struct Patience {
    replies: AtomicU64,
    /// Whether the last thing heard on this store was a lost connection (an I/O error, a
    /// dropped connection) rather than a reply: set by [`Patience::lost`], cleared by the
    /// next reply.
    lost: AtomicBool,
    /// Lost connections reported so far (each call that met one reports it).
    losses: AtomicU64,
    /// Calls made before this many losses and still waiting are cut (see the module docs).
    cut: AtomicU64,
}

/// Why a call was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveUp {
    /// Redis answered nothing on this store for a whole timeout, while this process was
    /// running (or the bound was reached with Redis silent): a store failure.
    Silent,
    /// As `Silent`, but the last thing heard on this store was a lost connection: the call
    /// waited for a reconnection that did not come in time (a dead Redis refusing
    /// connections), which is a connection failure, not a slow Redis.
    Disconnected,
    /// The bound was reached while Redis kept answering other calls, or while this process
    /// was too busy to tell (its timers ran late): this process did not get to the reply in
    /// time, and Redis is not to blame.
    Busy,
}

impl Patience {
    /// Records that Redis answered a call (a reply or a server error: either is Redis alive).
    #[inline]
    pub(crate) fn heard(&self) {
        self.replies.fetch_add(1, Ordering::Relaxed);
        if self.lost.load(Ordering::Relaxed) {
            self.lost.store(false, Ordering::Relaxed);
        }
    }

    /// Records that a call got no reply and none will come: its connection was lost
    /// (`closed`: dropped, reset, closed; counted in [`Patience::losses`]), or the `redis`
    /// crate's own timeout ended it.
    pub(crate) fn lost(&self, closed: bool) {
        self.lost.store(true, Ordering::Relaxed);
        if closed {
            self.losses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lost connections reported so far: a store call notes it when it is made, to know
    /// later whether it was made before a loss ([`Patience::cut_since`]).
    #[inline]
    pub(crate) fn losses(&self) -> u64 {
        self.losses.load(Ordering::Relaxed)
    }

    /// Whether a store call made when [`Patience::losses`] was `losses`, and still waiting,
    /// is to end as lost with its connection: a connection was lost since, and a patience
    /// that waited across that loss reached its timeout while Redis answered others (see the
    /// module docs).
    #[inline]
    pub(crate) fn cut_since(&self, losses: u64) -> bool {
        self.cut.load(Ordering::Relaxed) > losses
    }

    /// A silent Redis, or a lost connection when that was the last thing heard.
    fn silent(&self) -> GaveUp {
        if self.lost.load(Ordering::Relaxed) {
            GaveUp::Disconnected
        } else {
            GaveUp::Silent
        }
    }

    /// Runs `call` to its end, or until it is given up on (see the module docs).
    ///
    /// [`Patience::wait_on`] itself, not a future around it: no layer of its own on every
    /// call's path.
    pub(crate) fn wait<T>(
        &self,
        timeout: Duration,
        call: impl Future<Output = T>,
    ) -> impl Future<Output = Result<T, GaveUp>> {
        self.wait_on(timeout, call, &self.replies)
    }

    /// Replies heard on this whole store: what [`Patience::wait`] waits on.
    pub(crate) fn replies(&self) -> &AtomicU64 {
        &self.replies
    }

    /// [`Patience::wait`], where Redis answering is `answers` moving: on a cluster, the
    /// replies of the one master the call is sent to (`store/node_replies.rs`), so that
    /// the other masters' answers do not keep a call to a silent one waiting. Each reply also
    /// counts in this store's own count ([`Patience::heard`]).
    pub(crate) async fn wait_on<T>(
        &self,
        timeout: Duration,
        call: impl Future<Output = T>,
        answers: &AtomicU64,
    ) -> Result<T, GaveUp> {
        let start = Instant::now();
        let bound = start + timeout + BUSY_BOUND;
        let mut call = std::pin::pin!(call);
        let mut seen = answers.load(Ordering::Relaxed);
        let mut losses = self.losses();
        let mut due = start + timeout;
        loop {
            tokio::select! {
                biased;
                out = &mut call => return Ok(out),
                () = tokio::time::sleep_until(due) => {}
            }
            let mut now = Instant::now();
            let late = now.saturating_duration_since(due);
            let mut answering = answers.load(Ordering::Relaxed) != seen;
            let mut we_were_stalled = late > timeout / 2;
            if !(answering || we_were_stalled) && now < bound {
                // No sign yet: a reply may sit read-ready while the reader task waits for a
                // thread. Give it a moment (a tick of the timer) to run, then look again.
                let looked = now;
                tokio::select! {
                    biased;
                    out = &mut call => return Ok(out),
                    () = tokio::time::sleep(GRACE) => {}
                }
                now = Instant::now();
                answering = answers.load(Ordering::Relaxed) != seen;
                let grace_late = now.saturating_duration_since(looked).saturating_sub(GRACE);
                we_were_stalled = late + grace_late > STALL_SIGN;
            }
            if now >= bound {
                return Err(if answering || we_were_stalled {
                    GaveUp::Busy
                } else {
                    self.silent()
                });
            }
            if !(answering || we_were_stalled) {
                return Err(self.silent());
            }
            let lost_since = self.losses();
            if answering && lost_since != losses {
                // A connection was lost while the call waited, Redis answers others, and the
                // call still waits: what it sent before the loss may never be answered. Cut
                // it (polled next, it ends as lost; a peek then sends itself again), and wait
                // another timeout for what it does next.
                self.cut.fetch_max(lost_since, Ordering::Relaxed);
                losses = lost_since;
            }
            let replies = answers.load(Ordering::Relaxed);
            seen = replies;
            due = (now + timeout).min(bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(50);

    /// A call whose Redis says nothing fails after one timeout (and the grace).
    #[tokio::test(start_paused = true)]
    async fn silence_fails_after_one_timeout() {
        let patience = Patience::default();
        let start = Instant::now();
        let out = patience.wait(T, std::future::pending::<()>()).await;
        assert_eq!(out, Err(GaveUp::Silent));
        assert_eq!(start.elapsed(), T + GRACE);
    }

    /// A call that hears nothing after a lost connection waited for a reconnection: it fails
    /// as `Disconnected`, and as `Silent` again once a reply was heard since.
    #[tokio::test(start_paused = true)]
    async fn silence_after_a_lost_connection_is_disconnected() {
        let patience = Patience::default();
        patience.lost(true);
        let start = Instant::now();
        let out = patience.wait(T, std::future::pending::<()>()).await;
        assert_eq!(out, Err(GaveUp::Disconnected));
        assert_eq!(start.elapsed(), T + GRACE);
        patience.heard();
        let out = patience.wait(T, std::future::pending::<()>()).await;
        assert_eq!(out, Err(GaveUp::Silent));
    }

    /// A patience on which Redis answers some other call every 10 ms, from a task of its own.
    fn answered_every_10ms() -> std::sync::Arc<Patience> {
        let patience = std::sync::Arc::new(Patience::default());
        let talker = std::sync::Arc::clone(&patience);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                talker.heard();
            }
        });
        patience
    }

    /// While other calls keep getting replies, a queued call waits, up to the bound.
    #[tokio::test(start_paused = true)]
    async fn replies_to_others_extend_the_wait_up_to_the_bound() {
        let patience = answered_every_10ms();
        let start = Instant::now();
        // Answered after 3 timeouts: waited for.
        let slow = tokio::time::sleep(T * 3);
        assert_eq!(patience.wait(T, slow).await, Ok(()));
        assert_eq!(start.elapsed(), T * 3);
        // Never answered: given up on at the bound.
        let start = Instant::now();
        let out = patience.wait(T, std::future::pending::<()>()).await;
        assert_eq!(out, Err(GaveUp::Busy));
        assert_eq!(start.elapsed(), T + BUSY_BOUND);
    }

    /// A store call as `Unanswered` is one: made with the store's losses noted, it never gets
    /// a reply, and ends as lost once it is cut.
    fn stranded(patience: &Patience) -> impl Future<Output = Result<(), &'static str>> + '_ {
        let losses = patience.losses();
        std::future::poll_fn(move |_| {
            if patience.cut_since(losses) {
                std::task::Poll::Ready(Err("lost with its connection"))
            } else {
                std::task::Poll::Pending
            }
        })
    }

    /// `event` done to `patience` once, `delay` from now, from a task of its own.
    fn after(
        patience: &std::sync::Arc<Patience>,
        delay: Duration,
        event: impl FnOnce(&Patience) + Send + 'static,
    ) {
        let patience = std::sync::Arc::clone(patience);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            event(&patience);
        });
    }

    /// Redis answering others every 10 ms, after `lost_after` a lost connection reported.
    fn answering_after_a_loss(patience: &std::sync::Arc<Patience>, lost_after: Duration) {
        let talker = std::sync::Arc::clone(patience);
        tokio::spawn(async move {
            tokio::time::sleep(lost_after).await;
            talker.lost(true);
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                talker.heard();
            }
        });
    }

    /// A call still waiting at its timeout, a connection lost since it was made and Redis
    /// answering the others, is cut then: its request may never be answered (the module
    /// docs). Without the cut it waited out the bound and failed as `Busy`.
    #[tokio::test(start_paused = true)]
    async fn a_call_waiting_across_a_lost_connection_is_cut_at_its_timeout() {
        let patience = std::sync::Arc::new(Patience::default());
        answering_after_a_loss(&patience, Duration::from_millis(5));
        let start = Instant::now();
        let out = patience.wait(T, stranded(&patience)).await;
        assert_eq!(out, Ok(Err("lost with its connection")));
        assert_eq!(start.elapsed(), T);
    }

    /// A call made after the loss is not cut: it is waited for as before (here it is never
    /// answered, and ends at the bound).
    #[tokio::test(start_paused = true)]
    async fn a_call_made_after_the_loss_is_not_cut() {
        let patience = std::sync::Arc::new(Patience::default());
        answering_after_a_loss(&patience, Duration::from_millis(5));
        let first = patience.wait(T, stranded(&patience)).await;
        assert_eq!(first, Ok(Err("lost with its connection")));
        let start = Instant::now();
        let out = patience.wait(T, stranded(&patience)).await;
        assert_eq!(out, Err(GaveUp::Busy));
        assert_eq!(start.elapsed(), T + BUSY_BOUND);
    }

    /// A loss while Redis answers nobody cuts nothing: the call fails as a lost connection
    /// after one timeout, as before.
    #[tokio::test(start_paused = true)]
    async fn a_loss_with_redis_silent_fails_as_before() {
        let patience = std::sync::Arc::new(Patience::default());
        after(&patience, Duration::from_millis(5), |p| p.lost(true));
        let start = Instant::now();
        let out = patience.wait(T, stranded(&patience)).await;
        assert_eq!(out, Err(GaveUp::Disconnected));
        assert_eq!(start.elapsed(), T + GRACE);
        assert!(!patience.cut_since(0), "nothing was cut");
    }

    /// Replies that stop: the call fails one timeout after the last it could hear.
    #[tokio::test(start_paused = true)]
    async fn replies_that_stop_fail_within_two_timeouts() {
        let patience = std::sync::Arc::new(Patience::default());
        after(&patience, Duration::from_millis(10), Patience::heard);
        let start = Instant::now();
        let out = patience.wait(T, std::future::pending::<()>()).await;
        assert_eq!(out, Err(GaveUp::Silent));
        assert_eq!(start.elapsed(), T * 2 + GRACE);
    }

    /// A process that did not run past its deadline (time passed while it was not polled)
    /// does not blame Redis: the answer that its reader delivers just after is taken. A plain
    /// `tokio::time::timeout` fails here.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_process_is_not_a_silent_redis() {
        let patience = std::sync::Arc::new(Patience::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let waiting = std::sync::Arc::clone(&patience);
        let call = tokio::spawn(async move { waiting.wait(T, async { rx.await.ok() }).await });
        tokio::task::yield_now().await;
        // Two timeouts pass without this process running; its timer fires late.
        tokio::time::advance(T * 2).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // The reader task runs only now, and delivers the reply Redis sent meanwhile.
        let _ = tx.send(7);
        assert_eq!(call.await.expect("task"), Ok(Some(7)));
    }

    /// A runtime whose ready tasks wait their turn (the grace ran 4 ms late) is not a silent
    /// Redis either: the reply that arrives afterwards is taken.
    #[tokio::test(start_paused = true)]
    async fn a_queued_up_runtime_is_not_a_silent_redis() {
        let patience = std::sync::Arc::new(Patience::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let waiting = std::sync::Arc::clone(&patience);
        let call = tokio::spawn(async move { waiting.wait(T, async { rx.await.ok() }).await });
        tokio::task::yield_now().await;
        // The timer fires on time, and the call takes its grace millisecond...
        tokio::time::advance(T).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // ...which ends 5 ms later: the call's task waited 4 ms for a thread.
        tokio::time::advance(GRACE * 5).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let _ = tx.send(7);
        assert_eq!(call.await.expect("task"), Ok(Some(7)));
    }

    /// Waiting on one master's count (a cluster): the other masters' replies, counted in the
    /// store's, do not keep the call waiting; it fails after one timeout as on a silent Redis.
    /// Waiting on the store's count, the same replies keep it waiting up to the bound.
    #[tokio::test(start_paused = true)]
    async fn replies_of_other_masters_do_not_extend_the_wait() {
        let patience = answered_every_10ms();
        let silent_master = AtomicU64::new(0);
        let start = Instant::now();
        let out = patience
            .wait_on(T, std::future::pending::<()>(), &silent_master)
            .await;
        assert_eq!(out, Err(GaveUp::Silent));
        assert_eq!(start.elapsed(), T + GRACE);
        let start = Instant::now();
        let out = patience.wait(T, std::future::pending::<()>()).await;
        assert_eq!(out, Err(GaveUp::Busy));
        assert_eq!(start.elapsed(), T + BUSY_BOUND);
    }
}
