//! [`Coalescer`]: the queues of one store's coalesced calls, and the counting that decides
//! whether a request goes out alone or waits for the next call that ends (why these numbers:
//! `coalesce.rs`).

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::Value;
use tokio::sync::oneshot;
use tollgate::StoreError;

use crate::script::Part;

/// The default cap on the requests of one batch call.
pub const DEFAULT_MAX_BATCH: usize = 64;

/// Calls of one queue in flight at once, lone or batch: below it a request goes out alone,
/// pipelined as without coalescing; at it, requests queue for the next call that ends.
pub(super) const MAX_IN_FLIGHT: usize = 16;

/// Batch calls of one queue in flight at which new requests stop going out alone and queue
/// for the next call that ends (see the module docs).
pub(super) const BATCHES_IN_FLIGHT: usize = 2;

/// The queues of one store.
pub(crate) struct Coalescer {
    pub(super) queues: Box<[Mutex<Queue>]>,
    pub(super) max_batch: usize,
    /// Batch calls made and the requests they carried, for the tests and the benchmark.
    pub(crate) batches: AtomicU64,
    pub(crate) batched: AtomicU64,
}

/// One queue: how many calls are in flight (and how many of them are batches), and what
/// waits for one to end.
#[derive(Default)]
pub(super) struct Queue {
    in_flight: usize,
    batches: usize,
    pub(super) pending: Vec<Job>,
}

impl Queue {
    /// Whether a new request may go out alone now; if so, counts its call in flight.
    pub(super) fn start_alone(&mut self) -> bool {
        if self.in_flight >= MAX_IN_FLIGHT || self.batches >= BATCHES_IN_FLIGHT {
            return false;
        }
        self.in_flight += 1;
        true
    }

    /// A call ended (a batch or not): the oldest requests queued meanwhile, at most
    /// `max_batch`, for it to carry next (its slot in flight passes to them, counted as a
    /// batch when they are two or more); `None`, and one call fewer in flight, when nothing
    /// is queued.
    pub(super) fn end(&mut self, was_batch: bool, max_batch: usize) -> Option<Vec<Job>> {
        if was_batch {
            self.batches -= 1;
        }
        if self.pending.is_empty() {
            self.in_flight -= 1;
            return None;
        }
        let jobs: Vec<Job> = if self.pending.len() <= max_batch {
            std::mem::take(&mut self.pending)
        } else {
            self.pending.drain(..max_batch).collect()
        };
        if jobs.len() > 1 {
            self.batches += 1;
        }
        Some(jobs)
    }

    /// Calls `jobs` (taken by [`Queue::end`]) that could not be sent: their slot is freed.
    pub(super) fn abandon(&mut self, jobs: &[Job]) {
        if jobs.len() > 1 {
            self.batches -= 1;
        }
        self.in_flight -= 1;
    }
}

/// A queued request: its call (its share of a batch, or sent as its own call when it goes
/// alone), and where its answer goes.
pub(super) struct Job {
    pub(super) part: Part,
    pub(super) answer: oneshot::Sender<Result<Value, StoreError>>,
}

impl Coalescer {
    /// `queues` queues (1 on a single Redis, one per slot on a cluster), `max_batch` requests
    /// at most per call.
    pub(crate) fn new(queues: usize, max_batch: usize) -> Coalescer {
        Coalescer {
            queues: (0..queues).map(|_| Mutex::default()).collect(),
            max_batch: max_batch.max(1),
            batches: AtomicU64::new(0),
            batched: AtomicU64::new(0),
        }
    }

    /// Calls in flight and, of them, batch calls, over all queues (tests: after a load, both
    /// are back to zero, whatever failed meanwhile).
    pub(crate) fn in_flight(&self) -> (usize, usize) {
        self.queues.iter().fold((0, 0), |(calls, batches), q| {
            let q = lock(q);
            (calls + q.in_flight, batches + q.batches)
        })
    }
}

