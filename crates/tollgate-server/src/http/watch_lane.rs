//! [`WatchLane`]: where the status reads are rendered, on one thread of their own that yields
//! to the checks.
//!
//! Watching must cost nothing (issue #33), and under a flood it did not: with 64 limits a
//! read of `/metrics` costs the service about half a millisecond, `/v1/status` and
//! `/v1/history` about a third, against 10 µs for a check. Rendered on the request workers,
//! eight connections reading `/metrics` as fast as they could cut the checks to a fifth
//! (docs/benchmarks.md, "A flood of status reads"). Any client that reaches the port can send
//! that flood.
//!
//! So the renders leave the workers. Each goes to this lane: one thread, rendering one read
//! at a time, in the order asked, at a lower scheduling priority (`nice` +10 on Linux, the
//! thread alone). The workers only wait for the answer, so a flood of reads takes at most one
//! thread's time, and the kernel gives that thread the cores only when the workers leave them
//! idle. A read still waits behind the reads queued before it, and there are at most as many
//! of those as the listener holds connections (`server.max_connections`). A read whose client
//! has gone by its turn is not rendered.
//!
//! Nothing on a check's path waits for a lock that a render holds for long. The renders read
//! the decision counters (atomics), the metrics registry (read locks, which recording shares),
//! each top-refused sketch for a moment (a refusal finds another shard free), and the memory
//! store's key counts (one shard at a time, a moment each).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::response::ApiError;

/// How much lower the lane's priority is than the workers' (a `nice` increment: at +10 the
/// kernel weighs it about a tenth of a worker while both want a core).
const NICENESS: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// One thread rendering the status reads: see the module docs.
#[derive(Debug)]
pub(crate) struct WatchLane {
    jobs: mpsc::Sender<Job>,
}

impl WatchLane {
    /// Starts the lane's thread; it ends when the lane is dropped.
    ///
    /// # Panics
    /// If the thread cannot be started (the process is out of threads at start-up).
    #[must_use]
    pub(crate) fn start() -> WatchLane {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("tollgate-watch".into())
            .spawn(move || {
                lower_priority();
                for job in queue {
                    job();
                }
            })
            .expect("starting the status reads' thread");
        WatchLane { jobs }
    }

    /// Queues `render` on the lane now, and returns the wait for its result. A render that
    /// panics is answered `500` (the lane goes on with the next).
    ///
    /// # Errors
    /// The future resolves to [`ApiError::Internal`] when `render` panicked or the lane is
    /// gone.
    pub(crate) fn run<T, F>(
        &self,
        render: F,
    ) -> impl Future<Output = Result<T, ApiError>> + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            // The client went away while the read was queued: nothing to render for.
            if done.is_closed() {
                return;
            }
            if let Ok(value) = catch_unwind(AssertUnwindSafe(render)) {
                let _ = done.send(value);
            }
        });
        let queued = self.jobs.send(job);
        async move {
            queued.map_err(|_| internal("the status lane has stopped"))?;
            // The job drops its sender without sending only when the render panicked (an
            // abandoned read has no one waiting here).
            result
                .await
                .map_err(|_| internal("the status read failed: its render panicked"))
        }
    }
}

fn internal(what: &'static str) -> ApiError {
    ApiError::Internal(what.into())
}

/// Lowers the calling thread's scheduling priority by [`NICENESS`] (Linux: `setpriority` on
/// the thread's own id changes that thread only). Where that fails, the lane still runs, at
/// the workers' priority, and says so once.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let result = rustix::process::getpriority_process(Some(tid)).and_then(|now| {
            rustix::process::setpriority_process(Some(tid), now.saturating_add(NICENESS))
        });
        if let Err(error) = result {
            tracing::warn!(%error, "status reads run at the workers' priority: setpriority failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders run, in order, and a panicking one answers an error without stopping the lane.
    #[tokio::test]
    async fn renders_in_order_and_survives_a_panic() {
        let lane = WatchLane::start();
        assert_eq!(lane.run(|| 1 + 1).await.expect("first render"), 2);
        let failed = lane.run(|| -> u32 { panic!("a render's bug") }).await;
        assert!(matches!(failed, Err(ApiError::Internal(_))), "{failed:?}");
        assert_eq!(lane.run(|| "next").await.expect("after a panic"), "next");
    }

    /// The lane's thread runs below the caller's priority.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn runs_at_a_lower_priority() {
        let lane = WatchLane::start();
        let here = rustix::process::getpriority_process(Some(rustix::thread::gettid()))
            .expect("this thread's priority");
        let there = lane
            .run(|| rustix::process::getpriority_process(Some(rustix::thread::gettid())))
            .await
            .expect("render")
            .expect("the lane's priority");
        assert_eq!(there, (here + NICENESS).min(19), "caller at {here}");
    }

    /// A read whose caller has gone is skipped, not rendered.
    #[tokio::test]
    async fn skips_a_read_nobody_waits_for() {
        let lane = WatchLane::start();
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let rendered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The first render holds the lane until told; the second is queued behind it, and
        // its caller gives up before its turn.
        let first = lane.run(move || held.recv().ok());
        let flag = rendered.clone();
        let second = lane.run(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        drop(second);
        hold.send(()).expect("release the first");
        assert_eq!(first.await.expect("first render"), Some(()));
        assert_eq!(lane.run(|| ()).await.ok(), Some(()), "the lane goes on");
        assert!(!rendered.load(std::sync::atomic::Ordering::SeqCst));
    }
}
