//! Batches on demand and the coalescer's counts: not part of the API, for the differential
//! tests and the benchmark, which need a batch of a known composition.

use smallvec::SmallVec;
use tollgate::{Decisions, Entry, Request, StoreError, Timestamp};

use super::coalescer::Coalescer;
use super::redis_store::RedisStore;
use crate::script::{Op, Part, TimeSource, decode};

impl RedisStore {
    /// Sends `requests` as one call of the batch script, each decided on its own (all or
    /// nothing within it) in order, whatever else is in flight: what a coalesced call does,
    /// on demand. Not part of the API: for the differential test and the benchmark, which need
    /// a batch of a known composition. On a cluster every key must be in one slot.
    #[doc(hidden)]
    pub async fn decide_batch(
        &self,
        requests: &[(&Request<'_>, tollgate::Op)],
        now: Option<Timestamp>,
    ) -> Vec<Result<Decisions, StoreError>> {
        let at = match now {
            Some(t) => TimeSource::Caller(t.as_micros()),
            None => TimeSource::Server,
        };
        let at = vec![at; requests.len()];
        self.decide_batch_each(requests, &at).await
    }

    /// [`RedisStore::decide_batch`] of checks, each at its own instant on the caller's clock
    /// (`at`, µs), as concurrent requests of a fake clock are. Not part of the API: for the
    /// differential test of the lone-check batch script.
    #[doc(hidden)]
    pub async fn check_batch_at(
        &self,
        requests: &[Request<'_>],
        at: &[u64],
    ) -> Vec<Result<Decisions, StoreError>> {
        assert_eq!(requests.len(), at.len(), "one instant per request");
        let asked: Vec<(&Request<'_>, tollgate::Op)> =
            requests.iter().map(|r| (r, tollgate::Op::Check)).collect();
        let at: Vec<TimeSource> = at.iter().map(|&t| TimeSource::Caller(t)).collect();
        self.decide_batch_each(&asked, &at).await
    }

    async fn decide_batch_each(
        &self,
        requests: &[(&Request<'_>, tollgate::Op)],
        at: &[TimeSource],
    ) -> Vec<Result<Decisions, StoreError>> {
        let entries: Vec<SmallVec<[&Entry<'_>; 2]>> = requests
            .iter()
            .map(|(r, _)| r.entries().iter().collect())
            .collect();
        let parts: Vec<Part> = requests
            .iter()
            .zip(&entries)
            .zip(at)
            .map(|(((r, op), e), &at)| Part::new(Op::from(*op), e, at, r.counts_refusals()))
            .collect();
        let parts: Vec<&Part> = parts.iter().collect();
        super::coalesce::batch(self, &parts)
            .await
            .into_iter()
            .zip(&entries)
            .map(|(reply, e)| {
                let (_, decisions) = decode(reply?, e)?;
                Ok(decisions.into_iter().collect())
            })
            .collect()
    }

    /// Batch calls this store has made (coalesced calls of two requests or more, and
    /// [`RedisStore::decide_batch`]); 0 when coalescing is off. Not part of the API: tests
    /// use it to see that coalescing happened (the metric is process-wide).
    #[doc(hidden)]
    pub fn batches(&self) -> u64 {
        self.coalescer()
            .map_or(0, |c| c.batches.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The requests those batch calls carried. Not part of the API (the benchmark).
    #[doc(hidden)]
    pub fn batched_requests(&self) -> u64 {
        self.coalescer()
            .map_or(0, |c| c.batched.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Coalesced calls in flight now, and how many of them are batch calls; `(0, 0)` when
    /// coalescing is off. Not part of the API: tests use it to see that every call's slot was
    /// given back (a leaked slot would hold later requests in the queue).
    #[doc(hidden)]
    pub fn coalesced_calls_in_flight(&self) -> (usize, usize) {
        self.coalescer().map_or((0, 0), Coalescer::in_flight)
    }
}
