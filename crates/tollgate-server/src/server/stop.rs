//! [`Stop`]: one stop signal for the servers and the background tasks, so that whichever ends
//! first (the caller's shutdown, or either server failing) ends them all.

use std::sync::Arc;

use tokio::sync::watch;

/// One stop signal for everything: the caller's shutdown, or either server ending.
#[derive(Clone)]
pub(super) struct Stop {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Stop {
    pub(super) fn new() -> Stop {
        let (tx, rx) = watch::channel(false);
        Stop {
            tx: Arc::new(tx),
            rx,
        }
    }

    /// Tells everything to stop.
    pub(super) fn stop_all(&self) {
        self.tx.send_replace(true);
    }

    /// A receiver that turns true on stop.
    pub(super) fn receiver(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Resolves once told to stop.
    pub(super) async fn stopped(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }
}
