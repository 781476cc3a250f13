//! Resets: a key deleted and its reset published, so that other instances' deny caches forget
//! it, and the subscription that hears other instances' resets (`src/resets.rs`).

use tollgate::{Key, StoreError};

use super::connection::Connection;
use super::redis_store::RedisStore;
use crate::error::classify;
use crate::resets::reset_channel;

impl RedisStore {
    /// Deletes `keys` and publishes each on its prefix's reset channel, so that other
    /// instances' deny caches forget it (`resets.rs`): in one round trip on a single Redis; on
    /// a cluster the channel is not in the keys' slot, so the publishes follow the delete.
    pub(super) async fn delete(&self, keys: &[&Key]) -> Result<(), StoreError> {
        let mut del = redis::cmd("DEL");
        for k in keys {
            del.arg(k.as_str());
        }
        let mut publish = redis::pipe();
        for k in keys {
            publish
                .cmd("PUBLISH")
                .arg(reset_channel(k.prefix()))
                .arg(k.as_str())
                .ignore();
        }
        let result: Result<(), redis::RedisError> = match &self.inner.connection {
            Connection::Cluster(_) => {
                let deleted: Result<i64, _> = self.inner.connection.query(&del).await;
                match deleted {
                    Ok(_) => self.inner.connection.query_pipe(&publish).await,
                    Err(e) => Err(e),
                }
            }
            node => {
                let mut both = redis::pipe();
                both.add_command(del).ignore();
                for k in keys {
                    both.cmd("PUBLISH")
                        .arg(reset_channel(k.prefix()))
                        .arg(k.as_str())
                        .ignore();
                }
                node.query_pipe(&both).await
            }
        };
        self.heard(&result, || keys.first().map(|k| crate::slot_of(k.as_str())));
        result.map_err(classify)
    }

    /// Subscribes to the resets of keys under `prefix` (published by every instance's
    /// reset) and calls `on_reset` with each reset key, until the returned task is aborted;
    /// over this store's own TLS and credentials, and behind Sentinel on the current master.
    /// See [`crate::reset_channel`].
    pub fn listen_for_resets(
        &self,
        prefix: &str,
        on_reset: impl Fn(&str) + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        crate::resets::listen(self.inner.subscriber.clone(), prefix, on_reset)
    }
}
