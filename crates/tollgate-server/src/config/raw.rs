//! The config file's shape exactly as written, before validation.
//!
//! Fields are kept close to TOML (strings for durations and algorithm names) so that every
//! validation error can name the field in the file; [`super::Config`] holds the checked,
//! typed result. Environment overrides ([`super::Overrides`]) are written into this shape,
//! before validation, and recorded in [`RawConfig::from_env`] so errors name the variable.

use serde::Deserialize;
use tollgate::OnStoreError;
use tollgate_envoy::EnvoyRules;

use super::{ConfigError, FieldError};

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
    /// Fields replaced by an environment variable: (`server.http`, `TOLLGATE_HTTP`).
    #[serde(skip)]
    pub(super) from_env: Vec<(&'static str, &'static str)>,
}

impl RawConfig {
    /// Parses TOML `text` (from `origin`), turning syntax and type errors into a field path
    /// and a line.
    pub(super) fn parse(text: &str, origin: &str) -> Result<RawConfig, ConfigError> {
        let error = |field: String, e: toml::de::Error| ConfigError::Invalid {
            origin: origin.to_owned(),
            field,
            // Newlines before the span, plus one: an error at a line's start (a misspelt or
            // doubled key) is on that line, not the one before.
            line: e
                .span()
                .map(|s| text.get(..s.start).unwrap_or(text).matches('\n').count() + 1),
            source: FieldError::Toml(Box::new(e)),
        };
        let deserializer = toml::Deserializer::parse(text).map_err(|e| {
            // A key written twice: the parser names no field, but its span is the key.
            let key = match e.span() {
                Some(s) if e.message().starts_with("duplicate key") => {
                    let key = text.get(s.clone()).map(str::trim).unwrap_or_default();
                    let table = text.get(..s.start).map(table_of).unwrap_or_default();
                    format!("{table}{key}")
                }
                _ => String::new(),
            };
            error(key, e)
        })?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { String::new() } else { path };
            error(field, e.into_inner())
        })
    }

    /// How to name `field` in an error: the variable that replaced it, or the field itself.
    pub(super) fn name_of(&self, field: &'static str) -> &'static str {
        self.from_env
            .iter()
            .find(|(replaced, _)| *replaced == field)
            .map_or(field, |(_, var)| var)
    }

    /// [`RawConfig::name_of`] for a field name that is not `'static`.
    pub(super) fn name_of_any<'a>(&self, field: &'a str) -> &'a str {
        self.from_env
            .iter()
            .find(|(replaced, _)| *replaced == field)
            .map_or(field, |(_, var)| var)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) http: Option<String>,
    pub(super) grpc: Option<String>,
    #[serde(default, deserialize_with = "secret")]
    pub(super) admin_token: Option<String>,
    pub(super) header_timeout: Option<String>,
    pub(super) body_timeout: Option<String>,
    pub(super) idle_timeout: Option<String>,
    pub(super) max_connections: Option<usize>,
    pub(super) shutdown_timeout: Option<String>,
    pub(super) max_acquire_wait: Option<String>,
    pub(super) history_interval: Option<String>,
    /// TLS on the TCP listeners: the certificate chain (PEM) and its key.
    pub(super) tls_cert: Option<String>,
    pub(super) tls_key: Option<String>,
    /// mTLS: the CAs (PEM) a client certificate must chain to.
    pub(super) tls_client_ca: Option<String>,
    /// mTLS on the gRPC listener: the names a client certificate must carry one of.
    pub(super) tls_client_names: Option<Vec<String>>,
    /// The mode of `unix:` sockets (TOML octal, `0o660`).
    pub(super) unix_mode: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) redis: Option<String>,
    #[serde(default, deserialize_with = "url_list")]
    pub(super) cluster: Option<Vec<String>>,
    pub(super) timeout: Option<String>,
    pub(super) prefix: Option<String>,
    pub(super) max_keys: Option<usize>,
    pub(super) deny_cache: Option<bool>,
    pub(super) deny_cache_entries: Option<usize>,
    pub(super) coalesce: Option<bool>,
    pub(super) max_batch: Option<usize>,
    /// A PEM bundle of CAs to trust for `rediss://` (default: the system's roots).
    pub(super) tls_ca: Option<String>,
    /// A client certificate (PEM) and its key, for `tls-auth-clients yes`.
    pub(super) tls_cert: Option<String>,
    pub(super) tls_key: Option<String>,
    /// No certificate verification at all: refused unless `true` is written.
    pub(super) tls_insecure: Option<bool>,
    pub(super) username: Option<String>,
    #[serde(default, deserialize_with = "secret")]
    pub(super) password: Option<String>,
    pub(super) password_file: Option<String>,
    /// Redis Sentinel: the sentinels, and the master's name they know.
    #[serde(default, deserialize_with = "url_list")]
    pub(super) sentinel: Option<Vec<String>>,
    pub(super) sentinel_master: Option<String>,
    pub(super) sentinel_username: Option<String>,
    #[serde(default, deserialize_with = "secret")]
    pub(super) sentinel_password: Option<String>,
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
    /// `exact` (the default) or `lease` (`docs/algorithms.md`, "Leases").
    pub(super) mode: Option<String>,
    /// Lease mode: units taken per store call (default: from the observed rate).
    pub(super) lease: Option<u64>,
    /// Lease mode: how long unspent units are held before they go back (default 1s).
    pub(super) lease_ttl: Option<String>,
}

