//! Hot reload of the limits and the Envoy rules.
//!
//! The config file is polled (its content compared with what was last seen) every interval,
//! one second by default, and re-read on SIGHUP; so is the directory of Envoy YAML files it
//! names (`envoy.config_dir`: each file's name and content). A change is acted on once the content has
//! stayed the same for one interval, so a file caught half-written (an editor truncates, then
//! writes; a truncated file can be valid TOML with fewer limits) is never applied; a reload
//! therefore lands one to two intervals after the edit. On SIGHUP the file is read twice,
//! 100 ms apart, and applied when both agree (else the poll takes it once it has settled).
//!
//! Polling rather than `notify`: one small read a second costs nothing next to the traffic a
//! rate limiter serves, needs no extra dependency, and sees every way a file gets replaced
//! (editors that write a new file and rename it over the old one, Kubernetes ConfigMaps that
//! swap a symlink) without watch-descriptor bookkeeping.
//!
//! A valid new file swaps the limit set, and the `[envoy]` rules compiled over it, atomically
//! over the same store, so counters of unchanged limits carry on (a limit whose algorithm
//! changed starts afresh: its keys carry the algorithm's tag, and a sliding window's its
//! bucket width) and the HTTP API and the gRPC
//! service keep sharing them. An invalid file (an invalid `[envoy]` section included) is
//! refused whole with a logged error and `tollgate_reloads_total{result="error"}`, and
//! the old limits and rules stay; a file without limits is invalid (a file truncated to
//! nothing, or emptied by mistake, must not switch every limit off). A valid file that drops
//! limits the running config has is applied, with a warning naming them. The replaced set
//! gives back the unspent units of its leases (lease-mode limits) right after the swap. `[server]` and
//! `[store]` are read at start-up only; a change there is logged with the settings it names
//! (`Config::restart_only_changes`) and waits for a restart. The first look after start-up
//! finds the file the service started from, and is not counted as a reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::clock::SharedClock;
use super::tasks::survive;
use crate::config::{Config, Overrides};
use crate::http::AppState;
use crate::limits::Limits;
use crate::metrics;
use crate::status::reload_status;

/// How long the file must stay the same to be applied on SIGHUP: it is read twice, this far
/// apart (the poll's one interval would make SIGHUP no faster than an edit).
const SIGHUP_SETTLE: Duration = Duration::from_millis(100);

/// Separates the config file's text from the `envoy.config_dir` contents in what the poller
/// compares (a NUL: never in a TOML file that parsed).
const DIR_MARK: &str = "\0envoy.config_dir\0";

/// The file's `text`, followed by what `dir` (the running config's `envoy.config_dir`) holds:
/// the YAML files are watched like the file, so an edit there reloads too (one to two
/// intervals later, once it has settled), as the reference service reloads on a write in its
/// runtime directory.
fn with_rules_dir(mut text: String, dir: Option<&std::path::Path>) -> String {
    if let Some(dir) = dir {
        text.push_str(DIR_MARK);
        text.push_str(&tollgate_envoy::dir_contents(dir));
    }
    text
}

/// The config file's text, unless it is not a regular file or is larger than
/// [`crate::config::MAX_FILE_BYTES`] (an error saying so, without reading it; `crate::file`),
/// read off the runtime's threads.
async fn read_capped(path: &std::path::Path) -> std::io::Result<String> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || crate::file::read_text(&path))
        .await
        .map_err(std::io::Error::other)?
}

/// Everything a reload needs.
#[derive(Debug)]
pub(crate) struct Reloader {
    path: PathBuf,
    overrides: Overrides,
    running: Config,
    clock: Option<SharedClock>,
    state: Arc<AppState>,
    /// The content at the previous look.
    last_seen: Option<String>,
    /// The content last parsed (applied or refused).
    last_handled: Option<String>,
    /// The read failure last reported (each failure once, not every second).
    read_failed: Option<String>,
    /// The file has been parsed since start-up.
    looked: bool,
}

impl Reloader {
    pub(crate) fn new(
        path: PathBuf,
        overrides: Overrides,
        running: Config,
        clock: Option<SharedClock>,
        state: Arc<AppState>,
    ) -> Reloader {
        // Nothing seen yet: the first look parses the file and compares its limits with the
        // running ones, so an edit made between start-up and now is not missed.
        let last_seen = None;
        Reloader {
            path,
            overrides,
            running,
            clock,
            state,
            last_seen,
            last_handled: None,
            read_failed: None,
            looked: false,
        }
    }

