//! `[store]`, from the raw shape to a [`StoreConfig`]: which backend, its limits (timeout, key
//! cap, deny cache, batches) and, for Redis, its TLS and credentials, files read relative to
//! the config file's directory.
//!
//! Apart from the other sections (`validate`) because it is the largest: three kinds of Redis,
//! files to read, and fields that only make sense together (a certificate and its key, TLS
//! and a `rediss://` URL).

use std::path::{Path, PathBuf};

use tollgate::{DEFAULT_DENY_CACHE_ENTRIES, DEFAULT_MAX_KEYS, Namespace};
use tollgate_redis::DEFAULT_MAX_BATCH;

use super::raw::{RawConfig, RawStore};
use super::{
    Backend, ConfigError, DEFAULT_TIMEOUT, FieldError, MAX_MAX_BATCH, MAX_TIMEOUT, RedisConnection,
    RedisUrl, Secret, StoreConfig,
};
use crate::duration;

/// `[store]` (with `TOLLGATE_REDIS_URL` applied).
pub(super) fn store(raw: &RawConfig, origin: &str) -> Result<StoreConfig, ConfigError> {
    let invalid = |field: &str, e: FieldError| ConfigError::invalid(origin, field, e);
    let store = &raw.store;
    let backend = backend(raw, origin)?;
    let connection = redis_connection(raw, origin, &backend)?;
    let timeout = match &store.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => {
            let t = duration::parse(t).map_err(|e| invalid("store.timeout", e.into()))?;
            if t.is_zero() || t > MAX_TIMEOUT {
                return Err(invalid("store.timeout", FieldError::TimeoutOutOfRange));
            }
            t
        }
    };
    let namespace = match &store.prefix {
        None => Namespace::default(),
        Some(p) => Namespace::new(p.as_str())
            .map_err(|e| invalid(&format!("store.{}", e.field()), FieldError::Limit(e)))?,
    };
    let max_keys = match store.max_keys {
        Some(0) => return Err(invalid("store.max_keys", FieldError::Zero)),
        Some(n) => n,
        None => DEFAULT_MAX_KEYS,
    };
    let deny_cache_entries = match (store.deny_cache, store.deny_cache_entries) {
        (_, Some(0)) => return Err(invalid("store.deny_cache_entries", FieldError::Zero)),
        (Some(false), _) => 0,
        (Some(true), n) => n.unwrap_or(DEFAULT_DENY_CACHE_ENTRIES),
        (None, n) if backend != Backend::Memory => n.unwrap_or(DEFAULT_DENY_CACHE_ENTRIES),
        (None, _) => 0,
    };
    let max_batch = match store.max_batch {
        Some(0) => return Err(invalid("store.max_batch", FieldError::Zero)),
        Some(n) if n > MAX_MAX_BATCH => {
            return Err(invalid(
                "store.max_batch",
                FieldError::TooLarge(MAX_MAX_BATCH),
            ));
        }
        Some(n) => n,
        None => DEFAULT_MAX_BATCH,
    };
    Ok(StoreConfig {
        backend,
        timeout,
        namespace,
        max_keys,
        deny_cache_entries,
        max_batch: store.coalesce.unwrap_or(true).then_some(max_batch),
        connection,
    })
}