/// The table the end of `before` is in, as a field path's start: `server.`, `limits[1].`
/// (the second `[[limits]]`), or nothing at the top level. For a key written twice, which
/// the parser reports with its span only.
fn table_of(before: &str) -> String {
    let mut table = String::new();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for line in before.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
            let name = name.trim().to_owned();
            let n = match counts.iter_mut().find(|(t, _)| *t == name) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    counts.push((name.clone(), 0));
                    0
                }
            };
            table = format!("{name}[{n}].");
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            table = format!("{}.", name.trim());
        }
    }
    table
}

/// A list of URLs (`store.cluster`, `store.sentinel`): one written as a plain string is refused
/// without being quoted, since a URL may hold a password (`redis://:secret@host`). serde's
/// own message quoted it (`invalid type: string "redis://:S3CRET@…", expected a sequence`),
/// in `check-config`'s output and in the reload's logged error.
fn url_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    use serde::de::{Error, SeqAccess, Unexpected, Visitor};

    struct Urls;
    impl<'de> Visitor<'de> for Urls {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of URLs in brackets, e.g. [\"redis://10.0.0.1:7000\"]")
        }
        fn visit_str<E: Error>(self, _: &str) -> Result<Vec<String>, E> {
            Err(E::invalid_type(
                Unexpected::Other("a string (not shown: a URL may hold a password)"),
                &self,
            ))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut urls = Vec::new();
            while let Some(url) = seq.next_element::<String>()? {
                urls.push(url);
            }
            Ok(urls)
        }
    }
    d.deserialize_any(Urls).map(Some)
}

/// A secret (`admin_token`, `password`, `sentinel_password`): a string, and a value of another
/// type is refused without being quoted. serde's own message quotes it (`invalid type:
/// integer `98765432123``), and an error is logged and printed by `check-config`.
fn secret<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::{Error, Unexpected, Visitor};

    struct Text;
    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string in quotes")
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_i64<E: Error>(self, _: i64) -> Result<String, E> {
            Err(E::invalid_type(
                Unexpected::Other("a number (not shown)"),
                &self,
            ))
        }
        fn visit_u64<E: Error>(self, _: u64) -> Result<String, E> {
            Err(E::invalid_type(
                Unexpected::Other("a number (not shown)"),
                &self,
            ))
        }
        fn visit_f64<E: Error>(self, _: f64) -> Result<String, E> {
            Err(E::invalid_type(
                Unexpected::Other("a number (not shown)"),
                &self,
            ))
        }
        fn visit_bool<E: Error>(self, _: bool) -> Result<String, E> {
            Err(E::invalid_type(
                Unexpected::Other("a boolean (not shown)"),
                &self,
            ))
        }
    }
    d.deserialize_any(Text).map(Some)
}