    /// The file's text and the rules directory's contents; `None` (the failure reported, once
    /// unless `force`d) when the file cannot be read.
    async fn read(&mut self, force: bool) -> Option<String> {
        let text = match read_capped(&self.path).await {
            Ok(text) => text,
            Err(e) => {
                let shown = e.to_string();
                if force || self.read_failed.as_deref() != Some(shown.as_str()) {
                    tracing::error!(path = %self.path.display(), cause = %e, "cannot read the config file; keeping the current limits");
                    self.loaded(false);
                    self.state
                        .reloads
                        .record(Some(format!("cannot read the config file: {e}")));
                }
                self.read_failed = Some(shown);
                self.last_seen = None;
                // The same file put back (moved away and back, `rm` then `cp`) is read again,
                // and its success clears the failure.
                self.last_handled = None;
                self.looked = true;
                return None;
            }
        };
        self.read_failed = None;
        // Reading the rules directory and parsing happen on the blocking pool: however large
        // or slow they are, the runtime's threads keep serving (and a SIGTERM keeps its
        // deadline).
        let dir = self.rules_dir();
        match tokio::task::spawn_blocking(move || with_rules_dir(text, dir.as_deref())).await {
            Ok(text) => Some(text),
            Err(e) => {
                tracing::error!(cause = %e, "reading envoy.config_dir failed; keeping the current limits");
                None
            }
        }
    }

    /// Reloads if the file's content changed and then stayed the same for one interval (or,
    /// when `force`d by SIGHUP, for [`SIGHUP_SETTLE`]: a SIGHUP sent on the first write of an
    /// editor, or by a reloader watching for changes, must not apply a file caught half-way).
    async fn poll(&mut self, force: bool) {
        let Some(text) = self.read(force).await else {
            return;
        };
        if force {
            tokio::time::sleep(SIGHUP_SETTLE).await;
            let Some(again) = self.read(force).await else {
                return;
            };
            if again != text {
                tracing::info!(
                    "SIGHUP: the file changed while it was read; reloading once it has stayed the same for a second"
                );
                self.last_seen = Some(again);
                return;
            }
        } else {
            // Act only on content that has not changed for one interval: a file being
            // written (truncated, then filled) is never read half-way.
            let settled = self.last_seen.as_deref() == Some(text.as_str());
            let handled = self.last_handled.as_deref() == Some(text.as_str());
            if !settled || handled {
                self.last_seen = Some(text);
                return;
            }
        }
        // The first look after start-up (unless a SIGHUP asked for it): a file that still says
        // what runs is no reload, and is not counted as one.
        let first = !self.looked && !force;
        self.looked = true;
        self.last_seen = Some(text.clone());
        self.last_handled = Some(text.clone());
        let origin = self.path.display().to_string();
        let file = text
            .split_once(DIR_MARK)
            .map_or(text.as_str(), |(file, _)| file)
            .to_owned();
        let overrides = self.overrides.clone();
        let parsed =
            tokio::task::spawn_blocking(move || Config::parse(&file, &origin, &overrides)).await;
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                tracing::error!(cause = %e, "config reload failed; keeping the current limits");
                self.loaded(false);
                self.state
                    .reloads
                    .record(Some(format!("the reload failed: {e}")));
                return;
            }
        };
        match parsed {
            Ok(config) if !self.read_what_settled(&config, &text) => {
                // The parse read the rules directory again, and found it changed since the
                // snapshot that settled (a file being written, caught half-way): not applied,
                // and the next settled snapshot is parsed even if it is this one again.
                tracing::info!(
                    "envoy.config_dir changed while it was read; reloading once it has stayed the same"
                );
                self.last_handled = None;
                // A first look that did not apply is still the first look.
                self.looked = !first;
            }
            Ok(config) => self.apply(config, first),
            Err(e) => {
                tracing::error!(error = %e, "config reload refused; keeping the current limits");
                self.loaded(false);
                self.state.reloads.record(Some(reload_status::shown(&e)));
            }
        }
    }

    /// Whether `config`'s Envoy rules were loaded from what `snapshot` (the settled text the
    /// reload acts on) shows of the rules directory. `Config::parse` reads the directory
    /// again: a file written between the two was applied as the parse caught it (an editor's
    /// first, partial write), while the reloader marked the settled snapshot as handled, so
    /// the finished file, equal to that snapshot, was never applied (an audit: a limit
    /// missing for good, 2 617 calls allowed of a 5 a minute limit). True when there is no
    /// directory, or the new file names another one (the snapshot watched the running one).
    fn read_what_settled(&self, config: &Config, snapshot: &str) -> bool {
        let (Some(running), Some(dir)) = (&self.running.envoy.config_dir, &config.envoy.config_dir)
        else {
            return true;
        };
        if running != dir {
            return true;
        }
        let seen = snapshot.split_once(DIR_MARK).map_or("", |(_, dir)| dir);
        config.envoy.imported.read_digest == tollgate_envoy::contents_digest(seen)
    }

    /// Counts a reload's result: `tollgate_reloads_total`, and, while the running config reads
    /// an `envoy.config_dir`, the reference's `ratelimit_service_config_load_success` /
    /// `_error` (as it counts each load of its runtime directory).
    fn loaded(&self, ok: bool) {
        metrics::config_reload(ok);
        if self.running.envoy.config_dir.is_some() {
            tollgate_envoy::config_load(ok);
        }
    }

    /// The running config's `envoy.config_dir`, from the config file's directory.
    fn rules_dir(&self) -> Option<PathBuf> {
        let base = self.path.parent().unwrap_or(std::path::Path::new(""));
        self.running
            .envoy
            .config_dir
            .as_ref()
            .map(|dir| base.join(dir))
    }

    /// Applies a valid file; `first`: the first look since start-up.
    fn apply(&mut self, config: Config, first: bool) {
        let waiting = self.running.restart_only_changes(&config);
        self.state
            .reloads
            .set_pending_restart(waiting.iter().map(|s| (*s).to_owned()).collect());
        if !waiting.is_empty() {
            // Compared with what runs, not with the previous file: repeated at every reload
            // until the restart.
            tracing::warn!(
                settings = ?waiting,
                "[server] and [store] changes take effect on restart; reloading [[limits]] and [envoy] only"
            );
        }
        let unchanged = config.limits == self.running.limits && config.envoy == self.running.envoy;
        if unchanged && first && waiting.is_empty() {
            tracing::info!(path = %self.path.display(), "config file as at start; watching it for edits");
            return;
        }
        if unchanged {
            // A valid file that says what runs: a success (the file put back after a refused
            // edit clears the alarm, `tollgate_config_last_reload_successful` and the page).
            tracing::info!("config file read; limits and envoy rules unchanged");
            self.loaded(true);
            self.state.reloads.record(None);
            return;
        }
        let limits = Limits::build(
            config.limits.clone(),
            &config.envoy,
            self.state.store.clone(),
            self.running.store.namespace.clone(),
            self.clock.clone(),
        );
        match limits {
            Ok(limits) => {
                let names: Vec<&str> = config.limits.iter().map(|l| l.limit.name()).collect();
                // A set: a file of thousands of limits is not compared name by name.
                let kept: std::collections::HashSet<&str> = names.iter().copied().collect();
                let removed: Vec<&str> = self
                    .running
                    .limits
                    .iter()
                    .map(|l| l.limit.name())
                    .filter(|name| !kept.contains(name))
                    .collect();
                // Loudly: every check naming one of them is refused from now on.
                if !removed.is_empty() {
                    tracing::warn!(
                        ?removed,
                        "config reload removes limits; checks naming them now answer 400 unknown limit"
                    );
                }
                tracing::info!(limits = ?names, envoy_rules = config.envoy.rules.len(), "config reloaded");
                let old = self.state.limits.swap(Arc::new(limits));
                // The old set's leases go back (units of removed or changed limits included);
                // the new set takes its own from the first check.
                tokio::spawn(async move { old.return_leases("reload").await });
                self.running.limits = config.limits;
                self.running.envoy = config.envoy;
                self.loaded(true);
                self.state.reloads.record(None);
            }
            Err(e) => {
                tracing::error!(error = %e, "config reload refused; keeping the current limits");
                self.loaded(false);
                self.state.reloads.record(Some(e.to_string()));
            }
        }
    }
}