/// The backend: `redis`, `cluster`, `sentinel` (with `sentinel_master`), at most one of
/// them, else the memory store; the `sentinel_*` fields only with `sentinel`.
fn backend(raw: &RawConfig, origin: &str) -> Result<Backend, ConfigError> {
    let invalid = |field: &str, e: FieldError| ConfigError::invalid(origin, field, e);
    let store = &raw.store;
    let redis_url = |field: &str, url: &str| {
        RedisUrl::parse(url).map_err(|e| invalid(field, FieldError::from(e)))
    };
    let given = [
        store.redis.is_some(),
        store.cluster.is_some(),
        store.sentinel.is_some(),
    ];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(invalid("store", FieldError::RedisAndCluster));
    }
    let backend = match (&store.redis, &store.cluster, &store.sentinel) {
        (Some(url), _, _) => Backend::Redis(redis_url(raw.name_of("store.redis"), url)?),
        (_, Some(urls), _) if urls.is_empty() => {
            return Err(invalid("store.cluster", FieldError::NoClusterNodes));
        }
        (_, Some(urls), _) => Backend::Cluster(
            urls.iter()
                .enumerate()
                .map(|(i, url)| redis_url(&format!("store.cluster[{i}]"), url))
                .collect::<Result<_, _>>()?,
        ),
        (_, _, Some(urls)) if urls.is_empty() => {
            return Err(invalid("store.sentinel", FieldError::NoClusterNodes));
        }
        (_, _, Some(urls)) => {
            let master = match store.sentinel_master.as_deref() {
                None => {
                    return Err(invalid(
                        "store.sentinel",
                        FieldError::Needs("sentinel_master"),
                    ));
                }
                Some("") => return Err(invalid("store.sentinel_master", FieldError::Empty)),
                Some(m) => m.to_owned(),
            };
            Backend::Sentinel {
                sentinels: urls
                    .iter()
                    .enumerate()
                    .map(|(i, url)| redis_url(&format!("store.sentinel[{i}]"), url))
                    .collect::<Result<_, _>>()?,
                master,
            }
        }
        (None, None, None) => Backend::Memory,
    };
    if store.sentinel.is_none() {
        for (field, set) in [
            ("store.sentinel_master", store.sentinel_master.is_some()),
            ("store.sentinel_username", store.sentinel_username.is_some()),
            ("store.sentinel_password", store.sentinel_password.is_some()),
        ] {
            if set {
                return Err(invalid(field, FieldError::Needs("sentinel")));
            }
        }
    }
    Ok(backend)
}

/// The files `[store]` names, read relative to the config file's directory; errors name the
/// field as written (or the variable that replaced it).
struct Files<'a> {
    raw: &'a RawConfig,
    origin: &'a str,
    base: &'a Path,
}

impl Files<'_> {
    fn invalid(&self, field: &str, e: FieldError) -> ConfigError {
        ConfigError::invalid(self.origin, self.raw.name_of_any(field), e)
    }

    /// The bytes of `path`.
    fn read(&self, field: &str, path: &str) -> Result<(PathBuf, Vec<u8>), ConfigError> {
        let path = self.base.join(path);
        crate::file::read(&path)
            .map_err(|source| {
                self.invalid(
                    field,
                    FieldError::File {
                        path: path.display().to_string(),
                        source,
                    },
                )
            })
            .map(|bytes| (path, bytes))
    }

    /// The bytes of `path`, which must hold a PEM `what` (`marker` in its text).
    fn pem(
        &self,
        field: &str,
        path: &str,
        what: &'static str,
        marker: &str,
    ) -> Result<Vec<u8>, ConfigError> {
        let (path, bytes) = self.read(field, path)?;
        if !String::from_utf8_lossy(&bytes).contains(marker) {
            return Err(self.invalid(
                field,
                FieldError::NotPem {
                    path: path.display().to_string(),
                    what,
                },
            ));
        }
        Ok(bytes)
    }
}

/// `[store]`'s TLS and credentials, files read (relative to the config file's directory).
fn redis_connection(
    raw: &RawConfig,
    origin: &str,
    backend: &Backend,
) -> Result<RedisConnection, ConfigError> {
    let store = &raw.store;
    let base = Path::new(origin).parent().unwrap_or(Path::new(""));
    let files = Files { raw, origin, base };
    let tls_ca = store
        .tls_ca
        .as_deref()
        .map(|p| {
            files.pem(
                "store.tls_ca",
                p,
                "certificate",
                "-----BEGIN CERTIFICATE-----",
            )
        })
        .transpose()?;
    let connection = RedisConnection {
        tls_ca,
        tls_client: tls_client(store, &files)?,
        tls_insecure: store.tls_insecure.unwrap_or(false),
        username: store.username.clone(),
        password: password(store, &files)?,
        sentinel_username: store.sentinel_username.clone(),
        sentinel_password: store.sentinel_password.as_deref().map(Secret::new),
    };
    fits_backend(store, &files, backend, &connection)?;
    Ok(connection)
}

