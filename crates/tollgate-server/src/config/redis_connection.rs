//! [`RedisConnection`]: how the service reaches its Redis beyond the URL — TLS material,
//! credentials, Sentinel's own credentials — read and checked when the config is loaded, so
//! that an unreadable CA file or a missing key is a config error naming the field, and
//! printed redacted: `Debug` never shows a password or a private key.

use std::fmt;

use tollgate_redis::RedisStoreBuilder;

use super::Secret;

/// TLS, credentials and Sentinel credentials for the Redis store (`[store]`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisConnection {
    /// `tls_ca`: PEM CAs to trust instead of the system's roots.
    pub tls_ca: Option<Vec<u8>>,
    /// `tls_cert` + `tls_key`: the client certificate and its key (PEM).
    pub tls_client: Option<(Vec<u8>, Secret)>,
    /// `tls_insecure`: no certificate verification.
    pub tls_insecure: bool,
    /// `username`.
    pub username: Option<String>,
    /// `password` or the content of `password_file`.
    pub password: Option<Secret>,
    /// `sentinel_username`.
    pub sentinel_username: Option<String>,
    /// `sentinel_password`.
    pub sentinel_password: Option<Secret>,
}

impl RedisConnection {
    /// Whether a TLS option is set.
    pub fn tls(&self) -> bool {
        self.tls_ca.is_some() || self.tls_client.is_some() || self.tls_insecure
    }

    /// `builder` with these options.
    pub fn apply(&self, mut builder: RedisStoreBuilder) -> RedisStoreBuilder {
        if let Some(ca) = &self.tls_ca {
            builder = builder.tls_ca(ca.clone());
        }
        if let Some((cert, key)) = &self.tls_client {
            builder = builder.tls_client_cert(cert.clone(), key.expose().as_bytes().to_vec());
        }
        if self.tls_insecure {
            builder = builder.tls_insecure(true);
        }
        if let Some(user) = &self.username {
            builder = builder.username(user.clone());
        }
        if let Some(password) = &self.password {
            builder = builder.password(password.expose());
        }
        if self.sentinel_username.is_some() || self.sentinel_password.is_some() {
            builder = builder.sentinel_credentials(
                self.sentinel_username.clone(),
                self.sentinel_password
                    .as_ref()
                    .map(|p| p.expose().to_owned()),
            );
        }
        builder
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("tls_ca", &self.tls_ca.as_ref().map(|_| "<pem>"))
            .field("tls_client", &self.tls_client.as_ref().map(|_| "<pem>"))
            .field("tls_insecure", &self.tls_insecure)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &self.sentinel_password)
            .finish()
    }
}
