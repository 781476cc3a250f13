//! The process's stop signals (SIGINT, SIGTERM), as `main`'s shutdown future. (SIGHUP, which
//! reloads, is the reloader's.)

/// Resolves on SIGINT (ctrl-c) or SIGTERM. The handlers are installed when this is called,
/// not when the future is first polled: a process told to stop right after it logs
/// "listening" (a supervisor, a test) stops gracefully instead of dying of the signal's
/// default action. Call it inside the runtime, before serving.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(cause = %e, "cannot listen for {name}");
            None
        }
    };
    let interrupt = listen(SignalKind::interrupt(), "SIGINT");
    let terminate = listen(SignalKind::terminate(), "SIGTERM");
    async move {
        let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(interrupt) => {}
            () = wait(terminate) => {}
        }
    }
}
