//! [`SentinelLink`]: one sentinel of the group, with the connection the store asks it on.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionInfo, IntoConnectionInfo as _};
use tollgate::StoreError;

use super::rank::Addr;
use crate::error::classify;
use crate::node_options::{NodeOptions, describe_addr};

/// One sentinel: how to reach it (its own credentials and TLS applied) and the connection
/// kept to it between looks (the follower asks every sentinel every second; a new connection
/// each time would be a TCP and maybe a TLS handshake each).
pub(super) struct SentinelLink {
    client: redis::Client,
    /// `redis://host:port` (never credentials), for messages.
    name: String,
    /// The connection of the last answer; dropped after any failure.
    conn: Mutex<Option<MultiplexedConnection>>,
}

impl SentinelLink {
    /// The sentinel at `url`, reached with `options`.
    ///
    /// # Errors
    /// An unparsable URL, or a TLS option on a plaintext one.
    pub(super) fn new(url: &str, options: &NodeOptions) -> Result<SentinelLink, StoreError> {
        let info: ConnectionInfo = url.into_connection_info().map_err(classify)?;
        let info = options.apply(info)?;
        let name = describe_addr(info.addr());
        Ok(SentinelLink {
            client: options.client(info)?,
            name,
            conn: Mutex::new(None),
        })
    }

    /// `redis://host:port`, for messages.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// A client for this sentinel (its `+switch-master` subscription).
    pub(super) fn client(&self) -> redis::Client {
        self.client.clone()
    }

    /// The address this sentinel names for `master_name` (`SENTINEL get-master-addr-by-name`),
    /// `None` when it knows no such master; within `within`, connection included.
    ///
    /// # Errors
    /// The connection's or the reply's failure, classified; [`StoreError::Connection`] when it
    /// did not answer within `within`.
    pub(super) async fn ask(
        &self,
        master_name: &str,
        within: Duration,
    ) -> Result<Option<Addr>, StoreError> {
        let cached = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let asked = async {
            let mut conn = match cached {
                Some(conn) => conn,
                None => self
                    .client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(classify)?,
            };
            let reply: Option<Addr> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master_name)
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            Ok::<_, StoreError>((reply, conn))
        };
        let result = match tokio::time::timeout(within, asked).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Connection(
                format!("sentinel {} did not answer within {within:?}", self.name).into(),
            )),
        };
        let mut slot = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok((reply, conn)) => {
                *slot = Some(conn);
                Ok(reply)
            }
            Err(e) => {
                *slot = None;
                Err(e)
            }
        }
    }
}
