//! The config file's shape exactly as written, before validation.
//!
//! Fields are kept close to TOML (strings for durations and algorithm names) so that every
//! validation error can name the field in the file; [`super::Config`] holds the checked,
//! typed result.

use serde::Deserialize;
use tollgate::OnStoreError;
use tollgate_envoy::EnvoyRules;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) store: RawStore,
    #[serde(default)]
    pub(super) limits: Vec<RawLimit>,
    /// `[envoy]`: tollgate-envoy's own type (it rejects unknown fields too); checked against
    /// the limits after they are built.
    #[serde(default)]
    pub(super) envoy: EnvoyRules,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) http: Option<String>,
    pub(super) grpc: Option<String>,
    pub(super) admin_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) redis: Option<String>,
    pub(super) cluster: Option<Vec<String>>,
    pub(super) timeout: Option<String>,
    pub(super) prefix: Option<String>,
    pub(super) max_keys: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: String,
    pub(super) algorithm: String,
    pub(super) limit: u64,
    pub(super) period: String,
    pub(super) burst: Option<u64>,
    pub(super) buckets: Option<u32>,
    #[serde(default)]
    pub(super) key: Vec<String>,
    /// Required: whether a limit fails open or closed is a decision, never a default.
    pub(super) on_store_error: OnStoreError,
    #[serde(default)]
    pub(super) shadow: bool,
}
