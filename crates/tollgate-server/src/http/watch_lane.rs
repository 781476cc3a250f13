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
//! One lane is still one thread, and a read of the same kind queued N times was rendered N
//! times: under `wrk -c256 /metrics` (a 390 KB body) one Prometheus scrape took 2.49 s and
//! `/v1/status` 2.61 s, behind 256 renders of the same page. So a read of a kind whose answer
//! is the same for every reader ([`WatchLane::run_shared`]: `/metrics`, `/v1/status`, …) is
//! single-flight: reads of a kind that arrive while a render of it is queued join that
//! render, and each gets a copy of its answer. A read never gets an answer rendered before it
//! arrived (one arriving while a render runs waits for the next, queued behind it), so a
//! shared answer is as fresh as an unshared one would have been; and N readers at once cost
//! about one render (two when some arrive while one runs), not N. The render run is the
//! newest arrival's (its captured inputs, such as the store's probe, the freshest).
//!
//! Nothing on a check's path waits for a lock that a render holds for long. The renders read
//! the decision counters (atomics), the metrics registry (read locks, which recording shares),
//! each top-refused sketch for a moment (a refusal finds another shard free), and the memory
//! store's key counts (one shard at a time, a moment each).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};

use tokio::sync::oneshot;

use super::response::ApiError;

/// How much lower the lane's priority is than the workers' (a `nice` increment: at +10 the
/// kernel weighs it about a tenth of a worker while both want a core).
const NICENESS: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// A kind of shared read: its name, and the type of its answer.
type KindKey = (&'static str, TypeId);

/// Per kind of shared read, its [`Pending`] (of the kind's answer type).
type Kinds = Arc<Mutex<HashMap<KindKey, Box<dyn Any + Send>>>>;

/// One thread rendering the status reads: see the module docs.
#[derive(Debug)]
pub(crate) struct WatchLane {
    jobs: mpsc::Sender<Job>,
    kinds: Kinds,
}

/// The reads of one kind waiting for its next render, which is queued while `render` is set.
struct Pending<T> {
    /// Where each answer goes.
    waiting: Vec<oneshot::Sender<T>>,
    /// The newest read's render: the one the queued render runs. `None`: none queued (none
    /// since the last began).
    render: Option<Box<dyn FnOnce() -> T + Send>>,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            waiting: Vec::new(),
            render: None,
        }
    }
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
        WatchLane {
            jobs,
            kinds: Kinds::default(),
        }
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