/// `tls_cert` and `tls_key`: both or neither.
fn tls_client(
    store: &RawStore,
    files: &Files<'_>,
) -> Result<Option<(Vec<u8>, Secret)>, ConfigError> {
    Ok(match (&store.tls_cert, &store.tls_key) {
        (Some(_), None) => {
            return Err(files.invalid("store.tls_cert", FieldError::Needs("tls_key")));
        }
        (None, Some(_)) => {
            return Err(files.invalid("store.tls_key", FieldError::Needs("tls_cert")));
        }
        (Some(cert), Some(key)) => {
            let cert = files.pem(
                "store.tls_cert",
                cert,
                "certificate",
                "-----BEGIN CERTIFICATE-----",
            )?;
            let key = files.pem("store.tls_key", key, "private key", "PRIVATE KEY-----")?;
            Some((
                cert,
                Secret::new(String::from_utf8_lossy(&key).into_owned()),
            ))
        }
        (None, None) => None,
    })
}

/// `password` or `password_file`, not both.
fn password(store: &RawStore, files: &Files<'_>) -> Result<Option<Secret>, ConfigError> {
    Ok(match (&store.password, &store.password_file) {
        (Some(_), Some(_)) => {
            return Err(files.invalid("store.password", FieldError::Excludes("password_file")));
        }
        (Some(p), None) => Some(Secret::new(p.as_str())),
        (None, Some(path)) => {
            let (_, bytes) = files.read("store.password_file", path)?;
            let text = String::from_utf8_lossy(&bytes);
            // A file written by `echo` or a secret mount ends in a newline: not the password's.
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                return Err(files.invalid("store.password_file", FieldError::Empty));
            }
            Some(Secret::new(text))
        }
        (None, None) => None,
    })
}

/// Redis fields need a Redis backend, and TLS fields a `rediss://` URL.
fn fits_backend(
    store: &RawStore,
    files: &Files<'_>,
    backend: &Backend,
    connection: &RedisConnection,
) -> Result<(), ConfigError> {
    let tls_field = [
        ("store.tls_ca", store.tls_ca.is_some()),
        ("store.tls_cert", store.tls_cert.is_some()),
        ("store.tls_insecure", store.tls_insecure == Some(true)),
    ]
    .into_iter()
    .find_map(|(field, set)| set.then_some(field));
    let plain = |urls: &[RedisUrl]| urls.iter().any(|u| !u.expose().starts_with("rediss://"));
    match backend {
        Backend::Memory => {
            let redis_only = [
                ("store.username", store.username.is_some()),
                ("store.password", connection.password.is_some()),
                ("store.tls_ca", store.tls_ca.is_some()),
                ("store.tls_cert", store.tls_cert.is_some()),
                ("store.tls_insecure", store.tls_insecure.is_some()),
            ];
            if let Some((field, _)) = redis_only.iter().find(|(_, set)| *set) {
                return Err(files.invalid(field, FieldError::Needs("redis, cluster or sentinel")));
            }
        }
        Backend::Redis(url) if tls_field.is_some() && plain(std::slice::from_ref(url)) => {
            return Err(files.invalid(tls_field.unwrap_or_default(), FieldError::NotTls));
        }
        Backend::Cluster(urls) if tls_field.is_some() && plain(urls) => {
            return Err(files.invalid(tls_field.unwrap_or_default(), FieldError::NotTls));
        }
        _ => {}
    }
    Ok(())
}
