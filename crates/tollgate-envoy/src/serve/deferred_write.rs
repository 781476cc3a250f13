//! [`DeferredWrite`]: an HTTP/2 connection's write waits one turn of the scheduler while every
//! worker is busy, so that the frames of calls made or answered in that turn leave in one
//! segment. Used by `tollgate serve`'s gRPC connections, by [`crate::serve`], and (through
//! [`crate::DeferredWriteIo`]) by clients such as `tollgate bench --grpc`.
//!
//! Why: tonic (through hyper and h2) runs each gRPC call in a task of its own, and the
//! connection's task writes whatever frames are queued each time it runs. A call that finishes
//! (or, in a client, starts) wakes the connection's task, and tokio runs a task woken that way
//! next (its "LIFO slot"), before the other calls already waiting to run. So under load each
//! answer left alone: with Envoy-like traffic (4 connections, 16 calls in flight on each) the
//! service sent 0.7 `sendto` per call, and those system calls, with the wake-ups they cause
//! in the peer, were a quarter of the service's CPU. A tonic client wrote one `writev` per
//! call in the same way.
//!
//! Waking itself and answering `Pending` once puts the connection's task behind the calls
//! queued before it; when it runs again their answers are queued too, and h2 writes them
//! together (0.1 `sendto` per call in that load; see docs/benchmarks.md, "Answers written
//! together"). Nagle's algorithm would batch the same writes by holding them until an ACK, up
//! to 40 ms; one turn of the scheduler holds them for microseconds, and only while the calls
//! it waits for are running.
//!
//! Only while every worker is busy: a worker parked for want of work means there is CPU to
//! spare, nothing queued behind this task to wait for, and a yield would only wake that worker
//! to run it (a futex wake and two context switches, which cost more at low load than the
//! `sendto` saved). Whether a worker is parked is read from tokio's runtime metrics (the
//! park/unpark count of a parked worker is odd).

use std::task::{Context, Poll};

use tokio::runtime::RuntimeMetrics;

/// One connection's choice, before each write, between writing now and one turn later.
#[derive(Debug)]
pub struct DeferredWrite {
    /// The runtime the connection runs on, `None` outside one (then it never waits).
    metrics: Option<RuntimeMetrics>,
    /// This flush has waited its turn already: its writes go now.
    waited: bool,
}

impl Default for DeferredWrite {
    fn default() -> DeferredWrite {
        DeferredWrite::new()
    }
}

impl DeferredWrite {
    /// For a connection on the current runtime (outside one, writes never wait).
    pub fn new() -> DeferredWrite {
        DeferredWrite {
            metrics: tokio::runtime::Handle::try_current()
                .ok()
                .map(|runtime| runtime.metrics()),
            waited: false,
        }
    }

    /// `Ready` when a write may go now; `Pending` (with the task woken, so that it runs again
    /// after the tasks queued before it) the first time in a flush that every worker is busy.
    pub fn poll_write_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.waited || !self.all_workers_busy() {
            return Poll::Ready(());
        }
        self.waited = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The bytes written so far are flushed: the next write starts a new flush.
    pub fn flushed(&mut self) {
        self.waited = false;
    }

    fn all_workers_busy(&self) -> bool {
        let Some(metrics) = &self.metrics else {
            return false;
        };
        (0..metrics.num_workers()).all(|worker| metrics.worker_park_unpark_count(worker) % 2 == 0)
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use super::*;

    /// A `DeferredWrite` asked once: whether that first write had to wait.
    async fn first_write_waits(turn: &mut DeferredWrite) -> bool {
        poll_fn(|cx| Poll::Ready(turn.poll_write_turn(cx).is_pending())).await
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_first_write_of_a_flush_waits_one_turn_on_a_busy_runtime() {
        // The only worker is running this test: every worker is busy.
        let mut turn = DeferredWrite::new();
        assert!(first_write_waits(&mut turn).await, "first write");
        assert!(
            !first_write_waits(&mut turn).await,
            "the same flush's write after its turn"
        );
        turn.flushed();
        assert!(
            first_write_waits(&mut turn).await,
            "the next flush's first write"
        );
    }

    /// A waker that records whether it was woken.
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_write_wakes_its_task_to_run_again() {
        // A write that waited without a wake-up would never run again: the connection hangs.
        let mut turn = DeferredWrite::new();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        assert!(turn.poll_write_turn(&mut cx).is_pending());
        assert!(
            flag.0.load(Ordering::SeqCst),
            "the waiting write did not wake its task"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_goes_at_once_while_a_worker_is_idle() {
        let metrics = tokio::runtime::Handle::current().metrics();
        let mut turn = DeferredWrite::new();
        // The other worker has nothing to do and parks: wait (bounded) until one is parked.
        let parked = |metrics: &RuntimeMetrics| {
            (0..metrics.num_workers()).any(|w| metrics.worker_park_unpark_count(w) % 2 == 1)
        };
        let mut waited = Duration::ZERO;
        while !parked(&metrics) {
            assert!(waited < Duration::from_secs(10), "no worker ever parked");
            std::thread::sleep(Duration::from_millis(1));
            waited += Duration::from_millis(1);
        }
        assert!(!first_write_waits(&mut turn).await);
    }

    #[test]
    fn outside_a_runtime_a_write_never_waits() {
        let mut turn = DeferredWrite::new();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(turn.poll_write_turn(&mut cx).is_ready());
    }
}
