//! Coalesced calls: concurrent independent requests bound for the same Redis (the same hash
//! slot on a cluster) go as one `EVALSHA` of the batch script (`lua/batch.lua`; a batch of
//! lone GCRA checks, the common one, as GCRA's leaner `lua/batch_gcra.lua`), which decides
//! each request on its own, all or nothing within it, as if they had come one after the other.
//!
//! Why: every call costs Redis (reading and parsing the command, looking up the script, setting
//! up the Lua call, writing the reply) and the client (a request through the multiplexed
//! connection, its reply parsed) on top of the few commands a decision makes. One call for many
//! requests pays that once. (What stays per decision is the commands themselves: for GCRA,
//! `PTTL` and `PEXPIRE` (`SET` when the key is new or T is not a whole number of ms, and `GET`
//! for such a T) are most of its Redis CPU, so a batch saves Redis a part of it, not most;
//! `docs/benchmarks.md`.)
//!
//! How, and why this way:
//! - **No timer.** A request that finds room for a call of its queue goes out at once, alone,
//!   with the very script it would use without coalescing: a lone request waits for nothing and
//!   costs what it costs today. Requests that arrive while the queue's calls are in flight
//!   queue; when one call ends, what queued goes next, as one batch (or as one request's own
//!   call, when only one queued). Batching adapts to load by itself: the longer calls take,
//!   the more queues behind them.
//! - **Sixteen calls in flight per queue** ([`MAX_IN_FLIGHT`](super::coalescer::MAX_IN_FLIGHT)): a request goes out alone while
//!   fewer are in flight, so up to sixteen concurrent requests go exactly as without
//!   coalescing, pipelined on the connection; only beyond that do they queue and share calls.
//!   The first design allowed two, which coalesced at any concurrency above two and cut
//!   throughput where pipelining alone did better: at 16 concurrent tasks it made 0.42× the
//!   decisions/s of one call per request, at 64 tasks 0.75× (docs/benchmarks.md). Sixteen
//!   measured best of 2, 4, 8, 16, 32 and 64 at every concurrency from 4 to 256 tasks.
//! - **Two batch calls in flight stop lone requests** ([`BATCHES_IN_FLIGHT`](super::coalescer::BATCHES_IN_FLIGHT)): while two
//!   batch calls of a queue are in flight, a new request queues for the next call that ends
//!   even if fewer than sixteen calls are in flight. Once load has made batches, a lone call
//!   costs much more per decision than a share of a batch (a write and a read on each side, and
//!   Redis's per-call work: about 33 000 instructions, against some 16 000 per decision in a
//!   batch), and the cap alone let lone calls take the free slots: at 256 tasks three calls in
//!   four were lone, carrying 7 % of the decisions. Two batches keep client and Redis
//!   overlapped (one is decided while the other's answers are read); one batch would not
//!   (at 64 tasks 0.96× the path before the local tier, against 1.7× with two). Measured in
//!   docs/benchmarks.md ("Lone calls wait behind two batches"): at 256 tasks batches of 63
//!   instead of 11, at 64 tasks of 7 instead of 3; below sixteen concurrent requests nothing
//!   changes, since no batch forms.
//! - **A cap on a batch**, [`DEFAULT_MAX_BATCH`](super::DEFAULT_MAX_BATCH) requests by default: a script blocks Redis
//!   while it runs, and 64 typical requests (a few µs of Lua each) keep that near one network
//!   round trip (≈ 0.1–0.3 ms) while already sharing one call's overhead 64 ways; what queued
//!   beyond it goes with the next call that ends, oldest first.
//! - **One queue per slot on a cluster**: a script may only touch keys of one slot, so only
//!   requests of one slot can share a call. On a single Redis there is one queue.
//! - **Failures stay per request.** The batch call has the store's timeout; if it fails, every
//!   request in it fails with the same kind of error (each limit's failure policy then applies
//!   as for any store failure). A request whose own deciding fails inside the script (a key of
//!   another type) fails alone. (GCRA's lone-check batch on the server's clock, where a
//!   request's cost is a whole number of ms, sends only commands that take a key of any type,
//!   so it skips that guard;
//!   the one error left there, Redis out of memory refusing the script's first write, fails
//!   the whole call before anything was charged: `lua/batch_gcra.lua`.) Each caller's own
//!   timeout and circuit breaker apply as before
//!   (`redis_store.rs`): a caller that gives up leaves its request in the batch, like a call that
//!   timed out on the wire; its deadline keeps a batch sent too late from charging it
//!   (`deadline.rs`), and a charge whose answer finds its caller gone is given back
//!   (`unanswered.rs`).
//! - **The batch runs in its own task**, not in a waiting caller's future, so that a caller
//!   giving up (timeout, dropped future) never strands the others' answers.
use std::sync::atomic::Ordering;