/// Starts polling every `interval` and listening for SIGHUP, until `stop` turns true. The
/// SIGHUP handler is in place when this returns (so a SIGHUP sent after start-up is never
/// the default "terminate").
pub(crate) fn spawn(
    reloader: Reloader,
    interval: Duration,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(cause = %e, "cannot listen for SIGHUP; reloading on file change only");
            None
        }
    };
    tokio::spawn(run(reloader, interval, hangup, stop))
}

/// Without a config file there is nothing to reload, but SIGHUP must not terminate the
/// service (its default action) either: it is logged and ignored, until `stop` turns true.
pub(crate) fn ignore_hangup(mut stop: watch::Receiver<bool>) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => signal,
        Err(e) => {
            tracing::warn!(cause = %e, "cannot listen for SIGHUP");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                got = hangup.recv() => match got {
                    Some(()) => tracing::info!("SIGHUP: started without --config, nothing to reload"),
                    None => return,
                },
                _ = stop.changed() => return,
            }
        }
    });
}

async fn run(
    mut reloader: Reloader,
    interval: Duration,
    mut hangup: Option<tokio::signal::unix::Signal>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => survive("reloader", reloader.poll(false)).await,
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => None } } => {
                tracing::info!("SIGHUP: reloading the config file");
                survive("reloader", reloader.poll(true)).await;
            }
            _ = stop.changed() => return,
        }
    }
}
