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
/// `TOLLGATE_ADMIN_TOKEN`.
#[derive(Clone, Default)]
pub struct Overrides {
    /// `TOLLGATE_HTTP`: replaces `server.http`.
    pub http: Option<String>,
    /// `TOLLGATE_GRPC`: replaces `server.grpc` (and serves the Envoy service).
    pub grpc: Option<String>,
    /// `TOLLGATE_REDIS_URL`: replaces `store.redis` (and any `store.cluster`).
    pub redis_url: Option<String>,
    /// `TOLLGATE_ADMIN_TOKEN`: replaces `server.admin_token`.
    pub admin_token: Option<String>,
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
const TARGETS: [Target; 4] = [
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
        // One Redis from the environment replaces the file's store, a cluster included.
        if self.redis_url.is_some() {
            raw.store.cluster = None;
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
            .finish()
    }
}
