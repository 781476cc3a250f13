//! [`NodeOptions`]: how to open a connection to one Redis node, whoever names it (a URL in the
//! config, a cluster's slot map, a sentinel's answer): TLS, credentials, TCP settings and the
//! connect timeout, applied in this one place so that every node of every topology is reached
//! the same way.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{ConnectionAddr, ConnectionInfo};
use tollgate::StoreError;

use crate::error::classify;
use crate::tls::TlsOptions;

/// How to reach a Redis node.
#[derive(Clone)]
pub(crate) struct NodeOptions {
    pub(crate) tls: TlsOptions,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) tcp: TcpSettings,
    pub(crate) connect_timeout: Duration,
}

impl NodeOptions {
    /// `info` (from a URL or a discovered address) with these credentials, TCP settings and
    /// TLS verification applied. Credentials given here replace the URL's.
    ///
    /// # Errors
    /// [`StoreError::Tls`] when a TLS option is set but `info` is not a TLS address.
    pub(crate) fn apply(&self, info: ConnectionInfo) -> Result<ConnectionInfo, StoreError> {
        let mut redis = info.redis_settings().clone();
        if let Some(user) = &self.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        let addr = match info.addr().clone() {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: insecure || self.tls.insecure,
                tls_params,
            },
            other if self.tls.is_set() => {
                return Err(StoreError::Tls(
                    format!(
                        "tls_ca, tls_cert or tls_insecure is set but {} is not a TLS address: use rediss://",
                        describe_addr(&other)
                    )
                    .into(),
                ));
            }
            other => other,
        };
        Ok(info
            .set_addr(addr)
            .set_redis_settings(redis)
            .set_tcp_settings(self.tcp.clone()))
    }

    /// The address of `host:port`, over TLS when `tls`.
    pub(crate) fn addr(host: &str, port: u16, tls: bool) -> ConnectionAddr {
        match tls {
            true => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            },
            false => ConnectionAddr::Tcp(host.to_owned(), port),
        }
    }

    /// A client for `info` (already [`NodeOptions::apply`]'d), with the certificates.
    ///
    /// # Errors
    /// [`StoreError::Tls`] for a PEM that cannot be read; others as the `redis` crate says.
    pub(crate) fn client(&self, info: ConnectionInfo) -> Result<redis::Client, StoreError> {
        match self.tls.certificates() {
            Some(certs) => redis::Client::build_with_tls(info, certs).map_err(|e| {
                StoreError::Tls(format!("cannot use the TLS certificates: {e}").into())
            }),
            None => redis::Client::open(info).map_err(classify),
        }
    }

    /// A connection manager on `client`: one multiplexed connection that reconnects after a
    /// failure.
    ///
    /// # Errors
    /// The first connection's failure, classified.
    pub(crate) async fn manager(
        &self,
        client: redis::Client,
    ) -> Result<ConnectionManager, StoreError> {
        self.manager_retrying(client, 2).await
    }

    /// [`NodeOptions::manager`], its first connection tried `1 + retries` times.
    ///
    /// # Errors
    /// The first connection's failure, classified.
    pub(crate) async fn manager_retrying(
        &self,
        client: redis::Client,
        retries: usize,
    ) -> Result<ConnectionManager, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(retries)
            .set_max_delay(Duration::from_millis(200));
        ConnectionManager::new_with_config(client, config)
            .await
            .map_err(classify)
    }
}

/// `host:port` (never credentials).
pub(crate) fn describe_addr(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}"),
        ConnectionAddr::Unix(path) => format!("unix://{}", path.display()),
        other => format!("{other:?}"),
    }
}

impl fmt::Debug for NodeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeOptions")
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}