pub(super) fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Entry, Key, Limit, Namespace, Quota};

    fn job() -> (Job, oneshot::Receiver<Result<Value, StoreError>>) {
        let limit =
            Limit::new("q", Algorithm::Gcra, Quota::per_second(10).expect("valid")).expect("valid");
        let ns = Namespace::new("queue-test").expect("valid");
        let entry = Entry::new(&limit, Key::new(&ns, &limit, &[("user", "1")]));
        let part = Part::new(
            crate::script::Op::Check,
            &[&entry],
            crate::script::TimeSource::Server,
            false,
        );
        let (answer, waiting) = oneshot::channel();
        (Job { part, answer }, waiting)
    }

    /// A queue whose sixteen calls in flight all went out alone.
    fn full_of_lone_calls() -> Queue {
        let mut q = Queue::default();
        for i in 0..MAX_IN_FLIGHT {
            assert!(
                q.start_alone(),
                "request {i} of {MAX_IN_FLIGHT} goes out alone"
            );
        }
        assert_eq!((q.in_flight, q.batches), (MAX_IN_FLIGHT, 0));
        q
    }

    /// Queues `n` jobs, as requests that could not go out alone.
    fn queue_jobs(q: &mut Queue, n: usize) {
        for _ in 0..n {
            assert!(!q.start_alone(), "the request had to queue");
            q.pending.push(job().0);
        }
    }

    #[test]
    fn requests_go_alone_up_to_sixteen_calls_in_flight() {
        let mut q = full_of_lone_calls();
        assert!(!q.start_alone(), "the seventeenth queues");
        assert_eq!(q.in_flight, MAX_IN_FLIGHT);
    }

    #[test]
    fn two_batches_in_flight_make_new_requests_queue() {
        let mut q = full_of_lone_calls();
        // Two lone calls end with requests queued behind them: each carries a batch next.
        queue_jobs(&mut q, 3);
        assert_eq!(q.end(false, 64).map(|j| j.len()), Some(3));
        assert_eq!(q.batches, 1);
        queue_jobs(&mut q, 2);
        assert_eq!(q.end(false, 64).map(|j| j.len()), Some(2));
        assert_eq!((q.in_flight, q.batches), (MAX_IN_FLIGHT, 2));
        // Fourteen lone calls end with nothing queued: slots free up...
        for _ in 0..MAX_IN_FLIGHT - 2 {
            assert!(q.end(false, 64).is_none());
        }
        assert_eq!(q.in_flight, 2);
        // ...but with two batches in flight a new request still queues.
        assert!(
            !q.start_alone(),
            "two batches in flight: the request queues"
        );
        q.pending.push(job().0);
        // A batch ends: the one queued request goes next, alone, in its slot, and with one
        // batch left in flight new requests go out alone again.
        assert_eq!(q.end(true, 64).map(|j| j.len()), Some(1));
        assert_eq!((q.in_flight, q.batches), (2, 1));
        assert!(
            q.start_alone(),
            "one batch in flight: the request goes out alone"
        );
        assert_eq!(q.in_flight, 3);
    }

    #[test]
    fn a_batch_that_ends_with_nothing_queued_frees_its_slot() {
        let mut q = full_of_lone_calls();
        queue_jobs(&mut q, 70);
        assert_eq!(
            q.end(false, 64).map(|j| j.len()),
            Some(64),
            "at most a batch"
        );
        assert_eq!(
            q.pending.len(),
            6,
            "the rest waits for the next call that ends"
        );
        assert_eq!(q.end(true, 64).map(|j| j.len()), Some(6));
        assert_eq!(q.batches, 1);
        assert!(q.end(true, 64).is_none());
        assert_eq!((q.in_flight, q.batches), (MAX_IN_FLIGHT - 1, 0));
        // A batch taken but never sent (no runtime left) gives its slot back too.
        q.pending.extend([job().0, job().0]);
        let jobs = q.end(false, 64).expect("two queued");
        assert_eq!((q.in_flight, q.batches), (MAX_IN_FLIGHT - 1, 1));
        q.abandon(&jobs);
        assert_eq!((q.in_flight, q.batches), (MAX_IN_FLIGHT - 2, 0));
    }
}
