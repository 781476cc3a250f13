//! [`supervise`]: runs one of a [`super::Sentinel`]'s background tasks so that it cannot die
//! silently.

use std::future::Future;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};

/// How long after a panic the task starts again: a bug that panics on every run must not
/// spin a core.
const RESTART_DELAY: Duration = Duration::from_millis(100);

/// Runs `make()`'s future as a task, and, should it panic, logs the panic as an error and
/// runs a new one. Ends when a run ends normally (the task's own way of stopping: its store
/// was dropped); aborting the returned handle aborts the run too.
pub(super) fn supervise<F, Fut>(what: &'static str, make: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            // In a set: dropped with this task (aborted), it aborts the run.
            let mut run = JoinSet::new();
            run.spawn(make());
            match run.join_next().await {
                Some(Err(e)) if e.is_panic() => {
                    tracing::error!(task = what, cause = ?e, "sentinel: a background task panicked; starting it again");
                }
                Some(Ok(())) | Some(Err(_)) | None => return,
            }
            tokio::time::sleep(RESTART_DELAY).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A task that panics is run again, and ends for good once a run ends.
    #[tokio::test]
    async fn a_panicking_task_runs_again() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let handle = supervise("test", move || {
            let counted = Arc::clone(&counted);
            async move {
                if counted.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("a bug");
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .expect("the supervisor ends once a run ends")
            .expect("the supervisor itself does not panic");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    /// Aborting the supervisor aborts the run it supervises.
    #[tokio::test]
    async fn aborting_the_supervisor_ends_the_run() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let handle = supervise("test", move || {
            let tx = tx.clone();
            async move {
                let _held = tx;
                std::future::pending::<()>().await;
            }
        });
        tokio::task::yield_now().await;
        handle.abort();
        // Every sender dropped: the run was aborted.
        let closed = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        assert_eq!(closed, Ok(None));
    }
}
