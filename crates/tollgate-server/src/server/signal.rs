//! The process's stop signals (SIGINT, SIGTERM), as `main`'s shutdown future; and SIGHUP's
//! handler installed before the port is bound ([`hangup_survived`]), the reloader listening
//! to it once serving.

/// Installs a SIGHUP handler now, so that from here on SIGHUP never has its default action
/// (terminate). `tollgate serve` calls it before binding its port: the port accepts
/// connections from then on, while the store is still being opened (a Redis that accepts and
/// does not answer holds start-up for seconds), and a supervisor or a config reloader that
/// sees the port open and sends SIGHUP took the service down, silently. A SIGHUP then is
/// dropped: the reloader, started with the server, reads the file again on its own polls.
/// (tokio keeps a signal's handler for the life of the process once installed; the returned
/// stream only has to be held for the handler to be there.)
pub fn hangup_survived() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(cause = %e, "cannot listen for SIGHUP");
            None
        }
    }
}

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
