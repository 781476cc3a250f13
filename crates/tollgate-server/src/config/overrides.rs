//! [`Overrides`]: the `TOLLGATE_*` environment variables, applied in one place, to the raw
//! config as read from the file, before anything is validated.
//!
//! Each variable replaces one raw field ([`TARGETS`]); the raw config remembers which fields
//! came from the environment, so validation names the variable instead of the field when the
//! value is wrong (`TOLLGATE_HTTP: "nowhere" is not a listen address`). Validation itself does
//! not know about the environment.

use std::fmt;

use super::RedisUrl;
use super::raw::RawConfig;

/// Environment overrides: `TOLLGATE_HTTP`, `TOLLGATE_GRPC`, `TOLLGATE_REDIS_URL`,
/// `TOLLGATE_ADMIN_TOKEN`, and the Redis credentials `TOLLGATE_REDIS_USERNAME`,
/// `TOLLGATE_REDIS_PASSWORD`, `TOLLGATE_SENTINEL_PASSWORD` (secrets belong in the
/// environment or a file, not in a config file kept in a repository).
#[derive(Clone, Default)]
pub struct Overrides {
    /// `TOLLGATE_HTTP`: replaces `server.http`.
    pub http: Option<String>,
    /// `TOLLGATE_GRPC`: replaces `server.grpc` (and serves the Envoy service).
    pub grpc: Option<String>,
    /// `TOLLGATE_REDIS_URL`: replaces `store.redis` (and clears any `store.cluster`,
    /// `store.sentinel` and `store.sentinel_master`: one Redis replaces the file's store).
    pub redis_url: Option<String>,
    /// `TOLLGATE_ADMIN_TOKEN`: replaces `server.admin_token`.
    pub admin_token: Option<String>,
    /// `TOLLGATE_REDIS_USERNAME`: replaces `store.username`.
    pub redis_username: Option<String>,
    /// `TOLLGATE_REDIS_PASSWORD`: replaces `store.password` (and any `store.password_file`).
    pub redis_password: Option<String>,
    /// `TOLLGATE_SENTINEL_PASSWORD`: replaces `store.sentinel_password`.
    pub sentinel_password: Option<String>,
}

/// One variable and the raw field it replaces.
struct Target {
    var: &'static str,
    field: &'static str,
    /// The variable's value in [`Overrides`].
    value: fn(&Overrides) -> &Option<String>,
    /// The same, to set it.
    value_mut: fn(&mut Overrides) -> &mut Option<String>,
    /// The field it replaces in the raw config.
    slot: fn(&mut RawConfig) -> &mut Option<String>,
}

/// Every override, in one table.
const TARGETS: [Target; 7] = [
    Target {
        var: "TOLLGATE_HTTP",
        field: "server.http",
        value: |o| &o.http,
        value_mut: |o| &mut o.http,
        slot: |raw| &mut raw.server.http,
    },
    Target {
        var: "TOLLGATE_GRPC",
        field: "server.grpc",
        value: |o| &o.grpc,
        value_mut: |o| &mut o.grpc,
        slot: |raw| &mut raw.server.grpc,
    },
    Target {
        var: "TOLLGATE_REDIS_URL",
        field: "store.redis",
        value: |o| &o.redis_url,
        value_mut: |o| &mut o.redis_url,
        slot: |raw| &mut raw.store.redis,
    },
    Target {
        var: "TOLLGATE_ADMIN_TOKEN",
        field: "server.admin_token",
        value: |o| &o.admin_token,
        value_mut: |o| &mut o.admin_token,
        slot: |raw| &mut raw.server.admin_token,
    },
    Target {
        var: "TOLLGATE_REDIS_USERNAME",
        field: "store.username",
        value: |o| &o.redis_username,
        value_mut: |o| &mut o.redis_username,
        slot: |raw| &mut raw.store.username,
    },
    Target {
        var: "TOLLGATE_REDIS_PASSWORD",
        field: "store.password",
        value: |o| &o.redis_password,
        value_mut: |o| &mut o.redis_password,
        slot: |raw| &mut raw.store.password,
    },
    Target {
        var: "TOLLGATE_SENTINEL_PASSWORD",
        field: "store.sentinel_password",
        value: |o| &o.sentinel_password,
        value_mut: |o| &mut o.sentinel_password,
        slot: |raw| &mut raw.store.sentinel_password,
    },
];

impl Overrides {
    /// Reads the process environment (an empty variable counts as unset).
    pub fn from_env() -> Overrides {
        let mut overrides = Overrides::default();
        for target in &TARGETS {
            let value = std::env::var(target.var).ok().filter(|v| !v.is_empty());
            *(target.value_mut)(&mut overrides) = value;
        }
        overrides
    }

    /// Replaces the raw fields that have a variable set, and records that they did.
    pub(super) fn apply(&self, raw: &mut RawConfig) {
        for target in &TARGETS {
            if let Some(value) = (target.value)(self) {
                *(target.slot)(raw) = Some(value.clone());
                raw.from_env.push((target.field, target.var));
            }
        }
        // One Redis from the environment replaces the file's store, a cluster or a Sentinel
        // group included.
        if self.redis_url.is_some() {
            raw.store.cluster = None;
            raw.store.sentinel = None;
            raw.store.sentinel_master = None;
        }
        // A password from the environment replaces the file's, whichever way it was given.
        if self.redis_password.is_some() {
            raw.store.password_file = None;
        }
    }
}

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overrides")
            .field("http", &self.http)
            .field("grpc", &self.grpc)
            .field("redis_url", &self.redis_url.as_deref().map(RedisUrl::parse))
            .field("admin_token", &self.admin_token.as_ref().map(|_| "***"))
            .field("redis_username", &self.redis_username)
            .field(
                "redis_password",
                &self.redis_password.as_ref().map(|_| "***"),
            )
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .finish()
    }
}