impl WatchLane {
    /// Like [`WatchLane::run`], for a read of `kind` whose answer is the same for every
    /// reader (no input of its own beyond freshness): single-flight, see the module docs. A
    /// read arriving while a render of `kind` is queued (not yet begun) joins it, and that
    /// render runs the newest read's `render`; one arriving while none is queued queues one.
    /// Each reader gets a clone of the answer: make `T` cheap to clone (`Bytes`, `Arc`). A
    /// render whose readers have all gone is not run. A render that panics answers each of
    /// its readers `500`.
    ///
    /// # Errors
    /// The future resolves to [`ApiError::Internal`] when the render panicked or the lane is
    /// gone.
    pub(crate) fn run_shared<T, F>(
        &self,
        kind: &'static str,
        render: F,
    ) -> impl Future<Output = Result<T, ApiError>> + use<T, F>
    where
        T: Clone + Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let key = (kind, TypeId::of::<T>());
        let queued = {
            let mut kinds = lock(&self.kinds);
            let pending = kinds
                .entry(key)
                .or_insert_with(|| Box::new(Pending::<T>::default()));
            match pending.downcast_mut::<Pending<T>>() {
                // The key holds the answer's type: always this one.
                None => Err("the status lane's kinds are mixed up"),
                Some(pending) => {
                    pending.waiting.push(done);
                    let queue = pending.render.is_none();
                    pending.render = Some(Box::new(render));
                    if queue && self.jobs.send(self.shared_job::<T>(key)).is_err() {
                        // Nothing will render: the readers are told at once.
                        *pending = Pending::default();
                    }
                    Ok(())
                }
            }
        };
        async move {
            queued.map_err(internal)?;
            // The render drops the senders without sending only when it panicked, or when
            // the lane is gone (an abandoned read has no one waiting here).
            result
                .await
                .map_err(|_| internal("the status read failed: its render panicked"))
        }
    }

    /// The job rendering the reads of `key` waiting when it begins.
    fn shared_job<T: Clone + Send + 'static>(&self, key: KindKey) -> Job {
        let kinds = Arc::clone(&self.kinds);
        Box::new(move || {
            // Reads arriving from now on wait for the next render.
            let (render, waiting) = match lock(&kinds)
                .get_mut(&key)
                .and_then(|p| p.downcast_mut::<Pending<T>>())
            {
                Some(pending) => (pending.render.take(), std::mem::take(&mut pending.waiting)),
                None => return,
            };
            let waiting: Vec<_> = waiting.into_iter().filter(|w| !w.is_closed()).collect();
            let Some(render) = render else { return };
            if waiting.is_empty() {
                // Every reader went away while the read was queued: nothing to render for.
                return;
            }
            if let Ok(value) = catch_unwind(AssertUnwindSafe(render)) {
                for reader in waiting {
                    let _ = reader.send(value.clone());
                }
            }
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// The lane, busy until the returned sender is used (or dropped): reads queue behind.
    /// The busy read's future is kept by the lane's holder (a read whose caller has gone is
    /// skipped, which would leave the lane idle).
    fn busy_lane() -> (WatchLane, mpsc::Sender<()>, impl Future<Output = ()>) {
        let lane = WatchLane::start();
        let (release, held) = mpsc::channel::<()>();
        let busy = lane.run(move || held.recv().ok());
        (lane, release, async move {
            assert_eq!(busy.await.ok(), Some(Some(())), "the busy read");
        })
    }

    /// A render of `kind` that counts its runs in `renders` and answers that count.
    fn counted(renders: &Arc<AtomicUsize>) -> impl FnOnce() -> usize + Send + 'static {
        let renders = Arc::clone(renders);
        move || renders.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// N reads of a kind at once cost one render, not N (under `wrk -c256 /metrics` a scrape
    /// waited 2.49 s behind 256 renders of the same page): all 64 reads queued while the lane
    /// was busy share the first render, and each gets its answer.
    #[tokio::test]
    async fn concurrent_reads_of_a_kind_share_one_render() {
        let (lane, release, busy) = busy_lane();
        let renders = Arc::new(AtomicUsize::new(0));
        let reads: Vec<_> = (0..64)
            .map(|_| lane.run_shared("metrics", counted(&renders)))
            .collect();
        release.send(()).expect("release the lane");
        busy.await;
        for read in reads {
            assert_eq!(
                read.await.expect("answered"),
                1,
                "the first render's answer"
            );
        }
        assert_eq!(renders.load(Ordering::SeqCst), 1, "64 reads, renders");
    }

    /// A read that arrives while a render of its kind runs is not given that render's
    /// answer (rendered before it arrived): it waits for the next, which the reads arriving
    /// meanwhile share. Kinds do not share.
    #[tokio::test]
    async fn a_read_arriving_during_a_render_gets_the_next() {
        let lane = WatchLane::start();
        let (started, began) = mpsc::channel::<()>();
        let (finish, finished) = mpsc::channel::<()>();
        let first = lane.run_shared("status", move || {
            started.send(()).ok();
            finished.recv().ok();
            "before"
        });
        began.recv().expect("the first render began");
        let later: Vec<_> = (0..8)
            .map(|_| lane.run_shared("status", || "after"))
            .collect();
        let renders = Arc::new(AtomicUsize::new(0));
        let other = lane.run_shared("history", counted(&renders));
        finish.send(()).expect("finish the first render");
        assert_eq!(first.await.expect("first"), "before");
        for read in later {
            assert_eq!(read.await.expect("later"), "after");
        }
        assert_eq!(other.await.expect("another kind"), 1);
    }

    /// A shared render whose readers have all gone is not run; one that panics answers each
    /// of its readers an error, and the kind's next read is rendered.
    #[tokio::test]
    async fn shared_reads_skip_the_abandoned_and_survive_a_panic() {
        let (lane, release, busy) = busy_lane();
        let renders = Arc::new(AtomicUsize::new(0));
        drop(lane.run_shared("metrics", counted(&renders)));
        drop(lane.run_shared("metrics", counted(&renders)));
        release.send(()).expect("release the lane");
        busy.await;
        // Queued behind the abandoned render: once answered, that one had its turn.
        lane.run(|| ()).await.expect("the lane goes on");
        assert_eq!(renders.load(Ordering::SeqCst), 0, "nobody waited");
        let failed: Vec<_> = (0..3)
            .map(|_| lane.run_shared("metrics", || -> usize { panic!("a render's bug") }))
            .collect();
        for read in failed {
            assert!(matches!(read.await, Err(ApiError::Internal(_))));
        }
        let next = lane.run_shared("metrics", counted(&renders)).await;
        assert_eq!(next.expect("the next render"), 1);
    }
}
