//! Rotation of the listeners' certificate: `server.tls_cert`, `tls_key` and `tls_client_ca`
//! re-read when they change, and on SIGHUP.
//!
//! The files are polled (their bytes compared with what was last seen) at the config file's
//! interval, for the reasons the config reloader gives (`reload`): one small read a second,
//! and every way a file gets replaced is seen (cert-manager's and Vault agent's writes, a
//! Kubernetes secret's symlink swap). A change is acted on once the files have stayed the same
//! for one interval: a certificate and its key are two files, and a pair caught half-written
//! (the new certificate, the old key) must not be refused as "mismatched" or, worse, fail the
//! next interval's reload. SIGHUP reloads at once.
//!
//! A valid new pair is swapped in whole ([`TlsAcceptors::replace`]): new connections get it,
//! open ones keep the session they have. An invalid one (unreadable, not PEM, a key that is
//! not the certificate's, an expired certificate) is refused with a logged error and
//! `tollgate_tls_reloads_total{result="error"}` (and `tollgate_tls_last_reload_successful`
//! at 0), as a refused config file is counted, and the current pair stays.
//!
//! Refused files are not loaded again until they change, with one exception: a certificate
//! refused as not yet valid (issued with a `notBefore` a little ahead, or a clock behind) is
//! refused by the clock, not by its bytes, and is loaded again, unchanged, once its validity
//! has begun.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::tasks::survive;
use crate::config::ServerTls;
use crate::metrics;
use crate::tls::{TlsAcceptors, TlsConfigs, TlsError};

/// What is watched, and what was seen.
#[derive(Debug)]
pub(super) struct TlsReloader {
    files: ServerTls,
    acceptors: TlsAcceptors,
    /// The files' bytes at the previous look.
    last_seen: Option<Vec<u8>>,
    /// The bytes last loaded (served, or refused).
    last_handled: Option<Vec<u8>>,
    /// When the files last refused become valid (their certificate was refused as not yet
    /// valid): they are loaded again then, unchanged.
    retry_at: Option<SystemTime>,
}

impl TlsReloader {
    /// Watches `files`, whose content `served` is what `acceptors` serve now.
    pub(super) fn new(files: ServerTls, acceptors: TlsAcceptors, served: Vec<u8>) -> TlsReloader {
        TlsReloader {
            files,
            acceptors,
            last_seen: Some(served.clone()),
            last_handled: Some(served),
            retry_at: None,
        }
    }

    /// Reloads if the files changed and then stayed the same for one interval, or if the
    /// certificate refused as not yet valid has become valid (or at once, when `force`d by
    /// SIGHUP).
    async fn poll(&mut self, force: bool) {
        let paths = paths(&self.files);
        let Ok(seen) = tokio::task::spawn_blocking(move || snapshot(&paths)).await else {
            return;
        };
        if !force {
            let settled = self.last_seen.as_ref() == Some(&seen);
            let handled = self.last_handled.as_ref() == Some(&seen);
            let due = self.retry_at.is_some_and(|at| SystemTime::now() >= at);
            if !settled || (handled && !due) {
                self.last_seen = Some(seen);
                return;
            }
        }
        self.last_seen = Some(seen.clone());
        self.last_handled = Some(seen);
        self.retry_at = None;
        let files = self.files.clone();
        let loaded =
            tokio::task::spawn_blocking(move || TlsConfigs::load(&files, SystemTime::now())).await;
        match loaded {
            Ok(Ok(configs)) => {
                tracing::info!(
                    cert = %self.files.cert.display(),
                    expires = %crate::tls::validity::format_time(configs.validity.not_after),
                    "TLS certificate reloaded; new connections get it"
                );
                metrics::tls_certificate_expiry(configs.validity.not_after);
                self.acceptors.replace(configs);
                metrics::tls_reload(true);
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "TLS certificate reload refused; keeping the current certificate");
                metrics::tls_reload(false);
                if let TlsError::NotYetValid { not_before, .. } = e {
                    tracing::warn!(
                        at = %crate::tls::validity::format_time(not_before),
                        "the refused certificate will be loaded again once it is valid"
                    );
                    self.retry_at = Some(not_before);
                }
            }
            Err(e) => {
                tracing::error!(cause = %e, "TLS certificate reload failed; keeping the current certificate");
                metrics::tls_reload(false);
            }
        }
    }
}

/// The files of `tls`, in a fixed order.
fn paths(tls: &ServerTls) -> Vec<PathBuf> {
    let mut paths = vec![tls.cert.clone(), tls.key.clone()];
    paths.extend(tls.client_ca.clone());
    paths
}

/// The bytes of every file, each preceded by its length (or, unreadable, not a regular file
/// or over 2 MiB, by the error), for comparison only.
pub(super) fn snapshot(paths: &[PathBuf]) -> Vec<u8> {
    let mut seen = Vec::new();
    for path in paths {
        match crate::file::read(path) {
            Ok(bytes) => {
                seen.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                seen.extend_from_slice(&bytes);
            }
            Err(e) => {
                seen.extend_from_slice(&u64::MAX.to_le_bytes());
                seen.extend_from_slice(e.to_string().as_bytes());
            }
        }
    }
    seen
}

/// The files' content now (taken before they are first loaded, so that a change made
/// between the load and the first look is not missed).
pub(super) fn served_snapshot(tls: &ServerTls) -> Vec<u8> {
    snapshot(&paths(tls))
}

/// Starts polling every `interval` and listening for SIGHUP, until `stop` turns true.
pub(super) fn spawn(
    mut reloader: TlsReloader,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    metrics::tls_reloads_watched();
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(cause = %e, "cannot listen for SIGHUP; reloading certificates on change only");
            None
        }
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => survive("TLS reloader", reloader.poll(false)).await,
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => None } } => {
                    tracing::info!("SIGHUP: reloading the TLS certificate");
                    survive("TLS reloader", reloader.poll(true)).await;
                }
                _ = stop.changed() => return,
            }
        }
    })
}

/// The listeners' TLS, when `tls` is set: the files loaded now (a start-up error names the
/// file and the cause) and watched from then on, until `stop`.
///
/// # Errors
/// [`crate::tls::TlsError`] when the files cannot be served.
pub(super) fn start(
    tls: Option<&ServerTls>,
    interval: Duration,
    stop: watch::Receiver<bool>,
) -> Result<Option<(TlsAcceptors, tokio::task::JoinHandle<()>)>, crate::tls::TlsError> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    let served = served_snapshot(tls);
    let configs = TlsConfigs::load(tls, SystemTime::now())?;
    metrics::tls_certificate_expiry(configs.validity.not_after);
    // Which listener serves it is in the "listening" line (a `unix:` one never does).
    tracing::info!(
        cert = %tls.cert.display(),
        expires = %crate::tls::validity::format_time(configs.validity.not_after),
        client_ca = %tls.client_ca.as_ref().map_or_else(|| "none".to_owned(), |ca| ca.display().to_string()),
        grpc_client_names = tls.client_names.len(),
        "TLS certificate loaded"
    );
    let acceptors = TlsAcceptors::new(configs);
    let reloader = TlsReloader::new(tls.clone(), acceptors.clone(), served);
    Ok(Some((acceptors.clone(), spawn(reloader, interval, stop))))
}
