//! What the status page says about reloads: whether the config file is watched, the last
//! reload's time, result and error, and the `[server]` / `[store]` settings the file changed
//! that wait for a restart (a reload applies only the limits and the Envoy rules: without this
//! the page said "applied" and an operator took the edit for live).
//!
//! The error is the one logged, except for fields that hold secrets (`server.admin_token`,
//! `store.redis`, `store.cluster` and the environment variables that replace them): a value
//! the parser quotes back ("invalid type: integer `1234…`") must not reach a page that is
//! safe to expose inside a cluster, so for those only the field is named.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use crate::config::ConfigError;

/// Watching and the last reload.
#[derive(Debug, Default)]
pub struct ReloadStatus {
    watching: AtomicBool,
    last: Mutex<Option<LastReload>>,
    /// Settings the file changes that take effect on restart (`store.timeout`).
    pending_restart: Mutex<Vec<String>>,
}

/// One reload attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReload {
    /// When it was attempted.
    pub at: SystemTime,
    /// Whether the new limits were applied.
    pub ok: bool,
    /// Why not, when refused.
    pub error: Option<String>,
}

/// Fields whose values are secrets, as [`ConfigError::field`] names them.
const SECRET_FIELDS: &[&str] = &[
    "server.admin_token",
    "store.redis",
    "store.cluster",
    "store.sentinel",
    "store.password",
    "TOLLGATE_ADMIN_TOKEN",
    "TOLLGATE_REDIS_URL",
    "TOLLGATE_REDIS_PASSWORD",
    "TOLLGATE_SENTINEL_PASSWORD",
];

impl ReloadStatus {
    /// The config file is watched from now on.
    pub(crate) fn watching(&self) {
        self.watching.store(true, Ordering::Relaxed);
    }

    /// Whether the config file is watched.
    pub fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    /// Records an attempt: applied, or refused with `error`.
    pub(crate) fn record(&self, error: Option<String>) {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(LastReload {
            at: SystemTime::now(),
            ok: error.is_none(),
            error,
        });
    }

    /// The settings the file (as last applied) changes that wait for a restart: set at each
    /// valid file, emptied by one that changes none.
    pub(crate) fn set_pending_restart(&self, settings: Vec<String>) {
        crate::metrics::restart_pending(settings.len());
        *self
            .pending_restart
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = settings;
    }

    /// The settings waiting for a restart ([`ReloadStatus::set_pending_restart`]).
    pub fn pending_restart(&self) -> Vec<String> {
        self.pending_restart
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The last attempt, if any.
    pub fn last(&self) -> Option<LastReload> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// `error`'s message for the page: whole, unless its field holds a secret.
pub(crate) fn shown(error: &ConfigError) -> String {
    match error.field() {
        Some(field) if SECRET_FIELDS.iter().any(|s| field.starts_with(s)) => {
            format!("{field}: invalid (the value is not shown: it holds a secret)")
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    /// A value quoted back by the parser is not shown for a secret field; other errors are
    /// shown whole.
    #[test]
    fn secrets_are_not_repeated() {
        let limit = "[[limits]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\non_store_error = \"deny\"\n";
        let text = format!("[server]\nadmin_token = 123456789012\n{limit}period = \"1s\"\n");
        let error = Config::parse(&text, "t.toml", &Overrides::default()).expect_err("invalid");
        assert_eq!(error.field(), Some("server.admin_token"), "{error}");
        let text = shown(&error);
        assert!(!text.contains("123456789012"), "{text}");
        assert!(text.contains("admin_token"), "{text}");

        let text = format!("{limit}period = \"0s\"\n");
        let error = Config::parse(&text, "t.toml", &Overrides::default()).expect_err("invalid");
        assert_eq!(shown(&error), error.to_string());
    }
}