use redis::Value;
use tokio::sync::oneshot;
use tollgate::StoreError;

use super::coalescer::{Coalescer, Job, lock};
use super::redis_store::RedisStore;
use super::unanswered::{Charges, settle};
use crate::error::shared;
use crate::script::{Part, batch_invocation, invocation, split_batch};

/// Ends a call's flight when dropped (answered, failed, or its caller gone): what queued
/// meanwhile goes next.
struct Flight<'a> {
    store: &'a RedisStore,
    queue: usize,
    batch: bool,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.store.coalescer() {
            c.next(self.store, self.queue, self.batch);
        }
    }
}

impl Coalescer {
    /// Sends `part` as its own call at once when queue `queue` has room for another call in
    /// flight and fewer than two batches are in flight; otherwise queues it for the next call
    /// that ends. Answers the request's own
    /// reply, shaped as its own call answers or, from a batch, as the general script answers.
    pub(crate) async fn call(
        &self,
        store: &RedisStore,
        queue: usize,
        part: &Part,
    ) -> Result<Value, StoreError> {
        let waiting = {
            let mut q = lock(&self.queues[queue]);
            if q.start_alone() {
                None
            } else {
                let (answer, waiting) = oneshot::channel();
                q.pending.push(Job {
                    part: part.clone(),
                    answer,
                });
                Some(waiting)
            }
        };
        match waiting {
            None => {
                let _flight = Flight {
                    store,
                    queue,
                    batch: false,
                };
                store.eval_settled(part).await
            }
            Some(waiting) => waiting.await.unwrap_or_else(|_| {
                Err(StoreError::Protocol(
                    "a coalesced call ended without an answer".into(),
                ))
            }),
        }
    }

    /// A call of `queue` ended (`was_batch`: a batch call): sends what queued meanwhile, in a
    /// task of its own, or marks the queue idle.
    fn next(&self, store: &RedisStore, queue: usize, was_batch: bool) {
        let Some(jobs) = lock(&self.queues[queue]).end(was_batch, self.max_batch) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(drive(store.clone(), queue, jobs));
            }
            Err(_) => {
                // Dropped outside a runtime (shutting down): nothing can be sent.
                lock(&self.queues[queue]).abandon(&jobs);
                for job in jobs {
                    let _ = job.answer.send(Err(StoreError::Protocol(
                        "no runtime left to send a coalesced call".into(),
                    )));
                }
            }
        }
    }
}

/// Sends `jobs` (at most a batch) as one call; when it is answered, what queued meanwhile
/// goes next (the flight's end, also should the send panic).
async fn drive(store: RedisStore, queue: usize, jobs: Vec<Job>) {
    let _flight = Flight {
        store: &store,
        queue,
        batch: jobs.len() > 1,
    };
    send(store.clone(), jobs).await;
}

/// One call for `jobs`: the request's own call when it is alone, else the batch script; each
/// job gets its own answer, or the call's failure.
async fn send(store: RedisStore, jobs: Vec<Job>) {
    if let [_] = jobs[..] {
        let Some(job) = jobs.into_iter().next() else {
            return;
        };
        let reply = store
            .eval_timed(invocation(&job.part), Charges::One(&job.part))
            .await;
        answer(&store, job, reply);
        return;
    }
    let parts: Vec<&Part> = jobs.iter().map(|j| &j.part).collect();
    let answers = batch(&store, &parts).await;
    for (job, reply) in jobs.into_iter().zip(answers) {
        answer(&store, job, reply);
    }
}

/// Hands `job` its reply; if its caller stopped waiting meanwhile, what it charged is given
/// back (`unanswered.rs`).
fn answer(store: &RedisStore, job: Job, reply: Result<Value, StoreError>) {
    if let Err(Ok(reply)) = job.answer.send(reply) {
        let (store, part) = (store.clone(), job.part);
        tokio::spawn(async move { settle(&store, &part, &reply).await });
    }
}

/// One call of the batch script for `parts` (counted), within the store's timeout: each
/// part's own reply or failure; a failure of the call itself is every part's, same kind.
pub(super) async fn batch(store: &RedisStore, parts: &[&Part]) -> Vec<Result<Value, StoreError>> {
    let cmd = batch_invocation(parts);
    metrics::counter!("tollgate_redis_batches_total").increment(1);
    metrics::counter!("tollgate_redis_batched_requests_total").increment(parts.len() as u64);
    if let Some(c) = store.coalescer() {
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.batched.fetch_add(parts.len() as u64, Ordering::Relaxed);
    }
    let answers = match store.eval_timed(cmd, Charges::Batch(parts)).await {
        Ok(reply) => split_batch(reply, parts),
        Err(e) => Err(e),
    };
    match answers {
        Ok(answers) => answers,
        Err(e) => parts.iter().map(|_| Err(shared(&e))).collect(),
    }
}
